package idemhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
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
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/idemhook/idemhook/internal/breaker"
	"github.com/idemhook/idemhook/internal/canonjson"
	"github.com/idemhook/idemhook/internal/fence"
	"github.com/idemhook/idemhook/internal/problem"
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

// BodyOmittedHeader marks a replay whose stored answer has no body: the
// first answer's body was over Route.MaxStoredBodyBytes, so it was sent to
// the first caller but not stored. Its value is "true".
const BodyOmittedHeader = "Idempotent-Body-Omitted"

// neverReplayed lists response headers that are never stored.
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Authorization": true, "Proxy-Authenticate": true, "Www-Authenticate": true,
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, ReplayedHeader: true, BodyOmittedHeader: true, FailedItemsHeader: true,
}

// Middleware holds what the routes of one service share: the store, the
// circuit breaker in front of it, the logger and the hooks. Create it with
// [New] and wrap each webhook handler with [Middleware.Route].
type Middleware struct {
	store     Store
	storeName string
	inProcess bool         // the store never waits on I/O: its calls need no deadline
	fencing   FencingStore // the store, when it gives its claims' fences; nil otherwise
	opts      Options
	breaker   *breaker.Breaker
	budget    *bodyBudget    // nil: no bound on the body bytes held
	later     sync.WaitGroup // answers being stored in the background (completion.go)
	own       RouteSet       // the routes of Route, checked against each other (routeset.go)
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
	case opts.MaxHeldBodyBytes < 0:
		return nil, fmt.Errorf("idemhook: New: MaxHeldBodyBytes %d is negative", opts.MaxHeldBodyBytes)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StoreTimeout == 0 {
		opts.StoreTimeout = DefaultStoreTimeout
		if st, ok := store.(TimeoutStore); ok && st.StoreTimeout() > 0 {
			opts.StoreTimeout = st.StoreTimeout()
		}
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
	if n, ok := store.(NamedStore); ok && n.Name() != "" {
		name = n.Name()
	}
	inProcess := false
	if l, ok := store.(InProcessStore); ok {
		inProcess = l.InProcess()
	}
	fencing, _ := store.(FencingStore)
	m := &Middleware{
		store:     store,
		storeName: name,
		inProcess: inProcess,
		fencing:   fencing,
		opts:      opts,
		breaker:   breaker.New(opts.BreakerThreshold, opts.BreakerCooldown, opts.Now, opts.OnBreakerChange),
	}
	if opts.MaxHeldBodyBytes > 0 {
		m.budget = &bodyBudget{max: opts.MaxHeldBodyBytes}
	}
	m.own = RouteSet{m: m, of: "Middleware"}
	return m, nil
}

// StoreTimeout is the bound of each store call (Options.StoreTimeout, or
// its default for the store), for a probe of the store that should fail
// when deliveries would.
func (m *Middleware) StoreTimeout() time.Duration { return m.opts.StoreTimeout }

// Route checks rt, applies its defaults and returns the middleware for one
// webhook route. A Route it refuses is reported as a [*RouteError]: one
// that [Route.Validate] refuses, and one whose Source another route made
// by m.Route already has, unless every route of that Source sets ShareKeys
// (routes with one Source answer each other's deliveries). The routes of a
// [RouteSet] are checked against that set's only.
func (m *Middleware) Route(rt Route) (func(http.Handler) http.Handler, error) {
	return m.route(rt, &m.own)
}

// route is Route for a route of set: its Source is checked against the
// other routes of set only.
func (m *Middleware) route(rt Route, set *RouteSet) (func(http.Handler) http.Handler, error) {
	if err := rt.applyDefaults(); err != nil {
		return nil, err
	}
	if b := m.budget; b != nil && rt.MaxBodyBytes >= b.max {
		return nil, &RouteError{Source: rt.Source, Field: "MaxBodyBytes", Reason: fmt.Sprintf(
			"MaxBodyBytes %d is not under Options.MaxHeldBodyBytes %d: a body of that size could never be held, and its deliveries would be refused with 503 for good",
			rt.MaxBodyBytes, b.max)}
	}
	if err := set.addSource(&rt); err != nil {
		return nil, err
	}
	h := &routeConfig{
		m:          m,
		rt:         rt,
		retryAfter: seconds(rt.RetryAfter),
		lease:      cmp.Or(rt.Lease, m.opts.Lease),
		scope:      rt.Scope,
	}
	h.renewals.interval = h.lease / 3
	h.leaseAfter = seconds(h.lease)
	h.keyHeader = http.CanonicalHeaderKey(rt.Header)
	if rt.Items != nil {
		h.items, _, _ = compileItems(rt.Items) // checked by applyDefaults
	}
	if h.scope == nil {
		h.scope = DefaultScope
	}
	for _, name := range slices.Concat(representationHeaders[:], rt.ReplayHeaders) {
		if name = http.CanonicalHeaderKey(name); !slices.Contains(h.replayHeaders, name) {
			h.replayHeaders = append(h.replayHeaders, name)
		}
	}
	return func(next http.Handler) http.Handler {
		return &handler{routeConfig: h, next: next}
	}, nil
}

// ValidSource reports whether source can be a Route.Source: it holds no
// ':', '@' or NUL byte, which separate the parts of a store key. "" is
// valid: a route without a source, which protects nothing.
func ValidSource(source string) bool {
	return !strings.ContainsAny(source, ":@\x00")
}

// StorableStatus reports whether status may be listed in
// Route.StoreStatuses: a 3xx or 4xx status. 2xx is always stored; 1xx and
// 5xx never are.
func StorableStatus(status int) bool {
	return status >= 300 && status <= 499
}

// Validate reports whether [Middleware.Route] would accept rt, with the
// same [*RouteError], without a Middleware: for a program that checks its
// routes (a configuration file, say) before it serves them. It checks rt
// alone, so it can't tell that another route already has rt's Source.
func (rt Route) Validate() error {
	return rt.applyDefaults()
}

// seconds renders d for a Retry-After header: whole seconds, rounded up.
func seconds(d time.Duration) string {
	return strconv.Itoa(int((d + time.Second - 1) / time.Second))
}

func (rt *Route) applyDefaults() error {
	fail := func(field string, index int, format string, args ...any) error {
		return &RouteError{Source: rt.Source, Field: field, Index: index, Reason: fmt.Sprintf(format, args...)}
	}
	if !ValidSource(rt.Source) {
		return fail("Source", 0, "Source must not contain ':' or '@'")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", rt.TTL}, {"WaitTimeout", rt.WaitTimeout}, {"RetryAfter", rt.RetryAfter}, {"Lease", rt.Lease}} {
		if d.v < 0 {
			return fail(d.name, 0, "%s %v is negative", d.name, d.v)
		}
	}
	if rt.Lease > 0 && rt.Lease < minLease {
		return fail("Lease", 0, "Lease %v is under the minimum of %v", rt.Lease, minLease)
	}
	if rt.MaxBodyBytes < 0 {
		return fail("MaxBodyBytes", 0, "MaxBodyBytes and MaxStoredBodyBytes must not be negative")
	}
	if rt.MaxStoredBodyBytes < 0 {
		return fail("MaxStoredBodyBytes", 0, "MaxBodyBytes and MaxStoredBodyBytes must not be negative")
	}
	switch rt.InFlight {
	case "":
		rt.InFlight = InFlightWait
	case InFlightProceed, InFlightWait, InFlightReject:
	default:
		return fail("InFlight", 0, "InFlight %q is not one of proceed, wait, reject", rt.InFlight)
	}
	switch rt.OnStoreError {
	case "":
		rt.OnStoreError = StoreErrorOpen
	case StoreErrorOpen, StoreErrorClosed:
	default:
		return fail("OnStoreError", 0, "OnStoreError %q is not one of open, closed", rt.OnStoreError)
	}
	for i, name := range rt.ReplayHeaders {
		if neverReplayed[http.CanonicalHeaderKey(name)] {
			return fail("ReplayHeaders", i, "ReplayHeaders: %s is never stored or replayed", http.CanonicalHeaderKey(name))
		}
	}
	for i, st := range rt.StoreStatuses {
		if !StorableStatus(st) {
			return fail("StoreStatuses", i, "StoreStatuses: %d is not a status from 300 to 499 (2xx is always stored; 1xx and 5xx never are)", st)
		}
	}
	if rt.Preset != nil && rt.Preset.RetryWindow < 0 {
		return fail("Preset", 0, "Preset %q: RetryWindow %v is negative", rt.Preset.Name, rt.Preset.RetryWindow)
	}
	if rt.Preset != nil && rt.Preset.DuplicateStatus != 0 && (rt.Preset.DuplicateStatus < 200 || rt.Preset.DuplicateStatus > 299) {
		return fail("Preset", 0, "Preset %q: DuplicateStatus %d is not a 2xx status", rt.Preset.Name, rt.Preset.DuplicateStatus)
	}
	if rt.Preset != nil && rt.Preset.SuccessStatus != 0 && (rt.Preset.SuccessStatus < 200 || rt.Preset.SuccessStatus > 299 || rt.Preset.SuccessStatus == http.StatusNoContent) {
		return fail("Preset", 0, "Preset %q: SuccessStatus %d is not a 2xx status with a body", rt.Preset.Name, rt.Preset.SuccessStatus)
	}
	if rt.Preset != nil && rt.Preset.SuccessBody != "" && rt.Preset.SuccessStatus == 0 {
		return fail("Preset", 0, "Preset %q: SuccessBody is set without a SuccessStatus (the body is answered with that status)", rt.Preset.Name)
	}
	if rt.Preset != nil && !utf8.ValidString(rt.Preset.SuccessBody) {
		return fail("Preset", 0, "Preset %q: SuccessBody is not valid UTF-8 (it is answered as text/plain; charset=utf-8)", rt.Preset.Name)
	}
	if a := rt.ItemsSuccess; a != nil && (a.Status < 200 || a.Status > 299) {
		return fail("ItemsSuccess", 0, "ItemsSuccess: status %d is not a 2xx status", a.Status)
	}
	if rt.Items == nil && rt.Preset != nil {
		rt.Items = rt.Preset.Items
	}
	if rt.Items != nil {
		if _, i, err := compileItems(rt.Items); err != nil {
			return fail("Items", i, "%v", err)
		}
	}
	if rt.TTL == 0 {
		rt.TTL = rt.Preset.DefaultTTL()
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
	return nil
}

type routeConfig struct {
	m             *Middleware
	rt            Route
	scope         func(*http.Request) string
	replayHeaders []string      // RepresentationHeaders, then Route.ReplayHeaders
	keyHeader     string        // Route.Header, canonical: looked up in the map without canonicalizing it per request
	retryAfter    string        // Route.RetryAfter, for Retry-After
	lease         time.Duration // Route.Lease, else Options.Lease
	leaseAfter    string        // the lease, for Retry-After after a wait
	renewals      renewals      // the lease renewals of the route's running deliveries
	warnedOmitted atomic.Bool   // the WARN for a body over MaxStoredBodyBytes was logged
	items         *itemPlan     // Route.Items (or its Preset's), compiled; nil when none
}

// stores reports whether a response with status is stored and replayed;
// any other releases the claim.
func (h *routeConfig) stores(status int) bool { return h.rt.Stores(status) }

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

// exchange is one request's way through the middleware, from its arrival
// to its report: what the middleware read, keyed and claimed for it, and
// the capture of its answer. Its phases (phases.go) pass their results to
// each other as values; the exchange holds what they share, and the
// buffers a delivery reuses. (The handler's view of a claimed exchange is
// the exported [Delivery].)
type exchange struct {
	h     *handler
	r     *http.Request
	start time.Time
	body  []byte

	offered  Delivery     // what offerDelivery hands the handler: allocated with the delivery
	offerCtx offerContext // the handler's context, holding offered

	key        string
	scope      string // escaped, as in the store key
	storeKey   string
	firstToken string // the owner token of the first claim, allocated with storeKey
	fence      uint64 // the fence of the claim this delivery holds; 0 while it holds none
	kind       keyKind
	fp         [FingerprintSize]byte

	out responseCapture

	// Held here rather than allocated per step: a store never retains the
	// records it is given.
	claimRec, doneRec Record
	renew             renewal
	bodyReader        bodyReader

	// storeCtx is the request's context without its cancellation, shared
	// by the delivery's store calls (made on first use).
	storeCtx context.Context

	waited time.Duration // time spent in wait, for DeliveryInfo.Waited

	held      int64 // the bytes of the body's buffer taken from the budget
	canonical int64 // the bytes of the body's canonical copy, taken from the budget while it is hashed
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{h: h, r: r, start: h.m.opts.Now()}
	ex.out = responseCapture{w: w}
	defer ex.letGo()
	ex.end(ex.decide())
}

// action is what a delivery does once the middleware has decided.
type action uint8

const (
	actNone       action = iota // nothing more: answered already, or the caller is gone
	actRun                      // run the handler without a claim
	actRunClaimed               // run the handler holding the claim, then store or release
	actReplay                   // answer with the stored response
	actProblem                  // answer with a problem+json document
	actWait                     // wait for the running delivery of the key (policy wait); never reaches end
	actItems                    // run the items of a batched delivery (Route.Items)
)

// verdict is what the steps of a delivery decided: an action and the
// outcome it ends in. Every step returns one; [exchange.end] carries it out.
type verdict struct {
	act action
	// outcome is "" for requests that are not deliveries (safe methods,
	// handshakes), which are not reported, and for actRunClaimed, whose
	// outcome only the handler's run decides.
	outcome Outcome
	err     error

	claim *Record  // actRunClaimed: the claim held
	rec   *Record  // actReplay: the stored response
	items *itemRun // actItems: the delivery's items

	// actProblem
	status        int
	title, detail string
	retryAfter    string // the Retry-After header, if any
}

func problemVerdict(status int, title, detail string, outcome Outcome, err error) verdict {
	return verdict{act: actProblem, status: status, title: title, detail: detail, outcome: outcome, err: err}
}

// decide reads, checks and keys the request, then claims its key: each step
// returns the verdict that ends the delivery, or leaves it to the next one.
func (ex *exchange) decide() verdict {
	h, r := ex.h, ex.r
	if h.rt.Source == "" {
		h.m.warn("WebhookIdempotencyGuard key resolution failed: route has no source configured",
			slog.String("path", r.URL.Path))
		return verdict{act: actRun, outcome: OutcomeKeyError, err: errNoSource}
	}
	// A GET, HEAD or OPTIONS is not a delivery. It has no body to read and
	// claims nothing. Only a preset's handshake (Meta's GET challenge) may
	// answer it. Otherwise it passes through untouched.
	safe := isSafeMethod(r.Method)
	if !safe {
		if v, ok := ex.readBody(); !ok {
			return v
		}
	}
	if p := h.rt.Preset; p != nil {
		if p.Verify != nil {
			if err := p.Verify(r, ex.body); err != nil {
				return problemVerdict(http.StatusUnauthorized, "Signature verification failed", err.Error(), OutcomeSignatureInvalid, err)
			}
		}
		if p.Handshake != nil && p.Handshake(ex.out.w, r, ex.body) {
			return verdict{act: actNone}
		}
	}
	if safe {
		return verdict{act: actRun}
	}
	if run := ex.findBatch(); run != nil {
		return verdict{act: actItems, items: run}
	}
	if ex.key != "" {
		// A body of one item (Route.Items): keyed by it already.
	} else if err := ex.resolveKey(); err != nil {
		if err == errOverloaded {
			return ex.overloaded()
		}
		if err == errKeyRequired {
			detail := "this route requires an idempotency key"
			if h.rt.Header != "" {
				detail += " in the " + http.CanonicalHeaderKey(h.rt.Header) + " header"
			}
			return problemVerdict(http.StatusBadRequest, "Idempotency key required", detail, OutcomeKeyError, err)
		}
		h.m.warn("WebhookIdempotencyGuard key resolution failed: "+err.Error(), slog.String("source", h.rt.Source))
		return verdict{act: actRun, outcome: OutcomeKeyError, err: err}
	}
	res := ex.claim()
	if res.err != nil {
		return ex.storeError(res.err)
	}
	if v := ex.classify(res, false); v.act != actWait {
		return v
	}
	return ex.wait()
}

func isSafeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// readBody reads the body once under the route's limit and gives the handler
// an identical copy. On a body over the limit, one the memory budget can't
// hold, or one that can't be read it returns the verdict (413, 503, 400) and
// false.
//
// The body is held once, in a buffer of its size: a declared Content-Length
// (within the limit) sizes the buffer, so that it is neither grown by
// doubling (which costs up to twice the body, and as much again in garbage)
// nor copied again to forward it. A sender declares what it likes for free,
// so the first read goes into a buffer of at most maxBodyPrealloc, and the
// buffer of the declared size is made once that much has arrived. A body of
// unknown length (chunked) grows by doubling as its bytes arrive. With a
// budget (Options.MaxHeldBodyBytes), a declared length is taken from it
// before any byte is read, and a body of unknown length takes each growth of
// its buffer before it is made.
func (ex *exchange) readBody() (verdict, bool) {
	limit := ex.h.rt.MaxBodyBytes
	r := ex.r
	if r.ContentLength > limit {
		return ex.tooLarge(), false
	}
	declared := r.ContentLength >= 0
	full := int64(512) // the buffer that will hold the whole body, as far as known
	if declared {
		full = r.ContentLength + 1 // +1: the read that sees EOF
	}
	if !ex.hold(full) {
		return ex.overloaded(), false
	}
	buf := make([]byte, 0, min(full, maxBodyPrealloc))
	for {
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return ex.tooLarge(), false
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return problemVerdict(http.StatusBadRequest, "Bad request body", "the request body could not be read: "+err.Error(), OutcomeKeyError, err), false
		}
		if len(buf) < cap(buf) {
			continue
		}
		next := int64(cap(buf)) * 2
		switch {
		case declared && int64(cap(buf)) < full:
			next = full // the first maxBodyPrealloc bytes came: the rest is likely to
		case declared:
			// More than declared: net/http's body reader doesn't allow
			// it, but another reader might. Grow as for no length.
			fallthrough
		default:
			next = min(next, limit+1)
			if !ex.hold(next) {
				return ex.overloaded(), false
			}
		}
		buf = slices.Grow(buf, int(next)-len(buf))
	}
	r.Body.Close() //nolint:errcheck // fully read
	ex.body = buf
	r.ContentLength = int64(len(buf))
	ex.bodyReader.Reset(buf)
	r.Body = &ex.bodyReader
	r.GetBody = func() (io.ReadCloser, error) { return &bodyReader{*bytes.NewReader(buf)}, nil }
	return verdict{}, true
}

// hold takes the body's buffer of size bytes from the budget, in place of
// what the delivery held before (a buffer it outgrew is garbage once it is
// copied), and reports false when the budget can't hold it.
func (ex *exchange) hold(size int64) bool {
	b := ex.h.m.budget
	if b == nil || size <= ex.held {
		return true
	}
	if !b.take(size - ex.held) {
		return false
	}
	ex.held = size
	return true
}

// letGo gives the body's bytes back to the budget once the delivery ended.
func (ex *exchange) letGo() {
	ex.dropCanonical()
	if ex.held > 0 {
		ex.h.m.budget.give(ex.held)
		ex.held = 0
	}
}

// holdCanonical takes from the budget what hashing the body's canonical form
// costs beside the body: a copy of its size, made and dropped by the hash,
// for a body too large for the hash's pooled scratch (64 KiB). dropCanonical
// gives them back once the hash is done. It reports false when the budget
// can't hold them.
func (ex *exchange) holdCanonical() bool {
	b := ex.h.m.budget
	if b == nil || len(ex.body) <= maxBodyPrealloc {
		return true
	}
	n := int64(len(ex.body)) + 8
	if !b.take(n) {
		return false
	}
	ex.canonical = n
	return true
}

func (ex *exchange) dropCanonical() {
	if ex.canonical > 0 {
		ex.h.m.budget.give(ex.canonical)
		ex.canonical = 0
	}
}

// errOverloaded is what resolveKey returns when the budget can't hold the
// body's canonical copy.
var errOverloaded = errors.New("idemhook: the memory budget for request bodies is spent")

// maxBodyPrealloc bounds the buffer allocated for a request body before its
// bytes arrive.
const maxBodyPrealloc = 64 << 10

// bodyReader hands the handler the body that was read.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// overloaded is the verdict of a delivery whose body the budget can't hold
// now: 503 with the route's Retry-After, nothing claimed. The provider sends
// it again, and by then other bodies have been let go.
func (ex *exchange) overloaded() verdict {
	v := problemVerdict(http.StatusServiceUnavailable, "Too many request bodies held",
		fmt.Sprintf("the gateway holds %d bytes of request bodies at most and that is spent now; retry later", ex.h.m.budget.max),
		OutcomeOverloaded, nil)
	v.retryAfter = ex.h.retryAfter
	return v
}

func (ex *exchange) tooLarge() verdict {
	return problemVerdict(http.StatusRequestEntityTooLarge, "Request body too large",
		fmt.Sprintf("the request body exceeds the limit of %d bytes", ex.h.rt.MaxBodyBytes), OutcomeTooLarge, nil)
}

// resolveKey applies the key strategies in order: configured header, preset
// key, body hash (unless the route requires a key).
func (ex *exchange) resolveKey() error {
	rt := &ex.h.rt
	ex.scope = escapeScope(ex.h.scope(ex.r))
	if rt.Header != "" {
		if v := NormalizeKey(joinFieldValues(ex.r.Header[ex.h.keyHeader])); v != "" {
			ex.key, ex.kind = v, keyFromHeader
			if !ex.holdCanonical() {
				return errOverloaded
			}
			sum := canonjson.Sum(ex.body)
			ex.dropCanonical()
			copy(ex.fp[:], sum[:])
		}
	}
	if ex.key == "" && rt.Preset != nil && rt.Preset.Key != nil {
		k, err := rt.Preset.Key(ex.r, ex.body)
		if err != nil {
			return fmt.Errorf("preset %s: %w", rt.Preset.Name, err)
		}
		if k = NormalizeKey(k); k != "" {
			ex.key, ex.kind = k, keyFromPreset
		}
	}
	if ex.key == "" {
		if rt.RequireKey {
			return errKeyRequired
		}
		// One allocation for both: the key is the tail of the store key.
		// No fingerprint: the key is the body's hash already, so a
		// body-hash record can't mismatch and is 16 bytes smaller.
		if !ex.holdCanonical() {
			return errOverloaded
		}
		sum := requestSum(ex.body, ex.r.URL.RawQuery)
		ex.dropCanonical()
		prefix := ex.setStoreKey("", &sum)
		ex.key, ex.kind = ex.storeKey[prefix:], keyFromBody
		return nil
	}
	ex.setStoreKey(ex.key, nil)
	return nil
}

// setStoreKey sets ex.storeKey, whose key part is key, or "sha256:" and the
// hex of sum when sum is not nil, and ex.firstToken, the owner token of the
// delivery's first claim. Both are slices of one string, the one
// allocation. It returns where the key part starts in ex.storeKey.
func (ex *exchange) setStoreKey(key string, sum *[sha256.Size]byte) int {
	rt := &ex.h.rt
	keyLen := len(key)
	if sum != nil {
		keyLen = len("sha256:") + hex.EncodedLen(len(sum))
	}
	var buf [192]byte // fits the usual source, scope and key: the string below is then the one allocation
	b := buf[:0]
	if n := storeKeyLen(rt.Source, ex.scope, keyLen) + tokenLen; n > len(buf) {
		b = make([]byte, 0, n)
	}
	b = appendStoreKeyPrefix(b, rt.Source, ex.scope)
	prefix := len(b)
	if sum != nil {
		b = hex.AppendEncode(append(b, "sha256:"...), sum[:])
	} else {
		b = append(b, key...)
	}
	end := len(b)
	s := string(appendToken(b))
	ex.storeKey, ex.firstToken = s[:end], s[end:]
	return prefix
}

var errKeyRequired = errors.New("idemhook: the route requires a key and the request carries none")

// claimResult is what one claim found: the store's error, or the record
// already under the key, or neither (the claim offered is now held).
type claimResult struct {
	pending  *Record // the claim offered
	existing *Record // nil when the claim is held
	err      error
}

// claim is the heart of the flow: one store round trip, whose result
// decides whether this delivery runs the handler, replays, waits or is
// refused.
//
// A claim that is stored gets its fence (see [Delivery.Fence]): from the
// store when it is a FencingStore, else from this process's clock, read
// once the claim is stored, so that a claim made after another's lease
// lapsed reads a later time.
func (ex *exchange) claim() claimResult {
	pending := ex.newClaim()
	m := ex.h.m
	var f uint64
	existing, err := ex.call("claim", func(ctx context.Context) (rec *Record, err error) {
		if m.fencing != nil {
			rec, f, err = m.fencing.ClaimFenced(ctx, ex.storeKey, pending, ex.h.lease)
			return rec, err
		}
		return m.store.Claim(ctx, ex.storeKey, pending, ex.h.lease)
	})
	if err == nil && existing == nil {
		if m.fencing == nil {
			f = fence.Next()
		}
		ex.fence = f
	}
	return claimResult{pending: pending, existing: existing, err: err}
}

// classify decides from a claim the store answered (res.err is nil): run
// the handler holding the claim, replay the stored answer (in_flight_waited
// once the delivery has waited), refuse a reused header key, or apply the
// route's in-flight policy to another delivery's pending claim (actWait for
// policy wait). It does no I/O.
func (ex *exchange) classify(res claimResult, waited bool) verdict {
	existing := res.existing
	switch {
	case existing == nil:
		return verdict{act: actRunClaimed, claim: res.pending}
	case existing.State == StateCompleted:
		if ex.kind == keyFromHeader && existing.Fingerprint != ([FingerprintSize]byte{}) && existing.Fingerprint != ex.fp {
			return problemVerdict(http.StatusUnprocessableEntity, "Idempotency key reused",
				"this idempotency key was already used for a request with a different body", OutcomeMismatch, nil)
		}
		outcome := OutcomeReplayed
		if waited {
			outcome = OutcomeInFlightWaited
		}
		return verdict{act: actReplay, rec: existing, outcome: outcome}
	}
	// Pending: another delivery of the event is running.
	switch ex.h.rt.InFlight {
	case InFlightReject:
		v := problemVerdict(http.StatusConflict, "Delivery in progress",
			"a delivery of this event is being processed; retry later", OutcomeInFlightRejected, nil)
		v.retryAfter = ex.h.retryAfter
		return v
	case InFlightWait:
		return verdict{act: actWait}
	}
	return verdict{act: actRun, outcome: OutcomeInFlightProceeded}
}

// newClaim returns a pending record with a fresh owner token. A delivery
// holds one claim at a time, so each call reuses the same record.
func (ex *exchange) newClaim() *Record {
	tok := ex.firstToken
	if tok == "" {
		var buf [tokenLen]byte
		tok = string(appendToken(buf[:0])) // a claim after a wait: rare
	}
	ex.firstToken = ""
	ex.claimRec = Record{State: StatePending, Token: tok, Fingerprint: ex.fp, CreatedAt: ex.h.m.opts.Now()}
	return &ex.claimRec
}

// tokenLen is the length of an owner token.
const tokenLen = 16

// tokenPrefix is the random half of this process's owner tokens, drawn once
// from crypto/rand.
var tokenPrefix = func() (p [8]byte) {
	rand.Read(p[:]) //nolint:errcheck // crypto/rand.Read never fails
	return p
}()

// tokenSeq numbers the owner tokens of this process.
var tokenSeq atomic.Uint64

// appendToken appends a fresh owner token to b: this process's random prefix
// and the next value of a counter, 16 bytes. The counter makes the tokens of
// one process unique. The prefix makes those of two processes (other
// instances, or this one after a restart) differ unless both drew the same
// 64 random bits. A store only compares tokens, so they need not be
// unpredictable, and a counter spares each claim a call to crypto/rand.
func appendToken(b []byte) []byte {
	b = append(b, tokenPrefix[:]...)
	return binary.BigEndian.AppendUint64(b, tokenSeq.Add(1))
}

// wait holds a duplicate while another delivery of its key runs. It polls
// the key until that delivery completes (replay), goes away (this one
// claims the key and runs) or WaitTimeout passes (409), and returns the
// verdict. A store that is down, or a record that is not one, ends the wait
// at once with the store-error policy; a slow poll only waits more.
func (ex *exchange) wait() verdict {
	deadline := time.NewTimer(ex.h.rt.WaitTimeout)
	defer deadline.Stop()
	interval := 5 * time.Millisecond
	poll := time.NewTimer(interval)
	defer poll.Stop()
	start := ex.h.m.opts.Now()
	for {
		select {
		case <-ex.r.Context().Done():
			ex.waited = ex.h.m.opts.Now().Sub(start)
			return verdict{act: actNone, outcome: OutcomeInFlightAbandoned, err: context.Cause(ex.r.Context())}
		case <-deadline.C:
			ex.waited = ex.h.m.opts.Now().Sub(start)
			// The first delivery still holds the claim, alive or dead.
			// Running the handler unclaimed could run the event twice, so
			// the provider is told to come back once the claim's lease
			// has lapsed, when its retry can claim the key.
			v := problemVerdict(http.StatusConflict, "Delivery in progress",
				"a delivery of this event is still being processed; retry later", OutcomeInFlightRejected, errWaitTimeout)
			v.retryAfter = ex.h.leaseAfter
			return v
		case <-poll.C:
		}
		ex.waited = ex.h.m.opts.Now().Sub(start)
		rec, err := ex.call("get", func(ctx context.Context) (*Record, error) {
			return ex.h.m.store.Get(ctx, ex.storeKey)
		})
		var res claimResult
		switch {
		case err != nil:
			res.err = err
		case rec == nil: // released or lapsed: take it over
			res = ex.claim()
		default:
			res.existing = rec
		}
		switch {
		case res.err != nil && ex.storeDown(res.err):
			return ex.storeError(res.err)
		case res.err != nil:
			// Slow: the claim was seen pending, keep waiting.
		case res.existing == nil || res.existing.State == StateCompleted:
			return ex.classify(res, true)
		}
		// Still pending (another duplicate may have taken the key over).
		interval = min(interval*2, 100*time.Millisecond)
		poll.Reset(interval)
	}
}

// storeDown reports whether err, met while waiting, must end the wait: the
// store is down (the breaker is open), not just slow, or the key holds a
// value that is not a record.
func (ex *exchange) storeDown(err error) bool {
	return ex.h.m.breaker.Open() || errors.Is(err, ErrCorruptRecord)
}

// storeError applies the route's store-error policy.
func (ex *exchange) storeError(err error) verdict {
	m := ex.h.m
	if errors.Is(err, ErrCorruptRecord) {
		ex.warnStore("WebhookIdempotencyGuard cached value parse error for key=", err)
		return verdict{act: actRun, outcome: OutcomeStoreErrorOpen, err: err}
	}
	ex.warnStore("WebhookIdempotencyGuard "+m.storeName+" error for key=", err)
	if ex.h.rt.OnStoreError == StoreErrorClosed {
		v := problemVerdict(http.StatusServiceUnavailable, "Idempotency store unavailable",
			"the idempotency store cannot be reached; retry later", OutcomeStoreErrorClosed, err)
		v.retryAfter = ex.h.retryAfter
		return v
	}
	return verdict{act: actRun, outcome: OutcomeStoreErrorOpen, err: err}
}

// end carries out v: the one place every delivery finishes. A verdict that
// runs the handler is served (phases.go), which settles the claim, answers
// and reports even when the handler panics; any other is answered and
// reported here.
func (ex *exchange) end(v verdict) {
	s := settled{outcome: v.outcome, err: v.err}
	switch v.act {
	case actRun:
		if v.outcome == "" {
			ex.h.next.ServeHTTP(ex.out.w, ex.r) // not a delivery: untouched
			return
		}
		ex.serve(v)
		return
	case actRunClaimed, actItems:
		ex.serve(v)
		return
	case actReplay:
		ex.replay(v.rec)
		s.bodyOmitted = v.rec.BodyOmitted
	case actProblem:
		if v.retryAfter != "" {
			ex.out.w.Header().Set("Retry-After", v.retryAfter)
		}
		ex.writeProblem(v.status, v.title, v.detail)
	}
	if s.outcome != "" {
		ex.report(s, true)
	}
}

// runClaimed runs the handler for a claim this delivery holds, then settles
// the claim. A panic goes on to serve, which settles the claim instead.
func (ex *exchange) runClaimed(pending *Record) settled {
	tx := ex.offerDelivery(pending) // see delivery.go; before the renewal, which reads ex.r
	defer tx.close()
	ex.startRenewal(pending)
	ex.h.next.ServeHTTP(&ex.out, ex.r)
	ex.renew.stop()
	return ex.settleClaim(pending, tx, false)
}

// settleClaim settles a claim whose handler returned: it stores the
// handler's answer, or releases the claim (also when failedItem: the
// handler failed the batched item it ran for), and returns the outcome
// (processed, failed_released, or what settling the handler's own
// transaction found) with the answer to send: the handler's, once the
// store has it, so that a provider that retries the instant it has the
// answer finds it stored.
func (ex *exchange) settleClaim(pending *Record, tx *Delivery, failedItem bool) settled {
	m := ex.h.m
	if s, ok := tx.settle(pending); ok { // the handler completed the claim in its own transaction
		return s
	}
	if ex.out.hijacked {
		// The handler answered on the raw connection: its answer is
		// unknown here, so nothing is stored and a retry runs afresh.
		ex.release(pending)
		return settled{outcome: OutcomeFailedReleased, err: errHijacked}
	}
	status := ex.out.finalStatus()
	if cutShort := ex.out.status == 0 && ex.r.Context().Err() != nil; cutShort || failedItem || !ex.h.stores(status) {
		ex.release(pending)
		s := settled{outcome: OutcomeFailedReleased, answer: answer{kind: answerCaptured}}
		if cutShort {
			s.err = fmt.Errorf("idemhook: delivery cut short: %w", context.Cause(ex.r.Context()))
		}
		return s
	}
	ex.doneRec = Record{
		State:       StateCompleted,
		Fingerprint: ex.fp,
		CreatedAt:   m.opts.Now(),
		Status:      status,
		Header:      ex.h.storedHeader(ex.out.w.Header()),
		BodyOmitted: ex.out.omitted,
	}
	if !ex.out.omitted {
		ex.doneRec.Body = ex.out.buf
	}
	_, err := ex.call("complete", func(ctx context.Context) (*Record, error) {
		return nil, m.store.Complete(ctx, ex.storeKey, pending, &ex.doneRec, ex.h.rt.TTL)
	})
	if err != nil && !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrCorruptRecord) {
		ex.completeLater(pending) // the store may take it again before the claim lapses
	}
	putHeader(ex.doneRec.Header)
	omitted := err == nil && ex.out.omitted
	if err != nil {
		ex.warnStore("WebhookIdempotencyInterceptor cache write failed for key=", err)
	} else if omitted {
		ex.warnBodyOmitted(ex.out.written)
	}
	return settled{outcome: OutcomeProcessed, err: err, answer: answer{kind: answerCaptured}, bodyOmitted: omitted}
}

