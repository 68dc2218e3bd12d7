package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/httpstatus"
	"github.com/idemhook/idemhook/queue"
)

// Headers the backend gets with every attempt of a queued event.
const (
	// HeaderIdempotencyKey is the event's store key, the same on every
	// attempt: a backend that records it makes its effects once.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderAttempt is the attempt's number, 1 for the first; it never
	// goes down, redrives included.
	HeaderAttempt = "Idempotent-Attempt"
	// HeaderEventID is the event's number in the queue, as the admin API
	// and the console show it.
	HeaderEventID = "Idempotent-Event-Id"
	// HeaderFence is the attempt's fencing token, in decimal, sent on every
	// route: on the proxy path (and a respond_within route's first attempt)
	// the fence of the key's claim (idemhook.Delivery.Fence), on a queued
	// attempt the attempt's own (queue.Event.Fence). It grows with every
	// later claim of the key and every later attempt, so a backend that
	// records the largest it has seen for an Idempotency-Key (or for the
	// event it names) can refuse the late work of a stale one: a gateway
	// frozen past its lease, an attempt past its timeout. A delivery that
	// holds no claim (the store failed, on_store_error: open) has none. An
	// incoming header of this name is never forwarded: a provider can't set
	// it.
	HeaderFence = "Idempotent-Fence"
)

// statsInterval is how often the queue's counts are read for the
// backpressure bound, the metrics and the console.
const statsInterval = time.Second

// queues runs the gateway's queued routes: the engine in the store, the
// dispatcher that delivers, and each route's counts.
type queues struct {
	engine queue.Engine
	disp   *queue.Dispatcher
	logger *slog.Logger

	mu     sync.Mutex
	routes map[string]*queuedRoute // by lane name: the lanes of the configuration in use

	stop    chan struct{}
	stopped chan struct{}
	started time.Time // the history's minutes before it hold nothing
	// diskDir is the directory of the SQLite file the queue lives in ("":
	// not on a local file); diskLow is set while it has less than
	// minFreeDisk free (defaultMinFreeDisk; the tests set their own), and
	// new events are refused.
	diskDir     string
	minFreeDisk atomic.Uint64
	diskLow     atomic.Bool
	// hybrids counts the first attempts of respond_within routes still
	// running: close waits for them, within its bound, before the store
	// closes.
	hybrids sync.WaitGroup
}

// queuedRoute is one lane's state that outlives reloads: a queued route's
// queue, or one of its destinations' (config.Route.Lanes).
type queuedRoute struct {
	name        string // the lane's name in the engine: the route's path, or <path>#<destination>
	path        string // the route's path
	destination string // "" on a route's own lane
	cfg         atomic.Pointer[config.Route]
	lane        atomic.Pointer[config.Lane]
	// bound is the count of events not yet delivered that max_queued
	// bounds (queue_bound.go).
	bound   bound
	stats   atomic.Pointer[queue.Stats]
	history history
}

// openEngine returns the queue of store.
func openEngine(ctx context.Context, store idemhook.Store) (queue.Engine, error) {
	if s, ok := store.(queue.EngineStore); ok {
		return s.QueueEngine(ctx)
	}
	return nil, fmt.Errorf("deliver: queue needs the sqlite, postgres or memory store, not %T", store)
}

// defaultMinFreeDisk is the free space under which a queue in a SQLite file
// refuses new events: past it, a commit may fail for want of space, and
// the provider is better off keeping the event.
const defaultMinFreeDisk = 256 << 20

func newQueues(ctx context.Context, store idemhook.Store, diskDir string, logger *slog.Logger, observe func(queue.Observation)) (*queues, error) {
	eng, err := openEngine(ctx, store)
	if err != nil {
		return nil, err
	}
	q := &queues{engine: eng, logger: logger, diskDir: diskDir, routes: map[string]*queuedRoute{}, stop: make(chan struct{}), stopped: make(chan struct{}), started: time.Now()}
	q.minFreeDisk.Store(defaultMinFreeDisk)
	q.checkDisk()
	q.disp = queue.NewDispatcher(eng, queue.Options{
		Logger: logger,
		Observe: func(o queue.Observation) {
			if qr := q.route(o.Route); qr != nil {
				qr.observe(o)
			}
			if observe != nil {
				observe(o)
			}
		},
	})
	go q.refresh()
	return q, nil
}

