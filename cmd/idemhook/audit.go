package main

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
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/sqlitestore"
)

// auditTrail is the gateway's audit trail: a recorder fed by every
// delivery, and the admin handler that reads the trail back.
type auditTrail struct {
	rec     *audit.Recorder // nil for sink none
	querier audit.Querier   // nil when the sink can't be queried (log, none)
	sink    string
}

// openAudit opens the configured sink and starts its recorder.
func openAudit(ctx context.Context, ac AuditConfig, files *sqliteFiles, logger *slog.Logger, m *metrics) (*auditTrail, error) {
	t := &auditTrail{sink: ac.Sink}
	var sink audit.Sink
	switch ac.Sink {
	case "none":
		return t, nil
	case "log":
		sink = audit.NewLog(logger)
	case "sqlite":
		db, err := files.open(ac.Path)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		// The admin API's reads (the console's statistics scan a day of
		// the trail) get their own connection, not the one the store
		// shares with the sink's writes; an in-memory database is one
		// connection's own, so it has none.
		var rdb *sql.DB
		if ac.Path != ":memory:" {
			if rdb, err = sqlitestore.Open(ac.Path); err != nil {
				return nil, fmt.Errorf("audit: %w", err)
			}
			files.rs.add(rdb.Close)
		}
		s, err := audit.NewSQLite(db, audit.SQLiteConfig{Retention: ac.Retention, Logger: logger, ReadDB: rdb})
		if err != nil {
			return nil, fmt.Errorf("audit sqlite %s: %w", ac.Path, err)
		}
		files.rs.add(s.Close)
		sink, t.querier = s, s
	case "postgres":
		pool, err := files.pgPool(ctx, ac.URL) // the store's pool when they share the database
		if err != nil {
			return nil, fmt.Errorf("audit postgres %s: %w", redactURL(ac.URL), err)
		}
		s, err := audit.NewPostgres(ctx, pool, audit.PostgresConfig{Retention: ac.Retention, Table: ac.Table, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("audit postgres %s: %w", redactURL(ac.URL), err)
		}
		files.rs.add(s.Close)
		sink, t.querier = s, s
	default:
		return nil, fmt.Errorf("unknown audit sink %q", ac.Sink)
	}
	t.rec = audit.NewRecorder(sink, audit.RecorderConfig{Logger: logger})
	files.rs.add(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return t.rec.Close(ctx)
	})
	if err := m.registerAudit(t.rec); err != nil {
		return nil, err
	}
	return t, nil
}

// record adds one delivery to the trail; it never blocks.
func (t *auditTrail) record(route string, d idemhook.DeliveryInfo) {
	if t.rec == nil {
		return
	}
	t.rec.Record(audit.Entry{
		Time:          time.Now().Add(-d.Duration),
		Route:         route,
		Source:        d.Source,
		Key:           d.Key,
		Outcome:       string(d.Outcome),
		Status:        d.Status,
		Duration:      d.Duration,
		RequestBytes:  d.RequestBytes,
		ResponseBytes: d.ResponseBytes,
	})
}

// deliveryJSON is an audit entry as GET /admin/deliveries shows it.
type deliveryJSON struct {
	ID            int64     `json:"id"`
	Time          time.Time `json:"time"`
	Route         string    `json:"route"`
	Source        string    `json:"source"`
	Key           string    `json:"key"`
	Outcome       string    `json:"outcome"`
	Status        int       `json:"status"`
	DurationMS    float64   `json:"duration_ms"`
	RequestBytes  int64     `json:"request_bytes"`
	ResponseBytes int64     `json:"response_bytes"`
}

type deliveriesJSON struct {
	Deliveries []deliveryJSON `json:"deliveries"`
	Next       string         `json:"next,omitempty"`
}

// serveDeliveries is GET /admin/deliveries?source=&outcome=&route=&since=&until=&limit=&cursor=
// (since and until in RFC 3339): newest first, one page at a time; follow
// "next" as cursor for the following page.
func (t *auditTrail) serveDeliveries(w http.ResponseWriter, r *http.Request) {
	if t.querier == nil {
		writeProblem(w, http.StatusNotImplemented, "audit trail not queryable",
			fmt.Sprintf("the audit sink is %q; set audit.sink to sqlite or postgres to query deliveries here", t.sink))
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
	out := deliveriesJSON{Deliveries: make([]deliveryJSON, 0, len(page.Entries)), Next: page.Next}
	for _, e := range page.Entries {
		out.Deliveries = append(out.Deliveries, deliveryJSON{
			ID: e.ID, Time: e.Time.UTC(), Route: e.Route, Source: e.Source, Key: e.Key,
			Outcome: e.Outcome, Status: e.Status, DurationMS: float64(e.Duration.Microseconds()) / 1000,
			RequestBytes: e.RequestBytes, ResponseBytes: e.ResponseBytes,
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
	if outcomes := idemhook.Outcomes(); f.Outcome != "" && !slices.Contains(outcomes, idemhook.Outcome(f.Outcome)) {
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
