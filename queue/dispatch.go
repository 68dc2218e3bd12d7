package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook/internal/breaker"
	"github.com/idemhook/idemhook/internal/httpstatus"
)

// Route is how a [Dispatcher] delivers one route's events. Zero fields take
// the defaults named below.
type Route struct {
	// Name is the route's name in the engine (Event.Route).
	Name string
	// Concurrency bounds the attempts in flight at once. Default 8.
	Concurrency int
	// Rate bounds the attempts started per second; 0 is no bound.
	Rate float64
	// AttemptTimeout bounds one attempt, from the request until the answer's
	// headers. Default 30s.
	AttemptTimeout time.Duration
	// MaxAttempts is the number of attempts after which a failing event is
	// dead; 0 bounds it by MaxAge only.
	MaxAttempts int
	// MaxAge is how long after it was accepted (or last redriven) an event
	// may still be retried. Default 72h.
	MaxAge time.Duration
	// BackoffMin and BackoffMax bound the wait before a retry: before retry
	// n it is a random duration up to min(BackoffMax, BackoffMin·2ⁿ⁻¹)
	// (exponential backoff with full jitter), and never less than the
	// answer's Retry-After. Defaults 1s and 10m.
	BackoffMin, BackoffMax time.Duration
	// Succeeded reports whether a status delivers the event. Default: 2xx.
	Succeeded func(status int) bool
	// Retried reports whether a failing status is retried; any other
	// failing status makes the event dead at once. Connection errors and
	// timeouts are always retried. Default: 408, 429 and 5xx.
	Retried func(status int) bool
	// Send makes one attempt. It must return when ctx ends.
	Send func(ctx context.Context, ev *Event) Result
}

// Defaults of Route.
const (
	DefaultConcurrency    = 8
	DefaultAttemptTimeout = 30 * time.Second
	DefaultMaxAge         = 72 * time.Hour
	DefaultBackoffMin     = time.Second
	DefaultBackoffMax     = 10 * time.Minute
)