// route returns the lane named name (config.LaneName), or nil.
func (q *queues) route(name string) *queuedRoute {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.routes[name]
}

// lanes returns the lanes of the queued route rc, in its order.
func (q *queues) lanes(rc config.Route) []*queuedRoute {
	var out []*queuedRoute
	for _, l := range rc.Lanes() {
		out = append(out, q.route(l.Name))
	}
	return out
}

// list returns the lanes in use, by name.
func (q *queues) list() []*queuedRoute {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]*queuedRoute, 0, len(q.routes))
	for _, r := range q.routes {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *queuedRoute) int { return strings.Compare(a.name, b.name) })
	return out
}

// queuedParts is what the gateway builds for one queued route of a
// configuration.
type queuedParts struct {
	rc    config.Route
	wrap  func(http.Handler) http.Handler // the route's middleware
	rts   map[string]http.RoundTripper    // the transport of each lane's attempts, by lane name
	proxy http.Handler                    // respond_within: the proxy, for a delivery that holds no claim
}

// handler is the handler of a queued route, behind its middleware and the
// backpressure bound. set must have made the route one of the queue's.
func (q *queues) handler(p queuedParts, trusted []netip.Prefix) http.Handler {
	if len(p.rc.Destinations) > 0 {
		return q.admit(p.wrap(q.fanOut(p.rc, q.lanes(p.rc), trusted)))
	}
	qr := q.route(p.rc.Path)
	inner := q.accept(p.rc, qr, trusted)
	if p.rc.RespondWithin > 0 {
		inner = q.hybrid(p.rc, qr, trusted, sender(p.rc, p.rc.Upstream, p.rts[p.rc.Path], maxHybridAnswer), p.proxy)
	}
	return q.admit(p.wrap(inner))
}

// set makes the queued routes of a configuration the ones in use, and gives
// the dispatcher their lanes' delivery settings. A lane that keeps its name
// keeps its counts and history. A lane that is gone (a route or a
// destination removed) keeps its events in the store, unclaimed, until a
// configuration names it again.
func (q *queues) set(parts []queuedParts) {
	q.mu.Lock()
	next := map[string]*queuedRoute{}
	var routes []queue.Route
	for _, p := range parts {
		rc := p.rc
		for _, lane := range rc.Lanes() {
			routes = append(routes, dispatchRoute(rc, lane, p.rts[lane.Name]))
			qr := q.routes[lane.Name]
			if qr == nil {
				qr = &queuedRoute{name: lane.Name, path: rc.Path, destination: lane.Destination}
				qr.stats.Store(&queue.Stats{})
			}
			qr.cfg.Store(&rc)
			qr.lane.Store(&lane)
			next[lane.Name] = qr
		}
	}
	var gone []*queuedRoute
	for name, qr := range q.routes {
		if next[name] == nil {
			gone = append(gone, qr)
		}
	}
	q.routes = next
	q.mu.Unlock()
	q.disp.Set(routes)
	q.readStats()
	q.warnGone(gone)
}

// warnGone logs, for each lane a reload removed that still holds events,
// that they stay in the store, unclaimed: a mistaken edit loses nothing,
// and they are delivered again when a configuration names the lane again.
func (q *queues) warnGone(gone []*queuedRoute) {
	for _, qr := range gone {
		ctx, cancel := context.WithTimeout(context.Background(), statsInterval)
		st, err := q.engine.Stats(ctx, qr.name)
		cancel()
		if err != nil || st.Pending()+st.Dead == 0 {
			continue
		}
		what := "route"
		if qr.destination != "" {
			what = "destination"
		}
		q.logger.Warn("idemhook reload: a "+what+" that still has events is no longer configured; they stay in the store, not delivered, until a configuration names it again (or a purge deletes them)",
			qr.logAttrs("queue", qr.name, "pending", st.Pending(), "dead", st.Dead)...)
	}
}