// warnBodyOmitted says, once per route in a WARN, that a stored answer's
// body (written bytes) was over the route's MaxStoredBodyBytes: its replays
// will carry an empty body.
func (ex *exchange) warnBodyOmitted(written int64) {
	if ex.h.warnedOmitted.CompareAndSwap(false, true) {
		ex.h.m.warn("idemhook: a response body over MaxStoredBodyBytes was sent but not stored; "+
			"its replays carry the status and headers, an empty body and "+BodyOmittedHeader+": true (logged once per route)",
			slog.String("source", ex.h.rt.Source), slog.Int("max_stored_body_bytes", ex.h.rt.MaxStoredBodyBytes),
			slog.Int64("body_bytes", written), slog.String("key", ex.storeKey))
	}
}

// handlerDied settles a claimed delivery whose handler panicked (p, the
// value it panicked with) or exited its goroutine (p nil): it stops the
// renewal and releases the claim, and the caller gets a 500 unless an
// answer is on its way.
func (ex *exchange) handlerDied(pending *Record, p any) settled {
	ex.renew.stop()
	ex.release(pending)
	return settled{outcome: OutcomeFailedReleased, err: diedError(p), answer: answer{kind: answerFailed}}
}

// diedError is the error reported for a handler that panicked with p, or
// exited its goroutine (p nil).
func diedError(p any) error {
	if p != nil {
		return fmt.Errorf("idemhook: handler panicked: %v", p)
	}
	return errGoexit
}

