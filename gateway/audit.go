package gateway

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/pgaudit"
	"github.com/idemhook/idemhook/audit/redisaudit"
	"github.com/idemhook/idemhook/audit/sqliteaudit"
	"github.com/idemhook/idemhook/audithook"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/queue"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// auditTrail is the gateway's audit trail: a recorder fed by every
// delivery, and the admin handler that reads the trail back.
type auditTrail struct {
	rec      *audit.Recorder // nil for sink none
	hook     *audithook.Hook // records each delivery in rec; nil for sink none
	querier  audit.Querier   // nil when the sink can't be queried (log, none)
	sink     string
	desc     string // the sink as /readyz names it, e.g. "postgres postgres://x@db/audit"
	instance string
	decide   bool                                    // entries carry their decision (sink log at level debug)
	routes   atomic.Pointer[map[string]config.Route] // by path, for reasons and decisions
}

// setRoutes gives the trail the routes in service (at start, on reload).
func (t *auditTrail) setRoutes(routes []config.Route) {
	m := make(map[string]config.Route, len(routes))
	for _, rc := range routes {
		m[rc.Path] = rc
	}
	t.routes.Store(&m)
}

// openAudit opens the configured sink and starts its recorder. A sink on a
// server (postgres) that can't be reached is not an error: its entries wait
// in the recorder, which retries in the background.
func openAudit(ctx context.Context, cfg *config.Config, files *connections, logger *slog.Logger, m *metrics) (*auditTrail, error) {
	ac := cfg.Audit
	t := &auditTrail{sink: ac.Sink, desc: ac.Sink, instance: ac.Instance}
	t.setRoutes(cfg.Routes)
	var sink audit.Sink
	switch ac.Sink {
	case "none":
		return t, nil
	case "log":
		sink = audit.NewLog(logger)
		t.decide = logger.Enabled(ctx, slog.LevelDebug)
	case "memory":
		r, err := audit.NewRing(audit.RingConfig{Size: ac.Size})
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		sink, t.querier = r, r
	case "redis":
		if files.redis == nil {
			return nil, errors.New("audit sink redis needs the redis store")
		}
		s, err := redisaudit.New(files.redis, redisaudit.Config{Key: ac.Key, MaxLen: int64(ac.Size)})
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		sink, t.querier = s, s
		t.desc = "redis stream " + s.Key()
	case "sqlite":
		db, err := files.open(ac.Path)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		// The admin API's reads (the console's statistics scan a day of
		// the trail) get their own connection, not the one the store
		// shares with the sink's writes. An in-memory database is one
		// connection's own, so it has none.
		var rdb *sql.DB
		if ac.Path != ":memory:" {
			if rdb, err = sqlitestore.Open(ac.Path); err != nil {
				return nil, fmt.Errorf("audit: %w", err)
			}
			files.rs.add(rdb.Close)
		}
		s, err := sqliteaudit.New(db, sqliteaudit.Config{Retention: ac.Retention, Logger: logger, ReadDB: rdb})
		if err != nil {
			return nil, fmt.Errorf("audit sqlite %s: %w", ac.Path, err)
		}
		files.rs.add(s.Close)
		sink, t.querier = s, s
		t.desc = "sqlite " + ac.Path
	case "postgres":
		pool, err := files.pgPool(ctx, ac.URL) // the store's pool when they share the database; connects lazily
		if err != nil {
			return nil, fmt.Errorf("audit postgres %s: %w", config.RedactURL(ac.URL), err)
		}
		s := &lazyPostgres{pool: pool, cfg: pgaudit.Config{Retention: ac.Retention, Table: ac.Table, Logger: logger}}
		files.rs.add(s.Close) // before the pool closes
		sink, t.querier = s, s
		t.desc = "postgres " + config.RedactURL(ac.URL)
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = s.open(sctx)
		cancel()
		if err != nil {
			logger.Warn("idemhook audit sink unreachable at start; entries wait in memory (up to audit.buffer) and are written once it answers",
				"sink", t.desc, "buffer", ac.Buffer, "err", err)
		}
	default:
		return nil, fmt.Errorf("unknown audit sink %q", ac.Sink)
	}
	t.rec = audit.NewRecorder(sink, audit.RecorderConfig{QueueSize: ac.Buffer, Logger: logger})
	// The entries' route is the pattern the delivery matched: a route's
	// path, by which the settings of its reasons are found.
	hook, err := audithook.New(audithook.Config{
		Recorder:  t.rec,
		Instance:  t.instance,
		Decisions: t.decide,
		Settings:  func(route string) idemhook.Route { return (*t.routes.Load())[route].Route },
	})
	if err != nil {
		return nil, err // not reached: t.rec is set
	}
	t.hook = hook
	files.rs.add(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return t.rec.Close(ctx)
	})
	if err := m.registerAudit(t.rec); err != nil {
		return nil, err
	}
	m.gaugeFunc("idemhook_audit_waiting",
		"Audit entries waiting for the sink.",
		func() float64 { n, _ := t.rec.Health(); return float64(n) })
	m.gaugeFunc("idemhook_audit_sink_up",
		"1 while the audit sink takes entries, 0 while it refuses them (they wait and are retried).",
		func() float64 {
			if _, err := t.rec.Health(); err != nil {
				return 0
			}
			return 1
		})
	return t, nil
}

