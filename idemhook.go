// Package idemhook makes a webhook handler run once per event.
//
// Webhook providers deliver at least once: they send a notification again
// when the answer is slow, lost or not 2xx. The middleware claims a key for
// each event in a [Store] before the handler runs, stores the handler's final
// response, and answers every re-delivery with that response (plus the
// header Idempotent-Replayed: true) without calling the handler again.
//
// A route is configured like the @IdempotentWebhook decorator of the NestJS
// guard idemhook descends from: a source (required), a TTL (default 24h) and a
// header name (default idempotency-key). The key is the header's value, or
// else "sha256:<hex>" of the body in its compact JSON form (the text
// JSON.stringify(JSON.parse(body)) gives in Node.js, so the keys equal the
// guard's), and the store key is "idem:<source>:<key>".
//
// Beyond the guard it adds in-flight policies (wait, the default, reject and
// the guard's proceed), short leases renewed while the handler runs, release
// of the claim unless the handler answered 2xx (providers retry every other
// status), keys scoped by path where a route's path varies ([DefaultScope]),
// the query string in body-hash keys, a 422 for a reused header key with a
// different body, a body size limit, a deadline on every call to a networked
// store, and a circuit breaker. A dead store thus adds milliseconds rather
// than a dial timeout. On a store error the request proceeds (fail-open),
// unless the route says closed (503).
//
// Provider presets (package provider) add a key that survives the provider's
// retries and a signature check that runs before anything is claimed.
//
// A provider that batches its events (Meta, SendGrid, HubSpot) retries the
// whole batch when any part failed. A route with [Items] runs each item of
// a batch once: each is claimed, stored and replayed under its own key, and
// only the items not yet done reach the handler, one request each or all in
// one ([ItemsSplit], [ItemsFilter]; see [BatchFromContext]).
//
// Every method but GET, HEAD and OPTIONS is a delivery. A GET, HEAD or
// OPTIONS request passes through a route untouched: its body is not read,
// nothing is claimed or stored, the handler runs every time and no outcome
// is reported. Only a preset's handshake (Meta's GET challenge) answers one.
//
// While a delivery holds its claim, the handler's answer is buffered until
// the handler returns, so that it is stored before the caller sees it: a
// Flush does nothing until then, and a streamed answer reaches the caller
// whole at the end. An answer whose body grows past
// Route.MaxStoredBodyBytes starts streaming at that point (a Flush then
// works); it is not stored, and its replays say so (see
// [BodyOmittedHeader]).
//
// One route, one event space: two routes of a Middleware with one Source
// would answer each other's deliveries, so [Middleware.Route] refuses the
// second unless both set Route.ShareKeys. A program that replaces its
// routes while it runs makes each generation in a [RouteSet] of its own:
// its routes are checked against each other, and take over the keys of the
// routes of an earlier set with their Source.
//
// Exactly-once effects: a handler whose business writes go to PostgreSQL can
// complete its delivery's claim inside its own transaction (see [Delivery],
// [DeliveryFromContext] and pgstore.Store.CompleteTx). The effect and the
// stored response then commit together or not at all, so a crash between
// the two can no longer run the effect twice.
//
// The package imports only the standard library. Stores: memstore (memory),
// redisstore (Redis standalone, Sentinel, Cluster), sqlitestore and pgstore
// (PostgreSQL).
package idemhook

import (
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemhook/idemhook/internal/httpstatus"
)

// InFlightPolicy says what a duplicate does while the first delivery of its
// event is still running.
type InFlightPolicy string

const (
	// InFlightWait holds the duplicate until the first delivery finishes and
	// then replays its response; if the first fails or its lease lapses, the
	// duplicate takes over. When Route.WaitTimeout passes first, it answers
	// 409 Conflict with Retry-After (the lease), so the provider comes back
	// once a dead owner's claim has lapsed: the handler never runs without
	// the claim. The default.
	InFlightWait InFlightPolicy = "wait"
	// InFlightProceed runs the handler again, without a claim. It is the
	// NestJS guard's exact behaviour (nothing is dropped, but a slow
	// handler runs the event twice).
	InFlightProceed InFlightPolicy = "proceed"
	// InFlightReject answers 409 Conflict with Retry-After and a problem+json
	// body.
	InFlightReject InFlightPolicy = "reject"
)

// StoreErrorPolicy says what a delivery does when the store fails.
type StoreErrorPolicy string

const (
	// StoreErrorOpen logs a WARN and runs the handler (the default).
	StoreErrorOpen StoreErrorPolicy = "open"
	// StoreErrorClosed answers 503 Service Unavailable, so that the provider
	// retries later.
	StoreErrorClosed StoreErrorPolicy = "closed"
)

