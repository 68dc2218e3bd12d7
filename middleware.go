package idemhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
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

	"github.com/idemhook/idemhook/internal/breaker"
	"github.com/idemhook/idemhook/internal/canonjson"
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
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, ReplayedHeader: true, BodyOmittedHeader: true,
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

	mu      sync.Mutex
	sources map[string]bool // the Source of each route made, and whether it set ShareKeys
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
		if st, ok := store.(interface{ StoreTimeout() time.Duration }); ok && st.StoreTimeout() > 0 {
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

// StoreTimeout is the bound of each store call (Options.StoreTimeout, or
// its default for the store), for a probe of the store that should fail
// when deliveries would.
func (m *Middleware) StoreTimeout() time.Duration { return m.opts.StoreTimeout }

// Route checks rt, applies its defaults and returns the middleware for one
// webhook route. A Route it refuses is reported as a [*RouteError]: one
// that [Route.Validate] refuses, and one whose Source another route of m
// already has, unless every route of that Source sets ShareKeys (routes
// with one Source answer each other's deliveries).
func (m *Middleware) Route(rt Route) (func(http.Handler) http.Handler, error) {
	if err := rt.applyDefaults(); err != nil {
		return nil, err
	}
	if err := m.addSource(&rt); err != nil {
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
	if h.scope == nil {
		h.scope = DefaultScope
	}
	for _, name := range slices.Concat(RepresentationHeaders, rt.ReplayHeaders) {
		if name = http.CanonicalHeaderKey(name); !slices.Contains(h.replayHeaders, name) {
			h.replayHeaders = append(h.replayHeaders, name)
		}
	}
	return func(next http.Handler) http.Handler {
		return &handler{routeConfig: h, next: next}
	}, nil
}

// addSource records rt's Source as used by a route of m, or refuses it
// when another route has it and they don't both set ShareKeys. A route with
// no Source claims nothing, so it shares nothing.
func (m *Middleware) addSource(rt *Route) error {
	if rt.Source == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	shares, used := m.sources[rt.Source]
	if used && !(shares && rt.ShareKeys) {
		return &RouteError{Source: rt.Source, Field: "Source", Reason: fmt.Sprintf(
			"Source %q is already the Source of another route of this Middleware: routes with one Source share their keys, "+
				"so one would answer a delivery with the stored answer of the other; give each route a Source of its own "+
				"(such as \"%s-<tenant>\"), or set ShareKeys on every route of the Source if they mean to share keys",
			rt.Source, rt.Source)}
	}
	if m.sources == nil {
		m.sources = make(map[string]bool)
	}
	m.sources[rt.Source] = rt.ShareKeys
	return nil
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
	if strings.ContainsAny(rt.Source, ":@\x00") {
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
		if st < 300 || st > 499 {
			return fail("StoreStatuses", i, "StoreStatuses: %d is not a status from 300 to 499 (2xx is always stored; 1xx and 5xx never are)", st)
		}
	}
	if rt.Preset != nil && rt.Preset.RetryWindow < 0 {
		return fail("Preset", 0, "Preset %q: RetryWindow %v is negative", rt.Preset.Name, rt.Preset.RetryWindow)
	}
	if rt.Preset != nil && rt.Preset.DuplicateStatus != 0 && (rt.Preset.DuplicateStatus < 200 || rt.Preset.DuplicateStatus > 299) {
		return fail("Preset", 0, "Preset %q: DuplicateStatus %d is not a 2xx status", rt.Preset.Name, rt.Preset.DuplicateStatus)
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
}

// stores reports whether a response with status is stored and replayed;
// any other releases the claim.
func (h *routeConfig) stores(status int) bool {
	return status >= 200 && status <= 299 || slices.Contains(h.rt.StoreStatuses, status)
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

	offered  Delivery     // what offerDelivery hands the handler: allocated with the delivery
	offerCtx offerContext // the handler's context, holding offered

	key        string
	scope      string // escaped, as in the store key
	storeKey   string
	firstToken string // the owner token of the first claim, allocated with storeKey
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

	// panicking is set while an unclaimed handler runs: when it panics, the
	// report says what was written, not net/http's 200 for nothing.
	panicking bool

	waited time.Duration // time spent in wait, for DeliveryInfo.Waited

	bodyOmitted bool // the answer stored, or replayed, has no body: it was over MaxStoredBodyBytes
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := &delivery{h: h, r: r, start: h.m.opts.Now()}
	d.out = responseCapture{w: w}
	d.end(d.decide())
}

// action is what a delivery does once the middleware has decided.
type action uint8

const (
	actNone       action = iota // nothing more: answered already, or the caller is gone
	actRun                      // run the handler without a claim
	actRunClaimed               // run the handler holding the claim, then store or release
	actReplay                   // answer with the stored response
	actProblem                  // answer with a problem+json document
)

// verdict is what the steps of a delivery decided: an action and the
// outcome it ends in. Every step returns one; [delivery.end] carries it out.
type verdict struct {
	act     action
	outcome Outcome // "" for requests that are not deliveries (safe methods, handshakes): no report
	err     error

	claim *Record // actRunClaimed: the claim held
	rec   *Record // actReplay: the stored response

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
func (d *delivery) decide() verdict {
	h, r := d.h, d.r
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
		if v, ok := d.readBody(); !ok {
			return v
		}
	}
	if p := h.rt.Preset; p != nil {
		if p.Verify != nil {
			if err := p.Verify(r, d.body); err != nil {
				return problemVerdict(http.StatusUnauthorized, "Signature verification failed", err.Error(), OutcomeSignatureInvalid, err)
			}
		}
		if p.Handshake != nil && p.Handshake(d.out.w, r, d.body) {
			return verdict{act: actNone}
		}
	}
	if safe {
		return verdict{act: actRun}
	}
	if err := d.resolveKey(); err != nil {
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
	return d.claim()
}

func isSafeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// readBody reads the body once under the route's limit and gives the handler
// an identical copy. On a body over the limit or one that can't be read it
// returns the verdict (413, 400) and false.
func (d *delivery) readBody() (verdict, bool) {
	limit := d.h.rt.MaxBodyBytes
	r := d.r
	if r.ContentLength > limit {
		return d.tooLarge(), false
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
			return d.tooLarge(), false
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return problemVerdict(http.StatusBadRequest, "Bad request body", "the request body could not be read: "+err.Error(), OutcomeKeyError, err), false
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
	return verdict{}, true
}

// maxBodyPrealloc bounds the buffer allocated for a request body before its
// bytes arrive.
const maxBodyPrealloc = 64 << 10

// bodyReader hands the handler the body that was read.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

func (d *delivery) tooLarge() verdict {
	return problemVerdict(http.StatusRequestEntityTooLarge, "Request body too large",
		fmt.Sprintf("the request body exceeds the limit of %d bytes", d.h.rt.MaxBodyBytes), OutcomeTooLarge, nil)
}

// resolveKey applies the key strategies in order: configured header, preset
// key, body hash (unless the route requires a key).
func (d *delivery) resolveKey() error {
	rt := &d.h.rt
	d.scope = escapeScope(d.h.scope(d.r))
	if rt.Header != "" {
		if v := NormalizeKey(joinFieldValues(d.r.Header[d.h.keyHeader])); v != "" {
			d.key, d.kind = v, keyFromHeader
			sum := canonjson.Sum(d.body)
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
		if rt.RequireKey {
			return errKeyRequired
		}
		// One allocation for both: the key is the tail of the store key.
		// No fingerprint: the key is the body's hash already, so a
		// body-hash record can't mismatch and is 16 bytes smaller.
		sum := requestSum(d.body, d.r.URL.RawQuery)
		prefix := d.setStoreKey("", &sum)
		d.key, d.kind = d.storeKey[prefix:], keyFromBody
		return nil
	}
	d.setStoreKey(d.key, nil)
	return nil
}

// setStoreKey sets d.storeKey, whose key part is key, or "sha256:" and the
// hex of sum when sum is not nil, and d.firstToken, the owner token of the
// delivery's first claim. Both are slices of one string, the one
// allocation. It returns where the key part starts in d.storeKey.
func (d *delivery) setStoreKey(key string, sum *[sha256.Size]byte) int {
	rt := &d.h.rt
	keyLen := len(key)
	if sum != nil {
		keyLen = len("sha256:") + hex.EncodedLen(len(sum))
	}
	var buf [192]byte // fits the usual source, scope and key: the string below is then the one allocation
	b := buf[:0]
	if n := storeKeyLen(rt.Source, d.scope, keyLen) + tokenLen; n > len(buf) {
		b = make([]byte, 0, n)
	}
	b = appendStoreKeyPrefix(b, rt.Source, d.scope)
	prefix := len(b)
	if sum != nil {
		b = hex.AppendEncode(append(b, "sha256:"...), sum[:])
	} else {
		b = append(b, key...)
	}
	end := len(b)
	s := string(appendToken(b))
	d.storeKey, d.firstToken = s[:end], s[end:]
	return prefix
}

var errKeyRequired = errors.New("idemhook: the route requires a key and the request carries none")

// claim is the heart of the flow: one store round trip decides whether this
// delivery runs the handler, replays, waits or is refused.
func (d *delivery) claim() verdict {
	pending := d.newClaim()
	existing, err := d.call("claim", func(ctx context.Context) (*Record, error) {
		return d.h.m.store.Claim(ctx, d.storeKey, pending, d.h.lease)
	})
	return d.afterClaim(pending, existing, err, false)
}

// afterClaim decides from the result of a claim. waited is true once the
// delivery has waited for another one (policy wait).
func (d *delivery) afterClaim(pending, existing *Record, err error, waited bool) verdict {
	switch {
	case err != nil:
		return d.storeError(err)
	case existing == nil:
		return verdict{act: actRunClaimed, claim: pending}
	case existing.State == StateCompleted:
		if d.kind == keyFromHeader && existing.Fingerprint != ([FingerprintSize]byte{}) && existing.Fingerprint != d.fp {
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
	switch d.h.rt.InFlight {
	case InFlightReject:
		v := problemVerdict(http.StatusConflict, "Delivery in progress",
			"a delivery of this event is being processed; retry later", OutcomeInFlightRejected, nil)
		v.retryAfter = d.h.retryAfter
		return v
	case InFlightWait:
		if !waited {
			return d.wait()
		}
	}
	return verdict{act: actRun, outcome: OutcomeInFlightProceeded}
}

// newClaim returns a pending record with a fresh owner token. A delivery
// holds one claim at a time, so each call reuses the same record.
func (d *delivery) newClaim() *Record {
	tok := d.firstToken
	if tok == "" {
		var buf [tokenLen]byte
		tok = string(appendToken(buf[:0])) // a claim after a wait: rare
	}
	d.firstToken = ""
	d.claimRec = Record{State: StatePending, Token: tok, Fingerprint: d.fp, CreatedAt: d.h.m.opts.Now()}
	return &d.claimRec
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

// wait polls the key until the running delivery completes (replay), goes away
// (take over) or WaitTimeout passes (409).
func (d *delivery) wait() verdict {
	deadline := time.NewTimer(d.h.rt.WaitTimeout)
	defer deadline.Stop()
	interval := 5 * time.Millisecond
	poll := time.NewTimer(interval)
	defer poll.Stop()
	start := d.h.m.opts.Now()
	for {
		select {
		case <-d.r.Context().Done():
			d.waited = d.h.m.opts.Now().Sub(start)
			return verdict{act: actNone, outcome: OutcomeInFlightWaited, err: d.r.Context().Err()}
		case <-deadline.C:
			d.waited = d.h.m.opts.Now().Sub(start)
			// The first delivery still holds the claim, alive or dead.
			// Running the handler unclaimed could run the event twice, so
			// the provider is told to come back once the claim's lease
			// has lapsed, when its retry can claim the key.
			v := problemVerdict(http.StatusConflict, "Delivery in progress",
				"a delivery of this event is still being processed; retry later", OutcomeInFlightRejected, errWaitTimeout)
			v.retryAfter = d.h.leaseAfter
			return v
		case <-poll.C:
		}
		d.waited = d.h.m.opts.Now().Sub(start)
		rec, err := d.call("get", func(ctx context.Context) (*Record, error) {
			return d.h.m.store.Get(ctx, d.storeKey)
		})
		switch {
		case err != nil && (d.h.m.breaker.Open() || errors.Is(err, ErrCorruptRecord)):
			// The store is down, not just slow, or the key holds a value
			// that is not a record: apply the store-error (or parse-error)
			// policy now rather than at WaitTimeout.
			return d.storeError(err)
		case err != nil:
			// A slow poll: the claim was seen pending, keep waiting.
		case rec == nil: // released or lapsed: try to take over
			pending := d.newClaim()
			existing, err := d.call("claim", func(ctx context.Context) (*Record, error) {
				return d.h.m.store.Claim(ctx, d.storeKey, pending, d.h.lease)
			})
			slow := err != nil && !d.h.m.breaker.Open() && !errors.Is(err, ErrCorruptRecord)
			if !slow && (err != nil || existing == nil || existing.State == StateCompleted) {
				return d.afterClaim(pending, existing, err, true)
			}
		case rec.State == StateCompleted:
			return d.afterClaim(nil, rec, nil, true)
		}
		interval = min(interval*2, 100*time.Millisecond)
		poll.Reset(interval)
	}
}

// storeError applies the route's store-error policy.
func (d *delivery) storeError(err error) verdict {
	m := d.h.m
	if errors.Is(err, ErrCorruptRecord) {
		d.warnStore("WebhookIdempotencyGuard cached value parse error for key=", err)
		return verdict{act: actRun, outcome: OutcomeStoreErrorOpen, err: err}
	}
	d.warnStore("WebhookIdempotencyGuard "+m.storeName+" error for key=", err)
	if d.h.rt.OnStoreError == StoreErrorClosed {
		v := problemVerdict(http.StatusServiceUnavailable, "Idempotency store unavailable",
			"the idempotency store cannot be reached; retry later", OutcomeStoreErrorClosed, err)
		v.retryAfter = d.h.retryAfter
		return v
	}
	return verdict{act: actRun, outcome: OutcomeStoreErrorOpen, err: err}
}

// end carries out v: the one place every delivery finishes. It writes the
// answer (or runs the handler), completes or releases the claim, and
// reports the outcome exactly once, even when the handler panics.
func (d *delivery) end(v verdict) {
	defer func() {
		// Deferred, so that a handler that panics or exits its goroutine
		// is reported too: runClaimed has set the outcome by then.
		if v.outcome != "" {
			d.report(v.outcome, v.err)
		}
	}()
	switch v.act {
	case actRun:
		if v.outcome == "" {
			d.h.next.ServeHTTP(d.out.w, d.r) // not a delivery: untouched
			return
		}
		d.panicking = true
		d.h.next.ServeHTTP(&d.out, d.r)
		d.panicking = false
	case actRunClaimed:
		d.runClaimed(&v)
	case actReplay:
		d.replay(v.rec)
	case actProblem:
		if v.retryAfter != "" {
			d.out.w.Header().Set("Retry-After", v.retryAfter)
		}
		d.writeProblem(v.status, v.title, v.detail)
	}
}

// runClaimed runs the handler for a claim this delivery holds, then stores
// the answer or releases the claim, and only then sends the answer. It sets
// v's outcome (and error): processed or failed_released.
func (d *delivery) runClaimed(v *verdict) {
	m := d.h.m
	pending := v.claim
	d.out.buffering = true
	d.out.limit = d.h.rt.MaxStoredBodyBytes
	tx := d.offerDelivery(pending) // see delivery.go; before the renewal, which reads d.r
	d.startRenewal(pending)
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
		d.handlerFailed()
		v.outcome, v.err = OutcomeFailedReleased, errGoexit
		if p != nil {
			v.err = fmt.Errorf("idemhook: handler panicked: %v", p)
			panic(p)
		}
	}()
	d.h.next.ServeHTTP(&d.out, d.r)
	returned = true
	d.renew.stop()
	if tx.settle(pending, v) { // the handler completed the claim in its own transaction
		return
	}

	v.outcome = OutcomeFailedReleased
	if d.out.hijacked {
		// The handler answered on the raw connection: its answer is
		// unknown here, so nothing is stored and a retry runs afresh.
		d.release(pending)
		v.err = errHijacked
		return
	}
	status := d.out.finalStatus()
	if cutShort := d.out.status == 0 && d.r.Context().Err() != nil; cutShort || !d.h.stores(status) {
		d.release(pending)
		d.out.send()
		if cutShort {
			v.err = fmt.Errorf("idemhook: delivery cut short: %w", context.Cause(d.r.Context()))
		}
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
		d.warnStore("WebhookIdempotencyInterceptor cache write failed for key=", err)
	} else if d.out.omitted {
		d.omittedBody()
	}
	d.out.send()
	v.outcome, v.err = OutcomeProcessed, err
}

// omittedBody notes a stored answer whose body was over the route's
// MaxStoredBodyBytes, and says so once per route in a WARN: its replays
// will carry an empty body.
func (d *delivery) omittedBody() {
	d.bodyOmitted = true
	if d.h.warnedOmitted.CompareAndSwap(false, true) {
		d.h.m.warn("idemhook: a response body over MaxStoredBodyBytes was sent but not stored; "+
			"its replays carry the status and headers, an empty body and "+BodyOmittedHeader+": true (logged once per route)",
			slog.String("source", d.h.rt.Source), slog.Int("max_stored_body_bytes", d.h.rt.MaxStoredBodyBytes),
			slog.Int64("body_bytes", d.out.written), slog.String("key", d.storeKey))
	}
}

// handlerFailed answers 500 for a handler that panicked or exited its
// goroutine, unless its answer was already on its way: the caller gets a
// definite failure (and retries), and the hooks report what it got. The
// answer is flushed, because net/http closes the connection of a panicking
// handler without sending what is still buffered.
func (d *delivery) handlerFailed() {
	if d.out.streaming || d.r.Context().Err() != nil {
		return
	}
	d.out.buf, d.out.status, d.out.buffering, d.out.omitted, d.out.written = d.out.buf[:0], 0, false, false, 0
	h := d.out.w.Header()
	for _, name := range RepresentationHeaders {
		h.Del(name)
	}
	d.writeProblem(http.StatusInternalServerError, "Handler failed",
		"the webhook handler failed; the delivery was not processed, retry it")
	http.NewResponseController(d.out.w).Flush() //nolint:errcheck // best effort: the connection is about to close
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
		d.warnStore("WebhookIdempotencyInterceptor cache write failed for key=", err)
	}
}

// warnStore logs one of the guard's store WARNs. The message holds its
// prefix (which alerts match) and the key, once. The source, the store
// operation and the store's own error are attributes.
func (d *delivery) warnStore(prefix string, err error) {
	attrs := []slog.Attr{slog.String("source", d.h.rt.Source)}
	var se *StoreError
	if errors.As(err, &se) {
		attrs = append(attrs, slog.String("op", se.Op))
		err = se.Err // its text repeats the key
	}
	// A store's error usually names the key too. The message already does.
	msg := strings.Replace(err.Error(), " "+d.storeKey, "", 1)
	attrs = append(attrs, slog.String("error", msg))
	d.h.m.warn(prefix+d.storeKey, attrs...)
}

// replay answers with a stored response; the handler is not called.
func (d *delivery) replay(rec *Record) {
	w := d.out.w
	h := w.Header()
	for name, vs := range rec.Header {
		h[name] = vs
	}
	vs := make([]string, 2) // one allocation for both values, each capped at its own
	vs[0], vs[1] = "true", strconv.Itoa(len(rec.Body))
	h[ReplayedHeader], h["Content-Length"] = vs[0:1:1], vs[1:2:2]
	if rec.BodyOmitted {
		d.bodyOmitted = true
		h[BodyOmittedHeader] = vs[0:1:1]
	}
	status := rec.Status
	if p := d.h.rt.Preset; p != nil && p.DuplicateStatus != 0 {
		status = p.DuplicateStatus
	}
	d.out.WriteHeader(status)
	d.out.Write(rec.Body) //nolint:errcheck // the client may be gone
}

// writeProblem answers with an RFC 9457 problem+json body.
func (d *delivery) writeProblem(status int, title, detail string) {
	d.out.w.Header().Set("Content-Type", "application/problem+json")
	d.out.WriteHeader(status)
	d.out.Write(problemJSON(status, title, detail)) //nolint:errcheck // the client may be gone
}

// problemJSON is an RFC 9457 problem document. encoding/json escapes what
// a detail may carry (a control byte in an error's text, invalid UTF-8),
// so the body is always valid JSON.
func problemJSON(status int, title, detail string) []byte {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail}) // cannot fail: strings and an int
	return append(b, '\n')
}

// report calls Options.OnDelivery with the delivery's outcome and the status
// the caller received.
func (d *delivery) report(outcome Outcome, err error) {
	hook := d.h.m.opts.OnDelivery
	if hook == nil {
		return
	}
	status := d.out.status
	switch {
	case d.out.hijacked:
		status = 0 // answered on the raw connection: unknown here
	case status == 0 && d.r.Context().Err() == nil && !d.panicking:
		status = http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	hook(DeliveryInfo{
		Request:       d.r,
		Source:        d.h.rt.Source,
		Key:           d.key,
		Scope:         d.scope,
		StoreKey:      d.storeKey,
		Outcome:       outcome,
		Status:        status,
		Duration:      d.h.m.opts.Now().Sub(d.start),
		RequestBytes:  int64(len(d.body)),
		ResponseBytes: d.out.written,
		Err:           err,
		Waited:        d.waited,
		BodyOmitted:   d.bodyOmitted,
	})
}

// call runs one store operation under the store deadline and the breaker.
func (d *delivery) call(op string, fn func(context.Context) (*Record, error)) (*Record, error) {
	m := d.h.m
	hook := m.opts.OnStoreCall
	if !m.breaker.Allow() {
		if hook != nil {
			hook(StoreCallInfo{Op: op, Err: errBreakerOpen, Skipped: true, Request: d.r})
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
		info := StoreCallInfo{Op: op, Duration: time.Since(start), Err: err, Request: d.r}
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

var errNoSource = errors.New("idemhook: route has no source")

var errWaitTimeout = errors.New("idemhook: the first delivery of the event still holds the claim after WaitTimeout; answered 409 with Retry-After")

var errGoexit = errors.New("idemhook: the handler exited its goroutine (runtime.Goexit) without answering; the claim was released")

var errHijacked = errors.New("idemhook: the handler hijacked the connection: its response is unknown, the claim was released")

var errBreakerOpen = errors.New("circuit breaker open: store skipped after repeated failures")

func (m *Middleware) warn(msg string, attrs ...slog.Attr) {
	m.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