// health says whether the sink takes entries, for /readyz.
func (t *auditTrail) health() (string, bool) {
	if t.rec == nil {
		return "audit (none): off", true
	}
	waiting, err := t.rec.Health()
	if l, ok := t.querier.(*lazyPostgres); ok && err == nil {
		err = l.openErr() // down since the start, nothing written yet
	}
	if err != nil {
		return fmt.Sprintf("audit (%s): down, %d entries waiting (retried in the background; deliveries are not affected): %v", t.desc, waiting, err), false
	}
	return fmt.Sprintf("audit (%s): ok", t.desc), true
}

// record adds one delivery to the trail. It never blocks.
func (t *auditTrail) record(d idemhook.DeliveryInfo) {
	if t.hook != nil {
		t.hook.OnDelivery(d)
	}
}

// The outcomes of the entries a queued event's end adds to the trail: the
// backend's answer to the attempt that delivered it, or why it is dead.
// They are not deliveries of the provider's, so the console's counts of
// deliveries leave them out.
const (
	queueOutcomePrefix  = "queue_"
	outcomeQueueDeliver = "queue_delivered"
	outcomeQueueDead    = "queue_dead"
)

// recordAttempt adds to the trail the end of a queued event: the attempt
// that delivered it (the backend's status and latency, the attempt's
// number) or made it dead (its reason). Retries are in the queue's own
// record of attempts (GET /admin/queue/events/{id}).
func (t *auditTrail) recordAttempt(o queue.Observation) {
	if t.rec == nil || o.Superseded || o.Cut || o.Verdict == queue.Retry {
		return
	}
	path, dest, _ := strings.Cut(o.Route, "#") // a destination's queue: <path>#<name>
	rc, ok := (*t.routes.Load())[path]
	if !ok {
		return
	}
	e := audit.Entry{
		Time:          time.Now(),
		Route:         path,
		Source:        rc.Route.Source,
		Outcome:       outcomeQueueDeliver,
		Status:        o.Result.Status,
		Duration:      o.Latency,
		RequestBytes:  int64(len(o.Event.Body)),
		ResponseBytes: int64(len(o.Result.BodyHead)),
		Reason:        fmt.Sprintf("event %d, attempt %d", o.Event.ID, o.Event.Attempt),
		Instance:      t.instance,
	}
	storeKey := o.Event.Key
	if dest != "" {
		// The event's key, which its provider's deliveries were recorded
		// under; the destination's ends with #<name>.
		storeKey = strings.TrimSuffix(storeKey, "#"+dest)
		e.Reason = "destination " + dest + ", " + e.Reason
	}
	e.Key, e.Scope = splitStoreKey(storeKey, rc.Route.Source)
	if o.Verdict == queue.Kill {
		e.Outcome = outcomeQueueDead
		e.Reason += ": " + o.Reason
	}
	t.rec.Record(e)
}

// splitStoreKey returns the key part and the scope of a store key
// idem:<source>[@<scope>]:<key>. A scope holds no ':' of its own in the
// scopes the gateway makes (a route's path).
func splitStoreKey(storeKey, source string) (key, scope string) {
	rest, ok := strings.CutPrefix(storeKey, "idem:"+source)
	switch {
	case !ok:
		return storeKey, ""
	case strings.HasPrefix(rest, ":"):
		return rest[1:], ""
	case strings.HasPrefix(rest, "@"):
		if scope, key, ok := strings.Cut(rest[1:], ":"); ok {
			return key, scope
		}
	}
	return rest, ""
}

// lazyPostgres is the PostgreSQL sink, opened (its table made) on first use
// and again after a failure, so that a server down at start or later
// delays the trail instead of stopping the gateway. Its pool belongs to the
// gateway's resources (the store may share it).
type lazyPostgres struct {
	cfg  pgaudit.Config
	mu   sync.Mutex
	pool *pgxpool.Pool
	sink *pgaudit.Sink
	fail error // why the last open failed, until one succeeds
}