// storedHeader picks the replayed headers out of the response's header src,
// into a pooled map that goes back with putHeader once the record is
// stored.
func (rc *routeConfig) storedHeader(src http.Header) http.Header {
	var h http.Header
	for _, name := range rc.replayHeaders {
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

func (ex *exchange) release(pending *Record) {
	_, err := ex.call("release", func(ctx context.Context) (*Record, error) {
		return nil, ex.h.m.store.Release(ctx, ex.storeKey, pending)
	})
	if err != nil {
		ex.warnStore("WebhookIdempotencyInterceptor cache write failed for key=", err)
	}
}

// warnStore logs one of the guard's store WARNs. The message holds its
// prefix (which alerts match) and the key, once. The source, the store
// operation and the store's own error are attributes.
func (ex *exchange) warnStore(prefix string, err error) {
	attrs := []slog.Attr{slog.String("source", ex.h.rt.Source)}
	var se *StoreError
	if errors.As(err, &se) {
		attrs = append(attrs, slog.String("op", se.Op))
		err = se.Err // its text repeats the key
	}
	// A store's error usually names the key too. The message already does.
	msg := strings.Replace(err.Error(), " "+ex.storeKey, "", 1)
	attrs = append(attrs, slog.String("error", msg))
	ex.h.m.warn(prefix+ex.storeKey, attrs...)
}

// replay answers with a stored response; the handler is not called.
func (ex *exchange) replay(rec *Record) {
	w := ex.out.w
	h := w.Header()
	for name, vs := range rec.Header {
		h[name] = vs
	}
	vs := make([]string, 2) // one allocation for both values, each capped at its own
	vs[0], vs[1] = "true", strconv.Itoa(len(rec.Body))
	h[ReplayedHeader], h["Content-Length"] = vs[0:1:1], vs[1:2:2]
	if rec.BodyOmitted {
		h[BodyOmittedHeader] = vs[0:1:1]
	}
	status := rec.Status
	if p := ex.h.rt.Preset; p != nil && p.DuplicateStatus != 0 {
		status = p.DuplicateStatus
	}
	ex.out.WriteHeader(status)
	ex.out.Write(rec.Body) //nolint:errcheck // the client may be gone
}

// writeProblem answers with an RFC 9457 problem+json body.
func (ex *exchange) writeProblem(status int, title, detail string) {
	ex.out.w.Header().Set("Content-Type", problem.ContentType)
	ex.out.WriteHeader(status)
	ex.out.Write(problem.JSON(status, title, detail)) //nolint:errcheck // the client may be gone
}

// report calls Options.OnDelivery with how the delivery settled (s's
// answer has been sent) and the status the caller received. returned is false when the handler run for the
// delivery did not return: net/http's 200 for nothing written is then not
// what the caller got.
func (ex *exchange) report(s settled, returned bool) {
	hook := ex.h.m.opts.OnDelivery
	if hook == nil {
		return
	}
	status := ex.out.status
	switch {
	case ex.out.hijacked:
		status = 0 // answered on the raw connection: unknown here
	case status == 0 && ex.r.Context().Err() == nil && returned:
		status = http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	hook(DeliveryInfo{
		Request:       ex.r,
		Source:        ex.h.rt.Source,
		Key:           ex.key,
		Scope:         ex.scope,
		StoreKey:      ex.storeKey,
		Outcome:       s.outcome,
		Status:        status,
		Duration:      ex.h.m.opts.Now().Sub(ex.start),
		RequestBytes:  int64(len(ex.body)),
		ResponseBytes: ex.out.written,
		Err:           s.err,
		Waited:        ex.waited,
		BodyOmitted:   s.bodyOmitted,
		Items:         s.items,
	})
}

// call runs one store operation on the delivery's key under the store
// deadline and the breaker.
func (ex *exchange) call(op string, fn func(context.Context) (*Record, error)) (*Record, error) {
	return ex.callKey(op, ex.storeKey, fn)
}

// callKey is call for an operation on key (an item's of a batched
// delivery), which its error names.
func (ex *exchange) callKey(op, key string, fn func(context.Context) (*Record, error)) (*Record, error) {
	m := ex.h.m
	hook := m.opts.OnStoreCall
	if !m.breaker.Allow() {
		if hook != nil {
			hook(StoreCallInfo{Op: op, Err: errBreakerOpen, Skipped: true, Request: ex.r})
		}
		return nil, errBreakerOpen
	}
	// The call outlives the request's cancellation (a claim must be
	// completed or released even when the sender hung up) but not the
	// store deadline, which an in-process store has no use for.
	if ex.storeCtx == nil {
		ex.storeCtx = context.WithoutCancel(ex.r.Context())
	}
	ctx, cancel := m.storeDeadline(ex.storeCtx)
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
		info := StoreCallInfo{Op: op, Duration: time.Since(start), Err: err, Request: ex.r}
		if errors.Is(err, ErrNotOwner) {
			info.Err = nil // the store answered: a success, as documented
		}
		hook(info)
	}
	if err != nil && !errors.Is(err, ErrCorruptRecord) {
		err = &StoreError{Op: op, Key: key, Err: err}
	}
	return rec, err
}

var errNoSource = errors.New("idemhook: route has no source")

var errWaitTimeout = errors.New("idemhook: the first delivery of the event still holds the claim after WaitTimeout; answered 409 with Retry-After")

var errGoexit = errors.New("idemhook: the handler exited its goroutine (runtime.Goexit) without answering; the claim was released")

var errHijacked = errors.New("idemhook: the handler hijacked the connection: its response is unknown, the claim was released")

var errBreakerOpen = errors.New("circuit breaker open: store skipped after repeated failures")

func (m *Middleware) warn(msg string, attrs ...slog.Attr) {
	m.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