// Outcome is how a delivery ended. Every delivery has exactly one.
type Outcome string

const (
	OutcomeProcessed         Outcome = "processed"           // first delivery, handler ran, response stored
	OutcomeReplayed          Outcome = "replayed"            // stored response sent, handler not called
	OutcomeInFlightProceeded Outcome = "in_flight_proceeded" // duplicate of a running delivery, handler ran without a claim (policy proceed)
	OutcomeInFlightWaited    Outcome = "in_flight_waited"    // duplicate waited and replayed the first response
	OutcomeInFlightRejected  Outcome = "in_flight_rejected"  // duplicate of a running delivery, answered 409 (policy reject, or wait timed out)
	OutcomeInFlightAbandoned Outcome = "in_flight_abandoned" // duplicate whose caller hung up while it waited for the running delivery: nothing sent
	OutcomeMismatch          Outcome = "mismatch"            // header key reused with another body, answered 422
	OutcomeFailedReleased    Outcome = "failed_released"     // handler answered no stored status (non-2xx by default), panicked or was cut short; claim released
	OutcomeStoreErrorOpen    Outcome = "store_error_open"    // store failed, handler ran without protection
	OutcomeStoreErrorClosed  Outcome = "store_error_closed"  // store failed, answered 503
	OutcomeKeyError          Outcome = "key_error"           // no key could be resolved: no source or a preset key error (handler ran unprotected), an unreadable body or no key on a RequireKey route (400)
	OutcomeSignatureInvalid  Outcome = "signature_invalid"   // preset's signature check failed, answered 401
	OutcomeTooLarge          Outcome = "too_large"           // body over the limit, answered 413
	OutcomeOverloaded        Outcome = "overloaded"          // body not read: Options.MaxHeldBodyBytes was spent, answered 503
)

// Outcomes returns every Outcome, in the order above, in a new slice.
func Outcomes() []Outcome {
	return []Outcome{
		OutcomeProcessed, OutcomeReplayed, OutcomeInFlightProceeded, OutcomeInFlightWaited,
		OutcomeInFlightRejected, OutcomeInFlightAbandoned, OutcomeMismatch, OutcomeFailedReleased, OutcomeStoreErrorOpen,
		OutcomeStoreErrorClosed, OutcomeKeyError, OutcomeSignatureInvalid, OutcomeTooLarge, OutcomeOverloaded,
	}
}

// DeliveryInfo describes one finished delivery, for Options.OnDelivery.
type DeliveryInfo struct {
	Request  *http.Request
	Source   string
	Key      string // the key part, e.g. "sha256:9f86..."; empty when none was resolved
	Scope    string // the key's scope as stored (see Route.Scope); empty when unscoped
	StoreKey string // "idem:<source>:<key>" or "idem:<source>@<scope>:<key>"; empty when none was resolved
	Outcome  Outcome
	// Status is the status written to the caller: the replayed status on a
	// replay, 500 after a handler panic (the middleware answers it before
	// re-panicking), 0 when none was written (the caller hung up first, or
	// the handler hijacked the connection and its answer is unknown).
	Status   int
	Duration time.Duration // from the middleware's entry to its return
	// RequestBytes and ResponseBytes count the bodies (the request body as
	// read, up to the limit; the response body as sent).
	RequestBytes  int64
	ResponseBytes int64
	// Err is the error behind outcomes such as store_error_open,
	// signature_invalid or key_error; nil otherwise.
	Err error
	// Waited is how long the delivery waited for another delivery of its
	// key (policy InFlightWait), whatever came of it: a replay
	// (in_flight_waited), a take-over of a released claim (processed), a
	// 409 at WaitTimeout, a caller that hung up (in_flight_abandoned). 0
	// when it did not wait.
	Waited time.Duration
	// BodyOmitted reports an answer whose body was over the route's
	// MaxStoredBodyBytes: on a processed delivery, the body was sent in full
	// but the stored answer has none; on a replay, the caller got the
	// status and headers with an empty body and [BodyOmittedHeader].
	BodyOmitted bool
	// Items counts the items of a batched delivery (Route.Items), whose
	// Key and StoreKey are then its first item's; nil for a delivery of
	// one event.
	Items *ItemsInfo
}

// StoreCallInfo describes one call to the store, for Options.OnStoreCall.
type StoreCallInfo struct {
	Op       string // "claim", "complete", "release", "extend", "get"
	Duration time.Duration
	Err      error // nil on success; ErrNotOwner and a missing key are successes
	Skipped  bool  // the breaker was open and the store was not called
	// Request is the delivery the call was made for; its context carries
	// the delivery's trace span, if any.
	Request *http.Request
}