// refresh reads every queued route's counts each statsInterval.
func (q *queues) refresh() {
	defer close(q.stopped)
	t := time.NewTicker(statsInterval)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-t.C:
			q.checkDisk()
			q.readStats()
		}
	}
}

// checkDisk sets diskLow from the free space of the queue's file system,
// logging each change.
func (q *queues) checkDisk() {
	if q.diskDir == "" {
		return
	}
	free, ok := freeBytes(q.diskDir)
	if !ok {
		return
	}
	floor := q.minFreeDisk.Load()
	low := free < floor
	if q.diskLow.Swap(low) != low {
		if low {
			q.logger.Error("idemhook queue: the disk is almost full; new events are answered 503 (the provider keeps them) until space returns",
				"dir", q.diskDir, "free_bytes", free, "floor_bytes", floor)
		} else {
			q.logger.Info("idemhook queue: disk space is back; new events are accepted again", "dir", q.diskDir, "free_bytes", free)
		}
	}
}

func (q *queues) readStats() {
	for _, qr := range q.list() {
		ctx, cancel := context.WithTimeout(context.Background(), statsInterval)
		err := q.countRoute(ctx, qr)
		cancel()
		if err != nil {
			q.logger.Warn("idemhook queue: could not read the route's counts", qr.logAttrs("err", err)...)
		}
	}
}

// close stops delivering. The attempts in flight finish until ctx ends;
// those cut short then are queued again, due at once.
func (q *queues) close(ctx context.Context) error {
	close(q.stop)
	<-q.stopped
	done := waitDone(&q.hybrids)
	select {
	case <-done:
	case <-ctx.Done():
	}
	err := q.disp.Close(ctx) // cuts what still runs, the respond_within attempts too
	<-done
	return err
}

func (qr *queuedRoute) observe(o queue.Observation) {
	switch {
	case o.Superseded || o.Cut:
	case o.Verdict == queue.Delivered:
		qr.history.add(time.Now(), func(m *minute) { m.Delivered++ })
	case o.Verdict == queue.Retry:
		qr.history.add(time.Now(), func(m *minute) { m.Retried++ })
	case o.Verdict == queue.Kill:
		qr.history.add(time.Now(), func(m *minute) { m.Dead++ })
	}
	// The bound's count goes down with the next read of the store's (see
	// bound): never here.
}

// logAttrs are the attributes that name the lane in a log line, then
// more.
func (qr *queuedRoute) logAttrs(more ...any) []any {
	attrs := []any{"route", qr.path}
	if qr.destination != "" {
		attrs = append(attrs, "destination", qr.destination)
	}
	return append(attrs, more...)
}

// dispatchRoute is the dispatcher's view of a lane of the queued route rc:
// how its events are sent, through rt, and which answers succeed or are
// retried.
func dispatchRoute(rc config.Route, lane config.Lane, rt http.RoundTripper) queue.Route {
	qc := lane.Queue
	retried := func(status int) bool {
		return queue.DefaultRetried(status) || slices.Contains(qc.RetryStatuses, status)
	}
	return queue.Route{
		Name:           lane.Name,
		Concurrency:    qc.Concurrency,
		Rate:           qc.Rate,
		AttemptTimeout: qc.AttemptTimeout,
		MaxAttempts:    qc.MaxAttempts,
		MaxAge:         qc.MaxAge,
		BackoffMin:     qc.BackoffMin,
		BackoffMax:     qc.BackoffMax,
		Succeeded:      rc.Route.Stores,
		Retried:        retried,
		Send:           sender(rc, lane.Upstream, rt, queue.MaxBodyHead),
	}
}

// maxDrain bounds the answer bytes read past the kept head, so that the
// connection can be used again without reading a huge answer whole.
const maxDrain = 256 << 10