// DefaultRetried is Route.Retried's default: 408, 429 and every 5xx.
func DefaultRetried(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

// DefaultSucceeded is Route.Succeeded's default: every 2xx.
func DefaultSucceeded(status int) bool { return httpstatus.IsSuccess(status) }

func (r Route) withDefaults() Route {
	if r.Concurrency <= 0 {
		r.Concurrency = DefaultConcurrency
	}
	if r.AttemptTimeout <= 0 {
		r.AttemptTimeout = DefaultAttemptTimeout
	}
	if r.MaxAge <= 0 {
		r.MaxAge = DefaultMaxAge
	}
	if r.BackoffMin <= 0 {
		r.BackoffMin = DefaultBackoffMin
	}
	if r.BackoffMax <= 0 {
		r.BackoffMax = DefaultBackoffMax
	}
	if r.BackoffMax < r.BackoffMin {
		r.BackoffMax = r.BackoffMin
	}
	if r.Succeeded == nil {
		r.Succeeded = DefaultSucceeded
	}
	if r.Retried == nil {
		r.Retried = DefaultRetried
	}
	return r
}

// Result is what one attempt got back.
type Result struct {
	Status   int         // 0 when no answer came
	Header   http.Header // the answer's header (Retry-After is read from it)
	BodyHead []byte      // the first bytes of the answer's body
	Err      error       // the transport's error, when no answer came
}

// Observation is reported to Options.Observe after every attempt.
type Observation struct {
	Route   string
	Event   *Event
	Result  Result
	Latency time.Duration
	Verdict Verdict
	NextAt  time.Time // Retry: when the event is due again
	Reason  string    // Kill: why it is dead
	// Superseded: the attempt's token no longer held the event when it
	// settled (its lease had ended); its verdict was not recorded.
	Superseded bool
	// Cut: the attempt was cut short by Close; the event is due again at
	// once and the attempt counts as no failure of the backend.
	Cut bool
}

// Options configure a Dispatcher.
type Options struct {
	// Worker names this process in leases and attempts. Default: the host
	// name and the process id.
	Worker string
	// Logger gets WARN lines for dead events and engine errors. Default:
	// slog.Default().
	Logger *slog.Logger
	// Poll is how often an idle route looks for due events (Wake starts a
	// look at once). Default 250ms.
	Poll time.Duration
	// Observe, when set, is called after every attempt.
	Observe func(Observation)
	// BreakerThreshold is the number of consecutive backend failures
	// (connection errors, timeouts, 408, 429, 5xx) after which a route stops
	// sending all but one probe per BreakerCooldown: while the backend is
	// down, due events wait without spending attempts. When a probe
	// succeeds, every waiting retry of the route is made due at once
	// ([Engine.Hasten]). Default 5; negative disables.
	BreakerThreshold int
	// BreakerCooldown is the time between probes. Default 1s.
	BreakerCooldown time.Duration
	// SettleFailed, when set, is called each time the engine fails to
	// settle an attempt (ErrSuperseded aside): the store was unreachable,
	// or refused the write. The settlement is kept and tried again at
	// every poll until it is stored or superseded (see
	// [Dispatcher.SettlesPending]). It runs on the route's goroutines: it
	// must not block.
	SettleFailed func(route string, ev *Event, err error)
}

// leaseMargin is what a lease lasts beyond its attempt's timeout: an attempt
// can't outlive its lease while its process runs, so only a stalled or dead
// process loses one.
const leaseMargin = 15 * time.Second

// settleTimeout bounds the engine call that settles an attempt.
const settleTimeout = 10 * time.Second

// errShutdown is the cause of the contexts Close cuts.
var errShutdown = errors.New("queue: the dispatcher is closing")

// Dispatcher delivers the events of an [Engine]'s routes.
type Dispatcher struct {
	engine Engine
	opts   Options

	// attempts is the parent of every attempt's context: Close cancels it
	// once its bound has passed.
	attempts context.Context
	cut      context.CancelCauseFunc

	mu      sync.Mutex
	runners map[string]*runner
	closed  bool
}

// NewDispatcher returns a dispatcher over e with no routes; Set gives it
// routes.
func NewDispatcher(e Engine, opts Options) *Dispatcher {
	if opts.Worker == "" {
		host, _ := os.Hostname()
		opts.Worker = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Poll <= 0 {
		opts.Poll = 250 * time.Millisecond
	}
	if opts.BreakerThreshold == 0 {
		opts.BreakerThreshold = 5
	}
	if opts.BreakerCooldown <= 0 {
		opts.BreakerCooldown = time.Second
	}
	ctx, cut := context.WithCancelCause(context.Background())
	return &Dispatcher{engine: e, opts: opts, attempts: ctx, cut: cut, runners: map[string]*runner{}}
}

// Worker returns the name this dispatcher claims leases in.
func (d *Dispatcher) Worker() string { return d.opts.Worker }

// Set makes routes the dispatcher's routes: a new name starts delivering, a
// known one takes its new settings for its next attempts, and a name that is
// gone stops claiming (its attempts in flight finish).
func (d *Dispatcher) Set(routes []Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	keep := map[string]bool{}
	for _, rt := range routes {
		rt = rt.withDefaults()
		keep[rt.Name] = true
		if r := d.runners[rt.Name]; r != nil {
			r.cfg.Store(&rt)
			r.poke()
			continue
		}
		r := d.newRunner(rt)
		d.runners[rt.Name] = r
		go r.loop()
	}
	for name, r := range d.runners {
		if !keep[name] {
			r.stopClaiming()
			delete(d.runners, name)
		}
	}
}

// Wake makes route look for due events now (an event was just accepted).
func (d *Dispatcher) Wake(route string) {
	d.mu.Lock()
	r := d.runners[route]
	d.mu.Unlock()
	if r != nil {
		r.poke()
	}
}

// BreakerOpen reports whether route's backend is taken for down.
func (d *Dispatcher) BreakerOpen(route string) bool {
	d.mu.Lock()
	r := d.runners[route]
	d.mu.Unlock()
	return r != nil && r.br.Open()
}

// Close stops claiming and waits for the attempts in flight until ctx ends.
// Those still running then are cut short: each is settled due again at once,
// so that the next process to run the queue sends it again with the next
// attempt number.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	runners := make([]*runner, 0, len(d.runners))
	for _, r := range d.runners {
		r.stopClaiming()
		runners = append(runners, r)
	}
	// The runners stay, stopped: Settle still finds the route of an attempt
	// made outside the dispatcher and cut short by the close.
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		for _, r := range runners {
			<-r.done
			r.inflight.Wait()
		}
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	d.cut(errShutdown)
	<-done
	// The settlements the engine failed to store are tried once more (the
	// attempts cut short included); those that fail still are lost, and
	// their events are sent again once their leases end.
	for _, r := range runners {
		r.retryKept(context.Background())
		if n := r.pending(); n > 0 {
			d.opts.Logger.Warn("idemhook queue: settlements not stored at close; their events are sent again once their leases end",
				"route", r.name, "settles_pending", n)
		}
	}
	return err
}

type runner struct {
	d    *Dispatcher
	name string
	cfg  atomic.Pointer[Route]
	br   *breaker.Breaker

	wake     chan struct{} // a poke: look for due events now
	stop     chan struct{} // closed by stopClaiming
	stopOnce sync.Once
	done     chan struct{} // closed when loop has returned

	inflight sync.WaitGroup
	busy     atomic.Int32 // attempts in flight

	// kept are the settlements the engine failed to store, by event id,
	// tried again at every poll (retryKept) until stored or superseded.
	keptMu   sync.Mutex
	kept     map[int64]*keptSettle
	failures atomic.Uint64 // settles that failed, kept ones' retries included

	nextStart time.Time // Rate: when the next attempt may start (loop only)
}

func (d *Dispatcher) newRunner(rt Route) *runner {
	r := &runner{d: d, name: rt.Name, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		kept: map[int64]*keptSettle{}}
	r.cfg.Store(&rt)
	r.br = breaker.New(d.opts.BreakerThreshold, d.opts.BreakerCooldown, time.Now, func(open bool) {
		if open {
			d.opts.Logger.Warn("idemhook queue: the backend fails; its events wait, one probe a second", "route", r.name)
			return
		}
		d.opts.Logger.Info("idemhook queue: the backend answers again; its waiting retries are due now", "route", r.name)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
			defer cancel()
			if _, err := d.engine.Hasten(ctx, r.name); err != nil {
				d.opts.Logger.Warn("idemhook queue: could not make the route's retries due", "route", r.name, "err", err)
			}
			r.poke()
		}()
	})
	return r
}