// Options configures a [Middleware]: what all its routes share. The zero
// value is valid and means every documented default.
type Options struct {
	// Logger receives the WARN messages (see the package doc). Default: nil,
	// silent.
	Logger *slog.Logger

	// Now is the clock. Default: time.Now.
	Now func() time.Time

	// StoreTimeout bounds every store call, except to a store that reports
	// itself InProcess (memstore), whose calls never wait. Default: the
	// store's own StoreTimeout() if it has one (sqlitestore: its busy
	// timeout, 10s), else 250ms. A call past the bound is a store error: the
	// delivery fails open (or closed, per route) and its record may be lost.
	StoreTimeout time.Duration

	// Lease is how long a pending claim lives without renewal; it is renewed
	// every Lease/3 while the handler runs, so a crashed process frees the key
	// within Lease. At least 1ms. Default: 30s.
	Lease time.Duration

	// BreakerThreshold is the number of consecutive failed store calls that
	// opens the circuit breaker; while open, store calls are skipped (and
	// count as store errors) until BreakerCooldown has passed and a probe
	// succeeds. Default: 5. A negative value disables the breaker.
	BreakerThreshold int

	// BreakerCooldown is how long the breaker stays open before it lets one
	// probe through. Default: 1s.
	BreakerCooldown time.Duration

	// MaxHeldBodyBytes bounds the request-body bytes the middleware holds
	// at once, across all its routes: the memory that a flood of large
	// deliveries can take. A delivery whose body would take the total past
	// it is answered 503 with the route's Retry-After before its body is
	// read, claims nothing and ends in OutcomeOverloaded; the provider
	// sends it again. A declared Content-Length is counted whole before
	// the first byte is read; a body of unknown length (chunked) is counted
	// as its buffer grows. Each route's MaxBodyBytes must be under it.
	// Default: 0, no bound (each body is still bounded by its route's
	// MaxBodyBytes).
	MaxHeldBodyBytes int64

	// OnDelivery is called once per delivery, after the response was written.
	// Default: nil, not called.
	OnDelivery func(DeliveryInfo)

	// OnStoreCall is called after every store call (and every call skipped by
	// the breaker). Default: nil, not called.
	OnStoreCall func(StoreCallInfo)

	// OnBreakerChange is called when the breaker opens (true) or closes
	// (false). Default: nil, not called.
	OnBreakerChange func(open bool)
}

