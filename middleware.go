package idemhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhook/idemhook/internal/breaker"
)

// Defaults of Options and Route.
const (
	DefaultTTL                = 24 * time.Hour
	DefaultLease              = 30 * time.Second
	DefaultStoreTimeout       = 250 * time.Millisecond
	DefaultBreakerThreshold   = 5
	DefaultBreakerCooldown    = time.Second
	DefaultWaitTimeout        = 10 * time.Second
	DefaultRetryAfter         = 5 * time.Second
	DefaultMaxBodyBytes       = 5 << 20
	DefaultMaxStoredBodyBytes = 64 << 10
)

// minLease is the shortest Options.Lease accepted.
const minLease = time.Millisecond

// ReplayedHeader marks a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// neverReplayed lists response headers that are never stored.
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Authorization": true, "Proxy-Authenticate": true, "Www-Authenticate": true,
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Idempotent-Replayed": true,
}

// Middleware holds what the routes of one service share: the store, the
// circuit breaker in front of it, the logger and the hooks. Create it with
// [New] and wrap each webhook handler with [Middleware.Route].
type Middleware struct {
	store     Store
	storeName string
	inProcess bool // the store never waits on I/O: its calls need no deadline
	opts      Options
	breaker   *breaker.Breaker
}

// New returns a Middleware over store. A zero Options means the defaults.
func New(store Store, opts Options) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("idemhook: New: store is nil")
	}
	switch {
	case opts.StoreTimeout < 0:
		return nil, fmt.Errorf("idemhook: New: StoreTimeout %v is negative", opts.StoreTimeout)
	case opts.Lease < 0:
		return nil, fmt.Errorf("idemhook: New: Lease %v is negative", opts.Lease)
	case opts.Lease > 0 && opts.Lease < minLease:
		// Below it the renewal interval (Lease/3) reaches 0 and the renewal
		// timer spins, and the stores keep leases in milliseconds anyway.
		return nil, fmt.Errorf("idemhook: New: Lease %v is under the minimum of %v", opts.Lease, minLease)
	case opts.BreakerCooldown < 0:
		return nil, fmt.Errorf("idemhook: New: BreakerCooldown %v is negative", opts.BreakerCooldown)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StoreTimeout == 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	if opts.BreakerThreshold == 0 {
		opts.BreakerThreshold = DefaultBreakerThreshold
	}
	if opts.BreakerCooldown == 0 {
		opts.BreakerCooldown = DefaultBreakerCooldown
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	name := "store"
	if n, ok := store.(interface{ Name() string }); ok && n.Name() != "" {
		name = n.Name()
	}
	inProcess := false
	if l, ok := store.(interface{ InProcess() bool }); ok {
		inProcess = l.InProcess()
	}
	return &Middleware{
		store:     store,
		storeName: name,
		inProcess: inProcess,
		opts:      opts,
		breaker:   breaker.New(opts.BreakerThreshold, opts.BreakerCooldown, opts.Now, opts.OnBreakerChange),
	}, nil
}

// Store returns the store the middleware was created with.
func (m *Middleware) Store() Store { return m.store }

// BreakerOpen reports whether the circuit breaker is currently skipping the
// store.
func (m *Middleware) BreakerOpen() bool { return m.breaker.Open() }

// Route checks rt, applies its defaults and returns the middleware for one
// webhook route.
func (m *Middleware) Route(rt Route) (func(http.Handler) http.Handler, error) {
	if err := rt.applyDefaults(); err != nil {
		return nil, err
	}
	h := &routeConfig{m: m, rt: rt, retryAfter: strconv.Itoa(int((rt.RetryAfter + time.Second - 1) / time.Second))}
	for _, name := range rt.ReplayHeaders {
		h.replayHeaders = append(h.replayHeaders, http.CanonicalHeaderKey(name))
	}
	return func(next http.Handler) http.Handler {
		return &handler{routeConfig: h, next: next}
	}, nil
}

func (rt *Route) applyDefaults() error {
	where := "idemhook: Route"
	if rt.Source != "" {
		where += " " + strconv.Quote(rt.Source)
	}
	if strings.ContainsAny(rt.Source, ":\x00") {
		return fmt.Errorf("%s: Source must not contain ':'", where)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", rt.TTL}, {"WaitTimeout", rt.WaitTimeout}, {"RetryAfter", rt.RetryAfter}} {
		if d.v < 0 {
			return fmt.Errorf("%s: %s %v is negative", where, d.name, d.v)
		}
	}
	if rt.MaxBodyBytes < 0 || rt.MaxStoredBodyBytes < 0 {
		return fmt.Errorf("%s: MaxBodyBytes and MaxStoredBodyBytes must not be negative", where)
	}
	switch rt.InFlight {
	case "":
		rt.InFlight = InFlightProceed
	case InFlightProceed, InFlightWait, InFlightReject:
	default:
		return fmt.Errorf("%s: InFlight %q is not one of proceed, wait, reject", where, rt.InFlight)
	}
	switch rt.OnStoreError {
	case "":
		rt.OnStoreError = StoreErrorOpen
	case StoreErrorOpen, StoreErrorClosed:
	default:
		return fmt.Errorf("%s: OnStoreError %q is not one of open, closed", where, rt.OnStoreError)
	}
	for _, name := range rt.ReplayHeaders {
		if neverReplayed[http.CanonicalHeaderKey(name)] {
			return fmt.Errorf("%s: ReplayHeaders: %s is never stored or replayed", where, http.CanonicalHeaderKey(name))
		}
	}
	if rt.Preset != nil && rt.Preset.DuplicateStatus != 0 && (rt.Preset.DuplicateStatus < 200 || rt.Preset.DuplicateStatus > 299) {
		return fmt.Errorf("%s: Preset %q: DuplicateStatus %d is not a 2xx status", where, rt.Preset.Name, rt.Preset.DuplicateStatus)
	}
	if rt.TTL == 0 {
		rt.TTL = DefaultTTL
	}
	if rt.Header == "" && (rt.Preset == nil || rt.Preset.Key == nil) {
		rt.Header = DefaultHeader
	}
	if rt.WaitTimeout == 0 {
		rt.WaitTimeout = DefaultWaitTimeout
	}
	if rt.RetryAfter == 0 {
		rt.RetryAfter = DefaultRetryAfter
	}
	if rt.MaxBodyBytes == 0 {
		rt.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if rt.MaxStoredBodyBytes == 0 {
		rt.MaxStoredBodyBytes = DefaultMaxStoredBodyBytes
	}
	if rt.ReplayHeaders == nil {
		rt.ReplayHeaders = []string{"Content-Type"}
	}
	return nil
}

type routeConfig struct {
	m             *Middleware
	rt            Route
	replayHeaders []string
	retryAfter    string
}

type handler struct {
	*routeConfig
	next http.Handler
}

// keyKind says where a key came from; only header keys can mismatch.
type keyKind uint8

const (
	keyFromBody keyKind = iota
	keyFromHeader
	keyFromPreset
)

// delivery is the state of one request through the middleware.
type delivery struct {
	h     *handler
	r     *http.Request
	start time.Time
	body  []byte

	key      string
	storeKey string
	kind     keyKind
	fp       [FingerprintSize]byte

	out responseCapture

	// Held here rather than allocated per step: a store never retains the
	// records it is given.
	claimRec, doneRec Record
	renew             renewal
	bodyReader        bodyReader

	// storeCtx is the request's context without its cancellation, shared
	// by the delivery's store calls (made on first use).
	storeCtx context.Context
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := &delivery{h: h, r: r, start: h.m.opts.Now()}
	d.out = responseCapture{w: w}

	if h.rt.Source == "" {
		h.m.warn("WebhookIdempotencyGuard key resolution failed: route has no source configured",
			slog.String("path", r.URL.Path))
		d.passThrough(OutcomeKeyError, errors.New("idemhook: route has no source"))
		return
	}
	// A GET, HEAD or OPTIONS is not a delivery: it has no body to read and
	// claims nothing; only a preset's handshake (Meta's GET challenge) may
	// answer it, else it passes through untouched.
	safe := isSafeMethod(r.Method)
	if !safe && !d.readBody(w) {
		return
	}
	if p := h.rt.Preset; p != nil {
		if p.Verify != nil {
			if err := p.Verify(r, d.body); err != nil {
				d.problem(http.StatusUnauthorized, "Signature verification failed", err.Error(), OutcomeSignatureInvalid, err)
				return
			}
		}
		if p.Handshake != nil && p.Handshake(w, r, d.body) {
			return
		}
	}
	if safe {
		h.next.ServeHTTP(w, r)
		return
	}
	if err := d.resolveKey(); err != nil {
		h.m.warn("WebhookIdempotencyGuard key resolution failed: "+err.Error(), slog.String("source", h.rt.Source))
		d.passThrough(OutcomeKeyError, err)
		return
	}
	d.claim()
}

func isSafeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// readBody reads the body once under the route's limit and gives the handler
// an identical copy. It answers 413 or 400 itself and then returns false.
func (d *delivery) readBody(w http.ResponseWriter) bool {
	limit := d.h.rt.MaxBodyBytes
	r := d.r
	if r.ContentLength > limit {
		d.tooLarge(w)
		return false
	}
	// The declared length sizes the buffer only up to maxBodyPrealloc: a
	// sender declares what it likes for free, so memory beyond that follows
	// the bytes that actually arrive (doubling, at most twice what came).
	size := int64(512)
	if r.ContentLength > 0 {
		size = min(r.ContentLength+1, maxBodyPrealloc) // +1: the read that sees EOF
	}
	buf := make([]byte, 0, size)
	for {
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			d.tooLarge(w)
			return false
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			d.problem(http.StatusBadRequest, "Bad request body", "the request body could not be read: "+err.Error(), OutcomeKeyError, err)
			return false
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
	}
	r.Body.Close() //nolint:errcheck // fully read
	d.body = buf
	r.ContentLength = int64(len(buf))
	d.bodyReader.Reset(buf)
	r.Body = &d.bodyReader
	r.GetBody = func() (io.ReadCloser, error) { return &bodyReader{*bytes.NewReader(buf)}, nil }
	return true
}

// maxBodyPrealloc bounds the buffer allocated for a request body before its
// bytes arrive.
const maxBodyPrealloc = 64 << 10

// bodyReader hands the handler the body that was read.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

func (d *delivery) tooLarge(w http.ResponseWriter) {
	d.problem(http.StatusRequestEntityTooLarge, "Request body too large",
		fmt.Sprintf("the request body exceeds the limit of %d bytes", d.h.rt.MaxBodyBytes), OutcomeTooLarge, nil)
}

// resolveKey applies the key strategies in order: configured header, preset
// key, body hash.
func (d *delivery) resolveKey() error {
	rt := &d.h.rt
	if rt.Header != "" {
		if v := NormalizeKey(headerValue(d.r.Header, rt.Header)); v != "" {
			d.key, d.kind = v, keyFromHeader
			sum := canonicalSum(d.body)
			copy(d.fp[:], sum[:])
		}
	}
	if d.key == "" && rt.Preset != nil && rt.Preset.Key != nil {
		k, err := rt.Preset.Key(d.r, d.body)
		if err != nil {
			return fmt.Errorf("preset %s: %w", rt.Preset.Name, err)
		}
		if k = NormalizeKey(k); k != "" {
			d.key, d.kind = k, keyFromPreset
		}
	}
	if d.key == "" {
		// One allocation for both: the key is the tail of the store key.
		// No fingerprint: the key is the body's hash already, so a
		// body-hash record can't mismatch and is 16 bytes smaller.
		sum := canonicalSum(d.body)
		prefix := len("idem:") + len(rt.Source) + len(":")
		b := make([]byte, 0, prefix+len("sha256:")+hex.EncodedLen(len(sum)))
		b = append(append(append(b, "idem:"...), rt.Source...), ":sha256:"...)
		b = hex.AppendEncode(b, sum[:])
		d.storeKey, d.kind = string(b), keyFromBody
		d.key = d.storeKey[prefix:]
		return nil
	}
	d.storeKey = StoreKey(rt.Source, d.key)
	return nil
}

// claim is the heart of the flow: one store round trip decides whether this
// delivery runs the handler, replays, waits or is refused.
func (d *delivery) claim() {
	pending := d.newClaim()
	existing, err := d.call("claim", func(ctx context.Context) (*Record, error) {
		return d.h.m.store.Claim(ctx, d.storeKey, pending, d.h.m.opts.Lease)
	})
	d.decide(pending, existing, err, false)
}

// decide acts on the result of a claim. waited is true once the delivery has
// waited for another one (policy wait).
func (d *delivery) decide(pending, existing *Record, err error, waited bool) {
	switch {
	case err != nil:
		d.storeError(err)
	case existing == nil:
		d.runOwned(pending)
	case existing.State == StateCompleted:
		if d.kind == keyFromHeader && existing.Fingerprint != ([FingerprintSize]byte{}) && existing.Fingerprint != d.fp {
			d.problem(http.StatusUnprocessableEntity, "Idempotency key reused",
				"this idempotency key was already used for a request with a different body", OutcomeMismatch, nil)
			return
		}
		outcome := OutcomeReplayed
		if waited {
			outcome = OutcomeInFlightWaited
		}
		d.replay(existing, outcome)
	default: // pending: another delivery of the event is running
		switch d.h.rt.InFlight {
		case InFlightReject:
			d.out.w.Header().Set("Retry-After", d.h.retryAfter)
			d.problem(http.StatusConflict, "Delivery in progress",
				"a delivery of this event is being processed; retry later", OutcomeInFlightRejected, nil)
		case InFlightWait:
			if !waited {
				d.wait()
				return
			}
			fallthrough
		default:
			d.passThrough(OutcomeInFlightProceeded, nil)
		}
	}
}

// newClaim returns a pending record with a fresh owner token. A delivery
// holds one claim at a time, so each call reuses the same record.
func (d *delivery) newClaim() *Record {
	var tok [16]byte
	rand.Read(tok[:]) //nolint:errcheck // crypto/rand.Read never fails
	d.claimRec = Record{State: StatePending, Token: string(tok[:]), Fingerprint: d.fp, CreatedAt: d.h.m.opts.Now()}
	return &d.claimRec
}

// wait polls the key until the running delivery completes (replay), goes away
// (take over) or WaitTimeout passes (proceed).
func (d *delivery) wait() {
	deadline := time.NewTimer(d.h.rt.WaitTimeout)
	defer deadline.Stop()
	interval := 5 * time.Millisecond
	poll := time.NewTimer(interval)
	defer poll.Stop()
	for {
		select {
		case <-d.r.Context().Done():
			d.finish(OutcomeInFlightWaited, d.r.Context().Err())
			return
		case <-deadline.C:
			d.passThrough(OutcomeInFlightProceeded, nil)
			return
		case <-poll.C:
		}
		rec, err := d.call("get", func(ctx context.Context) (*Record, error) {
			return d.h.m.store.Get(ctx, d.storeKey)
		})
		switch {
		case err != nil && (d.h.m.breaker.Open() || errors.Is(err, ErrCorruptRecord)):
			// The store is down, not just slow, or the key holds a value
			// that is not a record: apply the store-error (or parse-error)
			// policy now rather than at WaitTimeout.
			d.storeError(err)
			return
		case err != nil:
			// A slow poll: the claim was seen pending, keep waiting.
		case rec == nil: // released or lapsed: try to take over
			pending := d.newClaim()
			existing, err := d.call("claim", func(ctx context.Context) (*Record, error) {
				return d.h.m.store.Claim(ctx, d.storeKey, pending, d.h.m.opts.Lease)
			})
			slow := err != nil && !d.h.m.breaker.Open() && !errors.Is(err, ErrCorruptRecord)
			if !slow && (err != nil || existing == nil || existing.State == StateCompleted) {
				d.decide(pending, existing, err, true)
				return
			}
		case rec.State == StateCompleted:
			d.decide(nil, rec, nil, true)
			return
		}
		interval = min(interval*2, 100*time.Millisecond)
		poll.Reset(interval)
	}
}

// runOwned runs the handler for a claim this delivery holds, then stores the
// final response or releases the claim, and only then sends the response.
func (d *delivery) runOwned(pending *Record) {
	m := d.h.m
	d.out.buffering = true
	d.out.limit = d.h.rt.MaxStoredBodyBytes
	d.startRenewal(pending)
	tx := d.offerDelivery(pending) // see delivery.go
	returned := false
	defer func() {
		tx.close()
		if returned {
			return
		}
		// The handler panicked, or ended its goroutine (runtime.Goexit,
		// where recover gives nil): either way it never answered, and a
		// claim left behind would be renewed for good.
		p := recover()
		d.renew.stop()
		d.release(pending)
		if p == nil {
			d.finish(OutcomeFailedReleased, errGoexit)
			return
		}
		d.finish(OutcomeFailedReleased, fmt.Errorf("idemhook: handler panicked: %v", p))
		panic(p)
	}()
	d.h.next.ServeHTTP(&d.out, d.r)
	returned = true
	d.renew.stop()
	if tx.settle(pending) { // the handler completed the claim in its own transaction
		return
	}

	if d.out.hijacked {
		// The handler answered on the raw connection: its answer is
		// unknown here, so nothing is stored and a retry runs afresh.
		d.release(pending)
		d.finish(OutcomeFailedReleased, errHijacked)
		return
	}
	status := d.out.finalStatus()
	cutShort := d.out.status == 0 && d.r.Context().Err() != nil
	if cutShort || !isFinal(status) {
		d.release(pending)
		d.out.send()
		var err error
		if cutShort {
			err = fmt.Errorf("idemhook: delivery cut short: %w", context.Cause(d.r.Context()))
		}
		d.finish(OutcomeFailedReleased, err)
		return
	}
	d.doneRec = Record{
		State:       StateCompleted,
		Fingerprint: d.fp,
		CreatedAt:   m.opts.Now(),
		Status:      status,
		Header:      d.storedHeader(),
		BodyOmitted: d.out.omitted,
	}
	if !d.out.omitted {
		d.doneRec.Body = d.out.buf
	}
	_, err := d.call("complete", func(ctx context.Context) (*Record, error) {
		return nil, m.store.Complete(ctx, d.storeKey, pending, &d.doneRec, d.h.rt.TTL)
	})
	putHeader(d.doneRec.Header)
	if err != nil {
		m.warn("WebhookIdempotencyInterceptor cache write failed for key="+d.storeKey+": "+err.Error(),
			slog.String("source", d.h.rt.Source), slog.String("key", d.storeKey), slog.Any("error", err))
	}
	d.out.send()
	d.finish(OutcomeProcessed, err)
}

// isFinal reports whether a status is an answer worth replaying; failures
// that a retry may fix release the claim instead.
func isFinal(status int) bool {
	return status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// storedHeader picks the replayed headers out of the response, into a
// pooled map that goes back with putHeader once the record is stored.
func (d *delivery) storedHeader() http.Header {
	src := d.out.w.Header()
	var h http.Header
	for _, name := range d.h.replayHeaders {
		if vs := src[name]; len(vs) > 0 {
			if h == nil {
				h = headerPool.Get().(http.Header)
			}
			h[name] = vs
		}
	}
	return h
}

var headerPool = sync.Pool{New: func() any { return make(http.Header, 2) }}

func putHeader(h http.Header) {
	if h != nil && len(h) <= 8 {
		clear(h)
		headerPool.Put(h)
	}
}

func (d *delivery) release(pending *Record) {
	_, err := d.call("release", func(ctx context.Context) (*Record, error) {
		return nil, d.h.m.store.Release(ctx, d.storeKey, pending)
	})
	if err != nil {
		d.h.m.warn("WebhookIdempotencyInterceptor cache write failed for key="+d.storeKey+": release: "+err.Error(),
			slog.String("source", d.h.rt.Source), slog.String("key", d.storeKey), slog.Any("error", err))
	}
}

// replay answers with a stored response; the handler is not called.
func (d *delivery) replay(rec *Record, outcome Outcome) {
	w := d.out.w
	h := w.Header()
	for name, vs := range rec.Header {
		h[name] = vs
	}
	h.Set(ReplayedHeader, "true")
	h.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	status := rec.Status
	if p := d.h.rt.Preset; p != nil && p.DuplicateStatus != 0 {
		status = p.DuplicateStatus
	}
	d.out.WriteHeader(status)
	d.out.Write(rec.Body) //nolint:errcheck // the client may be gone
	d.finish(outcome, nil)
}

// storeError applies the route's store-error policy.
func (d *delivery) storeError(err error) {
	m := d.h.m
	attrs := []slog.Attr{slog.String("source", d.h.rt.Source), slog.String("key", d.storeKey), slog.Any("error", err)}
	if errors.Is(err, ErrCorruptRecord) {
		m.warn("WebhookIdempotencyGuard cached value parse error for key="+d.storeKey+": "+err.Error(), attrs...)
		d.passThrough(OutcomeStoreErrorOpen, err)
		return
	}
	m.warn("WebhookIdempotencyGuard "+m.storeName+" error for key="+d.storeKey+": "+err.Error(), attrs...)
	if d.h.rt.OnStoreError == StoreErrorClosed {
		d.out.w.Header().Set("Retry-After", d.h.retryAfter)
		d.problem(http.StatusServiceUnavailable, "Idempotency store unavailable",
			"the idempotency store cannot be reached; retry later", OutcomeStoreErrorClosed, err)
		return
	}
	d.passThrough(OutcomeStoreErrorOpen, err)
}

// passThrough runs the handler without a claim.
func (d *delivery) passThrough(outcome Outcome, err error) {
	d.h.next.ServeHTTP(&d.out, d.r)
	d.finish(outcome, err)
}

// problem answers with an RFC 9457 problem+json body.
func (d *delivery) problem(status int, title, detail string, outcome Outcome, err error) {
	d.out.w.Header().Set("Content-Type", "application/problem+json")
	d.out.WriteHeader(status)
	fmt.Fprintf(&d.out, `{"type":"about:blank","title":%s,"status":%d,"detail":%s}`+"\n",
		strconv.Quote(title), status, strconv.Quote(detail))
	d.finish(outcome, err)
}

func (d *delivery) finish(outcome Outcome, err error) {
	hook := d.h.m.opts.OnDelivery
	if hook == nil {
		return
	}
	status := d.out.status
	if status == 0 && d.r.Context().Err() == nil {
		status = http.StatusOK
	}
	hook(DeliveryInfo{
		Request:       d.r,
		Source:        d.h.rt.Source,
		Key:           d.key,
		StoreKey:      d.storeKey,
		Outcome:       outcome,
		Status:        status,
		Duration:      d.h.m.opts.Now().Sub(d.start),
		RequestBytes:  int64(len(d.body)),
		ResponseBytes: d.out.written,
		Err:           err,
	})
}

// call runs one store operation under the store deadline and the breaker.
func (d *delivery) call(op string, fn func(context.Context) (*Record, error)) (*Record, error) {
	m := d.h.m
	hook := m.opts.OnStoreCall
	if !m.breaker.Allow() {
		if hook != nil {
			hook(StoreCallInfo{Op: op, Err: errBreakerOpen, Skipped: true})
		}
		return nil, errBreakerOpen
	}
	// The call outlives the request's cancellation (a claim must be
	// completed or released even when the sender hung up) but not the
	// store deadline, which an in-process store has no use for.
	if d.storeCtx == nil {
		d.storeCtx = context.WithoutCancel(d.r.Context())
	}
	ctx, cancel := d.storeCtx, context.CancelFunc(func() {})
	if !m.inProcess {
		ctx, cancel = context.WithTimeout(ctx, m.opts.StoreTimeout)
	}
	var start time.Time
	if hook != nil {
		start = time.Now()
	}
	// Every allowed call must reach breaker.Done, a panicking store's too:
	// an allowed call may be the half-open probe, and a probe that never
	// reports leaves the breaker skipping the store for good.
	reported := false
	defer func() {
		if !reported {
			m.breaker.Done(false)
		}
	}()
	rec, err := fn(ctx)
	cancel()
	ok := err == nil || errors.Is(err, ErrNotOwner) || errors.Is(err, ErrCorruptRecord)
	reported = true
	m.breaker.Done(ok)
	if hook != nil {
		info := StoreCallInfo{Op: op, Duration: time.Since(start), Err: err}
		if errors.Is(err, ErrNotOwner) {
			info.Err = nil // the store answered: a success, as documented
		}
		hook(info)
	}
	if err != nil && !errors.Is(err, ErrCorruptRecord) {
		err = &StoreError{Op: op, Key: d.storeKey, Err: err}
	}
	return rec, err
}

var errGoexit = errors.New("idemhook: the handler exited its goroutine (runtime.Goexit) without answering; the claim was released")

var errHijacked = errors.New("idemhook: the handler hijacked the connection: its response is unknown, the claim was released")

var errBreakerOpen = errors.New("circuit breaker open: store skipped after repeated failures")

// renewal keeps a claim's lease alive while the handler runs: every
// Lease/3 it extends the lease, until stopped.
type renewal struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	d       *delivery
	claim   *Record
}

func (d *delivery) startRenewal(claim *Record) {
	rn := &d.renew
	rn.d, rn.claim = d, claim
	rn.mu.Lock()
	rn.timer = time.AfterFunc(d.h.m.opts.Lease/3, rn.tick)
	rn.mu.Unlock()
}

func (rn *renewal) tick() {
	d := rn.d
	m := d.h.m
	_, err := d.call("extend", func(ctx context.Context) (*Record, error) {
		return nil, m.store.Extend(ctx, d.storeKey, rn.claim, m.opts.Lease)
	})
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.stopped {
		return // the handler returned meanwhile: the claim is completed or released
	}
	if errors.Is(err, ErrNotOwner) {
		m.warn("idemhook: lease lost while the handler runs: another delivery may run it too",
			slog.String("source", d.h.rt.Source), slog.String("key", d.storeKey))
		return
	}
	rn.timer.Reset(m.opts.Lease / 3)
}

func (rn *renewal) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.timer.Stop()
	rn.mu.Unlock()
}

func (m *Middleware) warn(msg string, attrs ...slog.Attr) {
	m.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