func (r *runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *runner) stopClaiming() { r.stopOnce.Do(func() { close(r.stop) }) }

func (r *runner) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// loop claims due events while there are free slots, until stopClaiming.
func (r *runner) loop() {
	defer close(r.done)
	var errLogged time.Time
	for !r.stopped() {
		// Kept settlements first: once the engine answers again, an
		// attempt's verdict is stored before the route claims anew.
		r.retryKept(context.Background())
		cfg := r.cfg.Load()
		free := cfg.Concurrency - int(r.busy.Load())
		n, probe := free, false
		if cfg.Rate > 0 {
			n = min(n, 1)
		}
		if n > 0 && r.br.Open() {
			n, probe = 0, false
			if r.br.Allow() {
				n, probe = 1, true
			}
		}
		got := 0
		if n > 0 && r.paceOK(cfg) {
			ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
			evs, err := r.d.engine.Claim(ctx, r.name, n, cfg.AttemptTimeout+leaseMargin, r.d.opts.Worker)
			cancel()
			if err != nil && time.Since(errLogged) > 10*time.Second {
				errLogged = time.Now()
				r.d.opts.Logger.Warn("idemhook queue: claim failed; retrying", "route", r.name, "err", err)
			}
			if probe && len(evs) == 0 {
				r.br.Done(false) // nothing to probe with: try again after the cooldown
			}
			evs = r.dropKeptOf(evs)
			got = len(evs)
			for _, ev := range evs {
				r.busy.Add(1)
				r.inflight.Add(1)
				go r.attempt(cfg, ev)
				if cfg.Rate > 0 {
					r.nextStart = time.Now().Add(time.Duration(float64(time.Second) / cfg.Rate))
				}
			}
		}
		if got > 0 && got == n && !probe {
			continue // there may be more due
		}
		wait := r.d.opts.Poll
		if cfg.Rate > 0 {
			if d := time.Until(r.nextStart); d > 0 && d < wait {
				wait = d
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-r.wake:
		case <-t.C:
		case <-r.stop:
		}
		t.Stop()
	}
}

// paceOK reports whether the route's rate allows an attempt now.
func (r *runner) paceOK(cfg *Route) bool {
	return cfg.Rate <= 0 || !time.Now().Before(r.nextStart)
}

// attempt makes one attempt of ev and settles it.
func (r *runner) attempt(cfg *Route, ev *Event) {
	defer func() {
		r.busy.Add(-1)
		r.inflight.Done()
		r.poke()
	}()
	ctx, cancel := context.WithTimeout(r.d.attempts, cfg.AttemptTimeout)
	start := time.Now()
	res := cfg.Send(ctx, ev)
	cancel()
	r.finish(cfg, ev, res, start)
}

// finish settles the attempt of ev that started at start and got res.
func (r *runner) finish(cfg *Route, ev *Event, res Result, start time.Time) {
	latency := time.Since(start)
	cut := errors.Is(context.Cause(r.d.attempts), errShutdown) && res.Err != nil

	obs := Observation{Route: r.name, Event: ev, Result: res, Latency: latency, Cut: cut}
	switch {
	case cut:
		obs.Verdict, obs.NextAt = Retry, time.Now()
	default:
		obs.Verdict, obs.NextAt, obs.Reason = judge(cfg, ev, res, time.Now())
		r.br.Done(!backendFailed(cfg, res))
	}
	a := Attempt{Attempt: ev.Attempt, Started: start, Latency: latency, Status: res.Status, BodyHead: res.BodyHead, Worker: r.d.opts.Worker}
	if len(a.BodyHead) > MaxBodyHead {
		a.BodyHead = a.BodyHead[:MaxBodyHead]
	}
	if res.Err != nil {
		a.Error = res.Err.Error()
		if cut {
			a.Error = "cut short by shutdown: " + a.Error
		}
	}
	st := Settlement{Token: ev.Token(), Verdict: obs.Verdict, NextAt: obs.NextAt, Reason: obs.Reason, Attempt: a}
	sctx, scancel := context.WithTimeout(context.Background(), settleTimeout)
	err := r.d.engine.Settle(sctx, st)
	scancel()
	if err != nil && !errors.Is(err, ErrSuperseded) {
		// Kept, and tried again at every poll: the backend took the
		// attempt, and sending it again once the lease ends would be the
		// failure's cost.
		r.keep(&keptSettle{s: st, ev: ev, obs: obs, leaseEnd: start.Add(cfg.AttemptTimeout + leaseMargin)}, err)
		return
	}
	r.settled(obs, err)
}

// keptSettle is a settlement the engine failed to store, with what
// reporting it needs once it is.
type keptSettle struct {
	s        Settlement
	ev       *Event
	obs      Observation
	leaseEnd time.Time // about when the attempt's lease ends in the engine
}

// keep keeps k after its settle failed with err.
func (r *runner) keep(k *keptSettle, err error) {
	r.failures.Add(1)
	r.keptMu.Lock()
	r.kept[k.ev.ID] = k
	n := len(r.kept)
	r.keptMu.Unlock()
	r.d.opts.Logger.Warn("idemhook queue: could not settle an attempt; the settlement is kept and tried again at every poll",
		"route", r.name, "event", k.ev.ID, "attempt", k.ev.Attempt, "settles_pending", n, "err", err)
	if f := r.d.opts.SettleFailed; f != nil {
		f(r.name, k.ev, err)
	}
}

// retryKept tries each kept settlement once more, within settleTimeout in
// all and ctx: those stored or superseded leave, the others stay. A
// timeout ends the pass (the engine does not answer); another error only
// that settlement's try (a statement may fail alone).
func (r *runner) retryKept(ctx context.Context) {
	r.keptMu.Lock()
	kept := make([]*keptSettle, 0, len(r.kept))
	for _, k := range r.kept {
		kept = append(kept, k)
	}
	r.keptMu.Unlock()
	slices.SortFunc(kept, func(a, b *keptSettle) int { return cmp.Compare(a.ev.ID, b.ev.ID) })
	if len(kept) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	for _, k := range kept {
		err := r.d.engine.Settle(ctx, k.s)
		if err != nil && !errors.Is(err, ErrSuperseded) {
			r.failures.Add(1)
			if f := r.d.opts.SettleFailed; f != nil {
				f(r.name, k.ev, err)
			}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		r.keptMu.Lock()
		if r.kept[k.ev.ID] == k {
			delete(r.kept, k.ev.ID)
		}
		r.keptMu.Unlock()
		r.d.opts.Logger.Info("idemhook queue: a kept settlement is stored", "route", r.name, "event", k.ev.ID, "attempt", k.ev.Attempt,
			"superseded", errors.Is(err, ErrSuperseded))
		r.settled(k.obs, err)
	}
}

// dropKeptOf returns evs, and forgets the kept settlements of their events:
// the engine gave them a new attempt, so their lease had ended and the
// kept settlement is superseded. Within its lease an attempt's event is
// running in the engine, and no claim returns it.
func (r *runner) dropKeptOf(evs []*Event) []*Event {
	r.keptMu.Lock()
	var dropped []*keptSettle
	for _, ev := range evs {
		if k := r.kept[ev.ID]; k != nil {
			delete(r.kept, ev.ID)
			dropped = append(dropped, k)
		}
	}
	r.keptMu.Unlock()
	for _, k := range dropped {
		r.settled(k.obs, ErrSuperseded)
	}
	return evs
}

// settled reports an attempt whose settle returned err (nil or
// ErrSuperseded).
func (r *runner) settled(obs Observation, err error) {
	ev := obs.Event
	switch {
	case errors.Is(err, ErrSuperseded):
		obs.Superseded = true
		r.d.opts.Logger.Warn("idemhook queue: an attempt outlived its lease; another attempt holds the event and its result is dropped",
			"route", r.name, "event", ev.ID, "attempt", ev.Attempt)
	case obs.Verdict == Kill:
		r.d.opts.Logger.Warn("idemhook queue: event dead", "route", r.name, "event", ev.ID, "key", ev.Key, "attempts", ev.Attempt, "reason", obs.Reason)
	}
	if r.d.opts.Observe != nil {
		r.d.opts.Observe(obs)
	}
}

// SettlesPending returns how many of route's settlements the engine failed
// to store and the dispatcher keeps retrying.
func (d *Dispatcher) SettlesPending(route string) int {
	r := d.runnerOf(route)
	if r == nil {
		return 0
	}
	return r.pending()
}

func (r *runner) pending() int {
	r.keptMu.Lock()
	defer r.keptMu.Unlock()
	return len(r.kept)
}

// SettleFailures returns how many times the engine failed to settle one of
// route's attempts, the kept settlements' retries included, since the
// dispatcher started.
func (d *Dispatcher) SettleFailures(route string) uint64 {
	r := d.runnerOf(route)
	if r == nil {
		return 0
	}
	return r.failures.Load()
}

func (d *Dispatcher) runnerOf(route string) *runner {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runners[route]
}

// lease returns the lease an attempt of route holds: its attempt timeout
// plus a margin, as Claim gives the dispatcher's own attempts. 0 when the
// dispatcher has no such route.
func (d *Dispatcher) lease(route string) time.Duration {
	r := d.runnerOf(route)
	if r == nil {
		return 0
	}
	return r.cfg.Load().AttemptTimeout + leaseMargin
}

// Handoff is the first attempt of an event of a route, made outside the
// dispatcher (a respond_within route's), which the dispatcher takes over
// once the event is kept running it.
type Handoff struct {
	d     *Dispatcher
	route string
	start time.Time
	done  chan Result
}

// Handoff starts attempt, the first attempt of an event of route, within
// timeout and under the dispatcher's attempts: Close cuts it short as it
// cuts the dispatcher's own, once its bound has passed.
func (d *Dispatcher) Handoff(route string, timeout time.Duration, attempt func(context.Context) Result) *Handoff {
	h := &Handoff{d: d, route: route, start: time.Now(), done: make(chan Result, 1)}
	go func() {
		ctx, cancel := context.WithTimeout(d.attempts, timeout)
		defer cancel()
		h.done <- attempt(ctx)
	}()
	return h
}

// Done yields the attempt's result, once.
func (h *Handoff) Done() <-chan Result { return h.done }

// Running makes ev an event accepted running this attempt: its lease
// (Event.Lease) is the route's attempt timeout plus a margin, held by this
// dispatcher's worker.
func (h *Handoff) Running(ev *Event) {
	ev.Lease, ev.Worker = h.d.lease(h.route), h.d.Worker()
}

// Settle settles ev, kept running this attempt (Running), with the
// attempt's result res: it judges, records and observes the attempt as the
// dispatcher's own, and counts it towards the route's breaker. It reports
// false when the dispatcher has no such route; the event's lease then
// lapses and a later Claim makes the next attempt.
func (h *Handoff) Settle(ev *Event, res Result) bool {
	r := h.d.runnerOf(h.route)
	if r == nil {
		return false
	}
	r.finish(r.cfg.Load(), ev, res, h.start)
	r.poke()
	return true
}

// backendFailed reports whether res says the backend is unwell (what the
// breaker counts), rather than refusing this one event.
func backendFailed(cfg *Route, res Result) bool {
	if res.Err != nil {
		return true
	}
	return !cfg.Succeeded(res.Status) && cfg.Retried(res.Status)
}

// judge decides what becomes of ev after an attempt that got res at now.
func judge(cfg *Route, ev *Event, res Result, now time.Time) (Verdict, time.Time, string) {
	if res.Err == nil && cfg.Succeeded(res.Status) {
		return Delivered, time.Time{}, ""
	}
	what := "the backend answered " + strconv.Itoa(res.Status)
	if res.Err != nil {
		what = "no answer: " + res.Err.Error()
	}
	if res.Err == nil && !cfg.Retried(res.Status) {
		return Kill, time.Time{}, what + ", which is not retried"
	}
	made := ev.Attempt - ev.Base
	if cfg.MaxAttempts > 0 && made >= cfg.MaxAttempts {
		return Kill, time.Time{}, fmt.Sprintf("%d attempts made; the last: %s", made, what)
	}
	next := now.Add(Backoff(cfg.BackoffMin, cfg.BackoffMax, made, retryAfter(res.Header, now)))
	since := ev.Since
	if since.IsZero() { // an event accepted running, settled from its Accept's view
		since = ev.ReceivedAt
	}
	if deadline := since.Add(cfg.MaxAge); next.After(deadline) {
		return Kill, time.Time{}, fmt.Sprintf("its maximum age of %s has passed; the last attempt: %s", cfg.MaxAge, what)
	}
	return Retry, next, ""
}

// Backoff returns the wait before the retry that follows attempt n (1 for
// the first): a random duration in [0, min(hi, lo·2ⁿ⁻¹)], full jitter, and
// at least floor (a Retry-After).
func Backoff(lo, hi time.Duration, n int, floor time.Duration) time.Duration {
	ceil := hi
	if n < 1 {
		n = 1
	}
	if n-1 < 62 {
		if c := lo << (n - 1); c > 0 && c < hi && c>>(n-1) == lo {
			ceil = c
		}
	}
	d := time.Duration(rand.Int64N(int64(ceil) + 1))
	return max(d, floor)
}

// retryAfter reads a Retry-After header (seconds or an HTTP date); 0 when
// there is none or it is in the past.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