// Route configures one webhook route: the equivalent of the NestJS guard's
// @IdempotentWebhook({source, ttlSec, headerName}) decorator, plus the
// policies idemhook adds. A zero field means its documented default.
type Route struct {
	// Source labels the provider, e.g. "stone"; it is the middle part of the
	// store key and must not contain ':' or '@'. Required: a route without
	// it logs "WebhookIdempotencyGuard key resolution failed: ..." and
	// passes every request through unprotected, as the guard did.
	Source string

	// Scope separates the keys of requests that reach this route on
	// different paths (tenants, accounts), so that one path's answer is
	// never replayed to another: a non-empty scope becomes part of the
	// store key, "idem:<source>@<scope>:<key>". An empty scope leaves the
	// store key "idem:<source>:<key>", the NestJS guard's.
	//
	// Default (nil): [DefaultScope]: none for a fixed pattern; for a
	// pattern that can match more than one path (a wildcard such as
	// {tenant} or *, or a subtree pattern ending in /), the pattern with the
	// values of its wildcards, as a canonical path ("/t/acme/orders" for
	// /t/{tenant}/orders), so that another spelling of the same path (a
	// trailing slash, a percent-encoded letter) is the same scope; the
	// request's cleaned path when no router recorded the pattern in
	// Request.Pattern. Behind a router that doesn't set Request.Pattern, a
	// fixed route whose keys must equal the guard's returns "" here.
	Scope func(*http.Request) string

	// ShareKeys lets other routes of the same Middleware (or of the same
	// [RouteSet]) have this route's Source, for routes that mean to share
	// one event space (one provider's events reaching a service on two
	// paths, say): a delivery through one is a duplicate of the same event
	// through another, and is answered with its stored answer.
	// [Middleware.Route] and [RouteSet.Route] refuse a second route with a
	// Source unless every route of the Source sets it, so that routes built
	// in a loop (one per tenant, all with Source "stripe") can't silently
	// answer one tenant with another's answers. Routes of different sets
	// are not checked against each other. Default: false, the Source is
	// this route's own.
	ShareKeys bool

	// TTL is how long a completed response is kept and replayed. It should
	// cover the provider's retry window. Default: [Preset.DefaultTTL], the
	// preset's RetryWindow plus a day in whole days (Stripe: 4 days), or
	// 24h without a preset.
	TTL time.Duration

	// Header names the request header whose value is the key. Default:
	// "idempotency-key"; with a Preset, no header unless set here.
	Header string

	// RequireKey refuses a delivery whose key comes from neither the header
	// nor the preset with 400 and a problem+json body (outcome key_error),
	// instead of falling back to the body hash. Default: false, fall back.
	RequireKey bool

	// InFlight is the policy for duplicates of a running delivery.
	// Default: InFlightWait.
	InFlight InFlightPolicy

	// WaitTimeout bounds InFlightWait; then the duplicate is answered 409
	// with Retry-After. Default: 10s.
	WaitTimeout time.Duration

	// RetryAfter is the Retry-After of an InFlightReject answer and of a
	// closed-store 503, rounded up to whole seconds. Default: 5s.
	RetryAfter time.Duration

	// Lease overrides Options.Lease for this route: how long a pending
	// claim lives without renewal (renewed every Lease/3 while the
	// handler runs). A route whose handler may stall longer than usual
	// between renewals wants more; one where a crashed process must free
	// its keys sooner wants less. At least 1ms. Default: Options.Lease.
	Lease time.Duration

	// OnStoreError is the policy when the store fails. Default: StoreErrorOpen.
	OnStoreError StoreErrorPolicy

	// MaxBodyBytes limits the request body; a larger one is answered 413 and
	// nothing is claimed. Default: 5 MiB.
	MaxBodyBytes int64

	// MaxStoredBodyBytes caps the response body kept for replay. A larger
	// response is still sent in full to the first caller, but only its status
	// and headers are stored: a replay has the same status and headers, an
	// empty body and [BodyOmittedHeader]. The middleware says so where it
	// happens: a WARN the first time on each route, DeliveryInfo.BodyOmitted
	// (promhook counts it in idemhook_stored_body_omitted_total). Providers
	// act on the status of an answer, not its body, and every stored key
	// holds its body in the store for the whole TTL: 64 KiB bounds a
	// million keys' worst case to 64 GiB where typical answers take a few
	// dozen bytes. Raise it for a handler whose callers read large bodies.
	// Default: 64 KiB.
	MaxStoredBodyBytes int

	// StoreStatuses lists non-2xx statuses (300 to 499) that are stored and
	// replayed like a success, for a handler whose refusal is final: a 410
	// for an event about a deleted account, say. Every other status
	// releases the claim, so the provider's retry runs the handler again: a
	// 404 answered while a deploy removes the route for a minute must not
	// be replayed for the whole TTL. Default: none, only 2xx is stored.
	StoreStatuses []int

	// ReplayHeaders lists response headers stored and replayed in addition
	// to those that define the body's bytes, which always are
	// ([RepresentationHeaders]: Content-Type, Content-Encoding,
	// Content-Language, Content-Range). Set-Cookie, Authorization,
	// hop-by-hop headers and Content-Length are never stored and are
	// refused here. Default: none.
	ReplayHeaders []string

	// Preset adds a provider's key strategy, signature check, retry window
	// and duplicate answer (see package provider). Default: nil, none.
	Preset *Preset

	// Items makes the route's once per item of a batched body rather than
	// per request (see [Items]). Default: the Preset's Items, if any; else
	// nil, once per request.
	Items *Items

	// ItemsSuccess, if set, is the answer to a batched delivery whose
	// items are all done, in place of the Preset's SuccessStatus and
	// SuccessBody (or an empty 200): a handler that answers every event
	// alike, as the gateway's queued routes answer their accept answer,
	// then answers a batch of them alike too. Its Status must be a 2xx; a
	// batch whose items were all done before has the Preset's
	// DuplicateStatus, if set, as a replay of one event has. Default: nil.
	ItemsSuccess *Answer
}

// Stores reports whether a handler's answer with status is stored and
// replayed on this route: every 2xx, and the statuses StoreStatuses lists.
// Any other answer releases the claim. The gateway's queue tells a
// delivered attempt by the same rule.
func (rt Route) Stores(status int) bool {
	return httpstatus.IsSuccess(status) || slices.Contains(rt.StoreStatuses, status)
}

// Answer is a fixed HTTP answer: a status, its headers and its body.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// A RouteError is a [Route] that [Middleware.Route] refuses. Field names
// the Route field at fault, so that a configuration file can point at the
// line that set it.
type RouteError struct {
	Source string // the route's Source; "" when it has none
	Field  string // e.g. "TTL", "ReplayHeaders"
	Index  int    // the element at fault of a list field (ReplayHeaders, StoreStatuses); 0 otherwise
	Reason string // what is wrong, naming the field, e.g. "TTL -1s is negative"
}