// openErr is why the sink could not be opened, nil once it is open.
func (l *lazyPostgres) openErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fail
}

var (
	_ audit.Sink    = (*lazyPostgres)(nil)
	_ audit.Querier = (*lazyPostgres)(nil)
)

func (l *lazyPostgres) open(ctx context.Context) (*pgaudit.Sink, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sink != nil {
		return l.sink, nil
	}
	s, err := pgaudit.New(ctx, l.pool, l.cfg)
	if err != nil {
		l.fail = err
		return nil, err
	}
	l.sink, l.fail = s, nil
	return s, nil
}

func (l *lazyPostgres) Write(ctx context.Context, entries []audit.Entry) error {
	s, err := l.open(ctx)
	if err != nil {
		return err
	}
	return s.Write(ctx, entries)
}

func (l *lazyPostgres) Query(ctx context.Context, f audit.Filter) (audit.Page, error) {
	s, err := l.open(ctx)
	if err != nil {
		return audit.Page{}, err
	}
	return s.Query(ctx, f)
}

// Close stops the sink's pruning.
func (l *lazyPostgres) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sink != nil {
		l.sink.Close()
	}
	return nil
}

// serveDeliveries is GET /admin/deliveries?source=&outcome=&route=&since=&until=&limit=&cursor=
// (since and until in RFC 3339). It answers newest first, one page at a
// time. Follow "next" as cursor for the following page.
func (t *auditTrail) serveDeliveries(w http.ResponseWriter, r *http.Request) {
	if t.querier == nil {
		writeProblem(w, http.StatusNotImplemented, "audit trail not queryable",
			fmt.Sprintf("the audit sink is %q; set audit.sink to sqlite, postgres, memory or redis to query deliveries here", t.sink))
		return
	}
	f, err := parseFilter(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "bad query", err.Error())
		return
	}
	page, err := t.querier.Query(r.Context(), f)
	if errors.Is(err, audit.ErrBadCursor) {
		writeProblem(w, http.StatusBadRequest, "bad query", "cursor: not one returned as next by this endpoint")
		return
	}
	if err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "audit query failed", err.Error())
		return
	}
	out := adminapi.Deliveries{Deliveries: make([]adminapi.Delivery, 0, len(page.Entries)), Next: page.Next}
	for _, e := range page.Entries {
		out.Deliveries = append(out.Deliveries, adminapi.Delivery{
			ID: e.ID, Time: e.Time.UTC(), Route: e.Route, Source: e.Source, Key: e.Key,
			Outcome: e.Outcome, Status: e.Status, DurationMS: float64(e.Duration.Microseconds()) / 1000,
			RequestBytes: e.RequestBytes, ResponseBytes: e.ResponseBytes, Reason: e.Reason, Instance: e.Instance,
			Scope: e.Scope,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func parseFilter(r *http.Request) (audit.Filter, error) {
	q := r.URL.Query()
	for name := range q {
		if !slices.Contains([]string{"source", "outcome", "route", "since", "until", "limit", "cursor"}, name) {
			return audit.Filter{}, fmt.Errorf("unknown parameter %q (known: source, outcome, route, since, until, limit, cursor)", name)
		}
	}
	f := audit.Filter{
		Source:  trimmed(r, "source"),
		Outcome: trimmed(r, "outcome"),
		Route:   trimmed(r, "route"),
		Cursor:  trimmed(r, "cursor"),
	}
	if outcomes := append(deliveryOutcomes(), outcomeQueueDeliver, outcomeQueueDead); f.Outcome != "" && !slices.Contains(outcomes, idemhook.Outcome(f.Outcome)) {
		names := make([]string, len(outcomes))
		for i, o := range outcomes {
			names[i] = string(o)
		}
		return f, fmt.Errorf("outcome: unknown %q (known: %s)", f.Outcome, strings.Join(names, ", "))
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := trimmed(r, p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, fmt.Errorf("%s: %q is not an RFC 3339 time (e.g. 2026-11-30T04:00:00Z)", p.name, v)
			}
			*p.dst = t
		}
	}
	if v := trimmed(r, "limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, fmt.Errorf("limit: %q is not a positive integer (at most %d)", v, audit.MaxLimit)
		}
		f.Limit = min(n, audit.MaxLimit)
	}
	return f, nil
}

var _ audit.Counter = (*lazyPostgres)(nil)

// Counts counts the trail's entries per source and outcome (GET
// /admin/stats).
func (l *lazyPostgres) Counts(ctx context.Context, f audit.Filter) ([]audit.Count, error) {
	s, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	return s.Counts(ctx, f)
}