// sender returns the function that sends one attempt of an event of route
// rc to target (its upstream, or a destination's), as the proxy would have
// sent the request: the same upstream URL, the headers as forwarded, plus
// Idempotency-Key (the event's Key: a destination's is its own), the
// attempt's number, its fence and the event's id.
//
// The answer's body is read up to keep bytes (the attempt's record keeps
// its head; a respond_within route passes a whole answer back), and what
// follows is drained up to maxDrain.
func sender(rc config.Route, target *url.URL, rt http.RoundTripper, keep int64) func(ctx context.Context, ev *queue.Event) queue.Result {
	prefix := forwardPrefix(rc.Path)
	return func(ctx context.Context, ev *queue.Event) queue.Result {
		in, err := url.ParseRequestURI(ev.Target)
		if err != nil {
			return queue.Result{Err: fmt.Errorf("the event's target %q: %w", ev.Target, err)}
		}
		out := *target
		out.Path, out.RawPath = upstreamPath(target, prefix, in), upstreamRawPath(target, prefix, in)
		out.RawQuery = joinQuery(target.RawQuery, in.RawQuery)
		req, err := http.NewRequestWithContext(ctx, ev.Method, out.String(), bytes.NewReader(ev.Body))
		if err != nil {
			return queue.Result{Err: err}
		}
		req.Header = ev.Header.Clone()
		req.Header.Set(HeaderIdempotencyKey, ev.Key)
		req.Header.Set(HeaderAttempt, strconv.Itoa(ev.Attempt))
		setFence(req.Header, ev.Fence)
		if ev.ID != 0 { // a respond_within route's first attempt has none yet
			req.Header.Set(HeaderEventID, strconv.FormatInt(ev.ID, 10))
		}
		if rc.ForwardKey != nil {
			signForward(req.Header, rc.ForwardKey, ev.Key, ev.Body, time.Now())
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return queue.Result{Err: err}
		}
		defer resp.Body.Close()
		head, err := io.ReadAll(io.LimitReader(resp.Body, keep))
		if err != nil {
			return queue.Result{Err: fmt.Errorf("reading the answer: %w", err)}
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		return queue.Result{Status: resp.StatusCode, Header: resp.Header, BodyHead: head}
	}
}

// admit marks each delivery to a queued route, before the middleware, so
// that the route's handler can note why it refused one (refuseEvent) and the
// delivery's outcome says so (notQueued).
func (q *queues) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), refusalKey{}, new(refusal))))
	})
}

// outcomeNotQueued is the outcome of a delivery to a queued route that was
// answered 503 without being kept: the route's queue was full, the queue's
// disk almost full, or the event could not be claimed or written. It is a
// refusal (the provider keeps the event and sends it again), not a delivery
// forwarded unprotected nor a failed one: nothing reached the backend.
const outcomeNotQueued idemhook.Outcome = "not_queued"

type refusalKey struct{}

// refusal is where a queued route's handler notes why it refused a
// delivery.
type refusal struct{ err error }

// refuseEvent answers 503 with Retry-After and notes why on the delivery (the
// reason of its audit entry).
func refuseEvent(w http.ResponseWriter, r *http.Request, retryAfter, title, detail string) {
	if rf, ok := r.Context().Value(refusalKey{}).(*refusal); ok {
		rf.err = errors.New("not queued: " + detail)
	}
	w.Header().Set("Retry-After", retryAfter)
	writeProblem(w, http.StatusServiceUnavailable, title, detail)
}

// notQueued gives a delivery a queued route refused (refuseEvent) the outcome
// not_queued, with the refusal as its error (and the middleware's, such as
// the store's error that left it unclaimed, after it).
func notQueued(d idemhook.DeliveryInfo) idemhook.DeliveryInfo {
	if d.Request == nil {
		return d
	}
	rf, ok := d.Request.Context().Value(refusalKey{}).(*refusal)
	if !ok || rf.err == nil {
		return d
	}
	d.Outcome = outcomeNotQueued
	if d.Err != nil {
		d.Err = fmt.Errorf("%w; %w", rf.err, d.Err)
	} else {
		d.Err = rf.err
	}
	return d
}