func (e *RouteError) Error() string {
	if e.Source == "" {
		return "idemhook: Route: " + e.Reason
	}
	return "idemhook: Route " + strconv.Quote(e.Source) + ": " + e.Reason
}

// RepresentationHeaders returns the response headers that describe the body's
// bytes (RFC 9110 section 8): every route stores and replays them with the
// body, so that a compressed answer is replayed with its Content-Encoding.
// It returns a new slice each time: the list is the middleware's, not the
// caller's to change.
func RepresentationHeaders() []string { return slices.Clone(representationHeaders[:]) }

var representationHeaders = [...]string{"Content-Type", "Content-Encoding", "Content-Language", "Content-Range"}

// Preset is what a provider adds to a route. Package provider has one per
// common provider; a custom one is a value of this type.
type Preset struct {
	// Name identifies the preset in errors and logs, e.g. "stripe".
	Name string

	// Verify checks the request's signature against the body as received.
	// A non-nil error answers 401 with a problem+json body, outcome
	// signature_invalid; nothing is claimed and the handler is not called.
	// Default: nil, no check.
	Verify func(r *http.Request, body []byte) error

	// Handshake answers requests that are not deliveries, such as Meta's GET
	// subscription challenge or Slack's url_verification; it runs after
	// Verify and reports whether it wrote a response. Handshakes have no
	// outcome. Default: nil.
	Handshake func(w http.ResponseWriter, r *http.Request, body []byte) bool

	// Key returns the provider's stable event key, e.g. Stripe's "evt_..."
	// id. An empty key falls back to the body hash; an error is outcome
	// key_error and the handler runs unprotected. Keys from a preset never
	// give a 422 mismatch. Default: nil, body hash.
	Key func(r *http.Request, body []byte) (string, error)

	// DuplicateStatus, if not 0, replaces the stored status when a response
	// is replayed (iFood wants 202, Asaas exactly 200). Default: 0.
	DuplicateStatus int

	// SuccessStatus, if not 0, is the status the provider counts as
	// success. The gateway answers it in place of any 2xx its backend
	// answered (Asaas counts only 200: a 201 or 204 is a failure to it, and
	// 15 failures pause its queue; iFood expects 202), so a backend never
	// has to know; the answer stored, and so every replay, has it too. A Go
	// handler behind the middleware answers what it likes: its answers are
	// not rewritten. The middleware's own answer to a batch whose items are
	// all done has it, unless the route sets ItemsSuccess. Default: 0, the
	// backend's own status.
	SuccessStatus int

	// SuccessBody, if not "", is the body the provider expects with a
	// success (Adyen's Standard webhooks: "[accepted]"). Wherever the
	// gateway answers SuccessStatus in place of a 2xx of its backend, it
	// answers this body in place of the backend's, as text/plain;
	// charset=utf-8, and a queued route's accept answer is this body
	// unless the route sets accept.body; the answer stored, and so every
	// replay, has it too. It needs a SuccessStatus and must be valid UTF-8.
	// Like SuccessStatus it does not rewrite a Go handler's answers, and
	// is the body of the middleware's own answer to a batch whose items
	// are all done. Default: "", the backend's own body.
	SuccessBody string

	// RetryWindow is how long after the first attempt the provider may
	// still send the event again (its documented retry schedule). A route
	// with this preset keeps its answers for [Preset.DefaultTTL] unless it
	// sets a TTL. Default: 0, unknown (the route's TTL defaults to 24h).
	RetryWindow time.Duration

	// Items says where the items of the provider's batched bodies are and
	// what keys each (Meta's entry[].changes[].value.messages[], SendGrid's
	// array of events), so that each item runs once ([Route.Items]).
	// Default: nil, one event per request.
	Items *Items
}

// retryMargin is added to a preset's RetryWindow to make a route's default
// TTL: it covers clock skew, a provider's jitter and a manual resend from
// its dashboard shortly after the last automatic retry.
const retryMargin = 24 * time.Hour

// DefaultTTL returns the TTL a route with this preset gets when it sets
// none. It is the RetryWindow plus a day, rounded up to whole days. A nil
// preset, or one with no RetryWindow, gets [DefaultTTL] (24h).
func (p *Preset) DefaultTTL() time.Duration {
	if p == nil || p.RetryWindow == 0 {
		return DefaultTTL
	}
	const day = 24 * time.Hour
	return (p.RetryWindow + retryMargin + day - 1) / day * day
}