// admitNew runs the checks a new event passes before it is kept, once its
// claim found nothing stored (a re-delivery of an event already accepted
// is replayed its accept by the middleware, full queue or not): the queue's
// disk, then the route's max_queued. With reserve, an admitted event holds
// a place of the bound, which keep then commits or cancels. A refused one
// is answered 503 with Retry-After (the provider keeps the event and sends
// it again), and the middleware releases its claim.
func (q *queues) admitNew(w http.ResponseWriter, r *http.Request, rc *config.Route, qr *queuedRoute, reserve bool) bool {
	if q.diskLow.Load() {
		refuseEvent(w, r, "60", "disk almost full",
			"the gateway's disk has too little free space to keep the event: send it again later")
		return false
	}
	max := int64(rc.Queue.MaxQueued)
	var n int64
	var full bool
	if reserve {
		var ok bool
		n, ok = qr.bound.reserve(max)
		full = !ok
	} else {
		n, full = qr.bound.full(max)
	}
	if full {
		refuseEvent(w, r, "60", "queue full",
			fmt.Sprintf("the route's queue holds %d events not yet delivered (max_queued %d): send the event again later", n, max))
		return false
	}
	return true
}

// accept is the handler of a queued route, behind the middleware: it keeps
// the event with the key's completion in one step of the store, and only
// then lets the middleware answer the accept answer.
func (q *queues) accept(rc config.Route, qr *queuedRoute, trusted []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, claimed := idemhook.DeliveryFromContext(r.Context())
		if !claimed {
			// The key could not be claimed (the store failed with
			// on_store_error: open, or the key could not be read): with no
			// claim there is nothing to keep the event with.
			refuseEvent(w, r, "5", "not accepted", "the event could not be claimed, so it is not queued: send it again")
			return
		}
		if !q.admitNew(w, r, &rc, qr, true) {
			return
		}
		if err := q.keep(r, rc, qr, d, newEvent(rc, d, r, trusted)); err != nil {
			q.logger.Warn("idemhook queue: the event could not be kept; the provider is answered 503 and sends it again", "route", rc.Path, "key", d.StoreKey(), "err", err)
			refuseEvent(w, r, "5", "not accepted", "the event could not be kept: send it again")
			return
		}
		q.disp.Wake(rc.Path)
	})
}

// newEvent is the event of the delivery d holds: r as the proxy would
// forward it, with the body the middleware read (not copied), and the
// fence of d's claim, which the engine keeps as the floor of its attempts'.
func newEvent(rc config.Route, d *idemhook.Delivery, r *http.Request, trusted []netip.Prefix) *queue.Event {
	body := d.Body()
	return &queue.Event{
		Fence:      d.Fence(),
		Route:      rc.Path,
		Key:        d.StoreKey(),
		OrderKey:   orderKey(rc.Queue.OrderBy, r.Header, body),
		Method:     r.Method,
		Target:     r.URL.RequestURI(),
		Header:     forwardHeader(r, trusted),
		Body:       body,
		ReceivedAt: time.Now(),
	}
}

// keep appends ev with the completion of d's claim by rc's accept answer, in
// one step of the engine (the middleware then sends that answer), and counts
// it on qr, whose bound must hold a place reserved for it. On error nothing
// is kept, the place is given back and the claim is still d's.
func (q *queues) keep(r *http.Request, rc config.Route, qr *queuedRoute, d *idemhook.Delivery, ev *queue.Event) error {
	err := idemhook.CompleteDelivery(d, rc.Accept.Status, rc.Accept.Header, rc.Accept.Body, func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
		return q.engine.Accept(r.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: ttl}, ev)
	})
	if err != nil {
		qr.bound.cancel()
		return err
	}
	qr.bound.commit()
	// The engine's transaction committed: the middleware answers the
	// completion without reading the key back (a busy pool would fail
	// that read and answer 503 for an event that is queued). It cannot
	// fail here, the handler running and the completion just written;
	// if it did, the middleware would read the key back as before.
	_ = idemhook.DeliveryCommitted(d)
	qr.history.add(ev.ReceivedAt, func(m *minute) { m.Accepted++ })
	return nil
}

// maxHybridAnswer bounds the backend's answer a respond_within route passes
// back to the provider.
const maxHybridAnswer = 32 << 20

// hybrid is the handler of a proxy route with respond_within, behind the
// middleware. It sends the delivery to the backend as attempt 1 of the
// event. An answer within the budget goes back to the provider as a proxy
// route's would. Past the budget, the event is kept with the key's
// completion as on a queued route, running its first attempt, and the
// provider gets the accept answer; the attempt goes on and is settled as
// the dispatcher's own (a failure is retried from the queue).
func (q *queues) hybrid(rc config.Route, qr *queuedRoute, trusted []netip.Prefix, send func(context.Context, *queue.Event) queue.Result, proxy http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, claimed := idemhook.DeliveryFromContext(r.Context())
		if !claimed {
			proxy.ServeHTTP(w, r) // unprotected: nothing to keep the event with
			return
		}
		if !q.admitNew(w, r, &rc, qr, false) {
			return
		}
		ev := newEvent(rc, d, r, trusted)
		first := *ev // what the attempt reads; ev is the queue's
		first.Attempt = 1
		q.hybrids.Add(1)
		attempt := q.disp.Handoff(rc.Path, rc.Queue.AttemptTimeout, func(ctx context.Context) queue.Result { return send(ctx, &first) })
		budget := time.NewTimer(rc.RespondWithin)
		defer budget.Stop()
		select {
		case res := <-attempt.Done():
			q.hybrids.Done()
			writeResult(w, res, rc, q.logger)
			return
		case <-budget.C:
		}
		attempt.Running(ev)
		err := errQueueFull
		if _, ok := qr.bound.reserve(int64(rc.Queue.MaxQueued)); ok {
			err = q.keep(r, rc, qr, d, ev)
		}
		if err != nil {
			// Not kept: the provider waits for the backend's answer, as on
			// a proxy route.
			q.logger.Warn("idemhook queue: past respond_within the event could not be kept; waiting for the backend's answer", "route", rc.Path, "key", d.StoreKey(), "err", err)
			res := <-attempt.Done()
			q.hybrids.Done()
			writeResult(w, res, rc, q.logger)
			return
		}
		go func() {
			defer q.hybrids.Done()
			if !attempt.Settle(ev, <-attempt.Done()) {
				q.logger.Warn("idemhook queue: the route is gone; its attempt's lease lapses and the event is sent again", "route", rc.Path, "event", ev.ID)
			}
		}()
	})
}

// writeResult sends the backend's answer to the provider as the proxy
// would: its status, headers (not the hop-by-hop ones) and body, or 502 or
// 504 when none came. A success the route's preset rewrites
// (SuccessStatus, SuccessBody) is rewritten as on the proxy path.
func writeResult(w http.ResponseWriter, res queue.Result, rc config.Route, logger *slog.Logger) {
	if res.Err != nil {
		writeUpstreamError(w, logger, rc, res.Err, false)
		return
	}
	h := w.Header()
	for name, values := range res.Header {
		h[name] = values
	}
	removeHopHeaders(h)
	h.Del("Content-Length")
	want := successOf(rc)
	if want != 0 && httpstatus.IsSuccess(res.Status) && rc.Route.Preset.SuccessBody != "" {
		body := rc.Route.Preset.SuccessBody
		setSuccessBodyHeader(h, body)
		w.WriteHeader(want)
		_, _ = io.WriteString(w, body)
		return
	}
	w.WriteHeader(providerStatus(want, res.Status))
	_, _ = w.Write(res.BodyHead)
}

// forwardHeader returns the headers of r as the proxy forwards them: without
// the hop-by-hop ones and the sender's Idempotent-Fence, with
// X-Forwarded-For, -Host and -Proto set by the same rules
// (trusted_proxies).
func forwardHeader(r *http.Request, trusted []netip.Prefix) http.Header {
	h := r.Header.Clone()
	removeHopHeaders(h)
	h.Del("X-Forwarded-For")
	h.Del("X-Forwarded-Host")
	h.Del("X-Forwarded-Proto")
	h.Del("Forwarded")
	h.Del(HeaderFence) // each attempt sets its own
	setForwarded(&httputil.ProxyRequest{In: r, Out: &http.Request{Header: h}}, trusted)
	return h
}

// orderKey returns the value order_by names in the request: a header, or a
// field of the body's JSON object (a dotted path). "" (unordered) when
// order_by is not set or the value is absent.
func orderKey(orderBy string, h http.Header, body []byte) string {
	kind, name, _ := strings.Cut(orderBy, ":")
	switch kind {
	case "header":
		return h.Get(name)
	case "json":
		var v any
		if json.Unmarshal(body, &v) != nil {
			return ""
		}
		for _, part := range strings.Split(name, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				return ""
			}
			v = m[part]
		}
		switch x := v.(type) {
		case nil:
			return ""
		case string:
			return x
		default:
			b, _ := json.Marshal(x)
			return string(b)
		}
	}
	return ""
}

// errQueueFull is why a respond_within route could not keep its event past
// the budget: the route's queue filled up while the backend had it.
var errQueueFull = errors.New("the route's queue holds max_queued events not yet delivered")

// errNoQueue is the error of an admin call on a gateway with no queued route.
var errNoQueue = errors.New("no route of this gateway has deliver: queue")

// history counts a route's events per minute over the last historyMinutes,
// in memory: the console's chart.
type history struct {
	mu      sync.Mutex
	minutes [historyMinutes]minute
}

// historyMinutes is how far back the chart goes: 6 hours.
const historyMinutes = 360

// minute is one minute of a route's history.
type minute struct {
	Start     int64 `json:"start"` // Unix seconds of the minute's start
	Accepted  int64 `json:"accepted"`
	Delivered int64 `json:"delivered"`
	Retried   int64 `json:"retried"`
	Dead      int64 `json:"dead"`
}

func (h *history) add(t time.Time, f func(*minute)) {
	start := t.Unix() / 60 * 60
	h.mu.Lock()
	m := &h.minutes[(start/60)%historyMinutes]
	if m.Start != start {
		*m = minute{Start: start}
	}
	f(m)
	h.mu.Unlock()
}

// span returns how many minutes, up to now, go back to the oldest minute
// that counted something (0 when none did).
func (h *history) span(now time.Time) int {
	end := now.Unix() / 60 * 60
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.minutes {
		if m.Start == 0 || m.Start > end || end-m.Start >= historyMinutes*60 {
			continue // never used, or out of the window
		}
		n = max(n, int((end-m.Start)/60)+1)
	}
	return n
}

// minHistoryMinutes is the shortest history GET /admin/queue gives by
// default, so that a chart of a few minutes still shows what went before.
const minHistoryMinutes = 15

// historySpan is the number of minutes GET /admin/queue's history covers
// without ?minutes=: the data's span, from the oldest minute that counted
// an event on any queued route to now (one length for every route, so
// their charts share a time axis). It is at least minHistoryMinutes, but
// never reaches before the queue started, whose minutes could only be
// zeros that squeeze the data to the chart's right edge.
func (q *queues) historySpan(now time.Time) int {
	n := 1
	for _, qr := range q.list() {
		n = max(n, qr.history.span(now))
	}
	up := int(now.Unix()/60-q.started.Unix()/60) + 1
	return min(max(n, min(minHistoryMinutes, up)), historyMinutes)
}

// last returns the minutes up to now, oldest first, with the minutes
// nothing happened in as zeros.
func (h *history) last(now time.Time, n int) []minute {
	n = min(n, historyMinutes)
	end := now.Unix() / 60 * 60
	out := make([]minute, n)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range out {
		start := end - int64(n-1-i)*60
		m := h.minutes[(start/60)%historyMinutes]
		if m.Start != start {
			m = minute{Start: start}
		}
		out[i] = m
	}
	return out
}
