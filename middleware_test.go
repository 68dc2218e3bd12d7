package idemhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/internal/syncbuf"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/provider"
)

// clock is the injectable time source shared by the store and the middleware.
type clock = fakeclock.Clock

func newClock() *clock { return fakeclock.New(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) }

// env is one middleware over a real store, with everything a test counts.
type env struct {
	t     *testing.T
	clock *clock
	store idemhook.Store
	mw    *idemhook.Middleware
	logs  *syncbuf.Buffer

	mu          sync.Mutex
	deliveries  []idemhook.DeliveryInfo
	storeCalls  []idemhook.StoreCallInfo
	breakerOpen atomic.Bool // as Options.OnBreakerChange last said
}

func newEnv(t *testing.T, store idemhook.Store, clk *clock, opts idemhook.Options) *env {
	t.Helper()
	e := &env{t: t, clock: clk, store: store, logs: &syncbuf.Buffer{}}
	opts.Logger = slog.New(slog.NewTextHandler(e.logs, nil))
	if clk != nil {
		opts.Now = clk.Now
	}
	opts.OnDelivery = func(di idemhook.DeliveryInfo) {
		e.mu.Lock()
		e.deliveries = append(e.deliveries, di)
		e.mu.Unlock()
	}
	userCalls := opts.OnStoreCall
	opts.OnStoreCall = func(ci idemhook.StoreCallInfo) {
		e.mu.Lock()
		e.storeCalls = append(e.storeCalls, ci)
		e.mu.Unlock()
		if userCalls != nil {
			userCalls(ci)
		}
	}
	userBreaker := opts.OnBreakerChange
	opts.OnBreakerChange = func(open bool) {
		e.breakerOpen.Store(open)
		if userBreaker != nil {
			userBreaker(open)
		}
	}
	mw, err := idemhook.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.mw = mw
	return e
}

// newMemEnv is an env over a memory store on an injected clock.
func newMemEnv(t *testing.T, opts idemhook.Options) *env {
	t.Helper()
	clk := newClock()
	st, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, st, clk, opts)
}

// route wraps h for rt. Tests call the handler directly, on whatever path,
// with no router to record a pattern, so a route without a Scope gets the
// unscoped keys of a fixed route; the default scope has its own tests.
func (e *env) route(rt idemhook.Route, h http.Handler) http.Handler {
	e.t.Helper()
	if rt.Scope == nil {
		rt.Scope = unscoped
	}
	wrap, err := e.mw.Route(rt)
	if err != nil {
		e.t.Fatal(err)
	}
	return wrap(h)
}

func unscoped(*http.Request) string { return "" }

func (e *env) outcomes() []idemhook.Outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []idemhook.Outcome
	for _, d := range e.deliveries {
		out = append(out, d.Outcome)
	}
	return out
}

func (e *env) countOutcomes() map[idemhook.Outcome]int {
	m := map[idemhook.Outcome]int{}
	for _, o := range e.outcomes() {
		m[o]++
	}
	return m
}

// counter is a webhook handler that counts its executions.
type counter struct {
	n      atomic.Int64
	status int
	body   string
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.n.Add(1)
	io.Copy(io.Discard, r.Body) //nolint:errcheck
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Not-Replayed", "1")
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	if c.body != "" {
		io.WriteString(w, c.body) //nolint:errcheck
		return
	}
	fmt.Fprintf(w, `{"execution":%d}`, n)
}

// sendAsync sends in a goroutine; the channel gets the response.
func sendAsync(h http.Handler, body string) <-chan *httptest.ResponseRecorder {
	c := make(chan *httptest.ResponseRecorder, 1)
	go func() { c <- send(h, body) }()
	return c
}

func send(h http.Handler, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func wantOutcomes(t *testing.T, e *env, want ...idemhook.Outcome) {
	t.Helper()
	got := e.outcomes()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes = %v, want %v", got, want)
	}
}

type guardVector struct {
	Name       string `json:"name"`
	Body       string `json:"body"`
	Normalized string `json:"normalized"`
	Key        string `json:"key"`
}

func loadGuardVectors(t *testing.T) []guardVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/guard-key-vectors.json") // made by testdata/guard-key-vectors.js
	if err != nil {
		t.Fatalf("guard key vectors: %v", err)
	}
	var f struct {
		Vectors []guardVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors in guard-key-vectors.json")
	}
	return f.Vectors
}

// A Stone route as the NestJS guard ran it keys on the body's hash. The first
// delivery runs, the duplicate replays, and the record sits exactly under
// the key the guard used.
func TestBodyHashRouteUsesTheGuardsKeys(t *testing.T) {
	for _, v := range loadGuardVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			h := &counter{}
			stone := e.route(idemhook.Route{Source: "stone", TTL: 86400 * time.Second}, h)

			first := send(stone, v.Body)
			if first.Code != 200 || first.Header().Get(idemhook.ReplayedHeader) != "" {
				t.Fatalf("first delivery: %d %v", first.Code, first.Header())
			}
			rec, err := e.store.Get(t.Context(), v.Key)
			if err != nil || rec == nil || rec.State != idemhook.StateCompleted {
				t.Fatalf("no completed record under the guard's key %s: %v %v", v.Key, rec, err)
			}
			dup := send(stone, v.Body)
			if dup.Code != 200 || dup.Body.String() != first.Body.String() || dup.Header().Get(idemhook.ReplayedHeader) != "true" {
				t.Fatalf("duplicate: %d %q %v", dup.Code, dup.Body, dup.Header())
			}
			if n := h.n.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
			// The normalized text, sent as is, is the same event.
			if v.Normalized != v.Body {
				send(stone, v.Normalized)
				if n := h.n.Load(); n != 1 {
					t.Fatalf("normalized body ran the handler again (%d)", n)
				}
			}
			if di := e.deliveries[0]; di.StoreKey != v.Key || di.Key != strings.TrimPrefix(v.Key, "idem:stone:") {
				t.Fatalf("DeliveryInfo keys = %q %q", di.StoreKey, di.Key)
			}
		})
	}
}

// A Stripe route as the NestJS guard ran it keys on the stripe-signature
// header, verbatim. A WhatsApp route keys on the body hash under its own
// source.
func TestGuardHeaderAndWhatsAppRoutes(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	stripe := e.route(idemhook.Route{Source: "stripe", Header: "stripe-signature"}, h)
	whatsapp := e.route(idemhook.Route{Source: "whatsapp"}, h)

	sig := "t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"
	body := `{"id":"evt_1","object":"event"}`
	send(stripe, body, "Stripe-Signature", sig)
	send(stripe, body, "Stripe-Signature", sig)
	if rec, _ := e.store.Get(t.Context(), "idem:stripe:"+sig); rec == nil {
		t.Fatal("no record under idem:stripe:<signature>")
	}
	vectors := loadGuardVectors(t)
	evo := vectors[len(vectors)-1]
	send(whatsapp, evo.Body)
	send(whatsapp, evo.Body)
	key := "idem:whatsapp:" + strings.TrimPrefix(evo.Key, "idem:stone:")
	if rec, _ := e.store.Get(t.Context(), key); rec == nil {
		t.Fatalf("no record under %s", key)
	}
	if n := h.n.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (once per event)", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed)
}

func TestGuardDefaultHeaderIdempotencyKey(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "marketplace"}, h)
	send(route, `{"a":1}`, "Idempotency-Key", `"order-42"`) // RFC 8941 string: unquoted
	send(route, `{"a":1}`, "idempotency-key", "order-42")
	if rec, _ := e.store.Get(t.Context(), "idem:marketplace:order-42"); rec == nil {
		t.Fatal("no record under idem:marketplace:order-42")
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestGuardRouteWithoutSourcePassesThrough(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{}, h)
	for range 2 {
		if rec := send(route, `{"id":1}`); rec.Code != 200 {
			t.Fatalf("status %d", rec.Code)
		}
	}
	if n := h.n.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (no protection without a source)", n)
	}
	if got := strings.Count(e.logs.String(), `level=WARN msg="WebhookIdempotencyGuard key resolution failed: `); got != 2 {
		t.Fatalf("want 2 key resolution WARNs, logs:\n%s", e.logs)
	}
	wantOutcomes(t, e, idemhook.OutcomeKeyError, idemhook.OutcomeKeyError)
}

func TestReplayFidelity(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{status: http.StatusCreated, body: `{"received":true}`}
	route := e.route(idemhook.Route{Source: "stone", ReplayHeaders: []string{"Content-Type", "X-Trace"}}, h)
	first := send(route, `{"id":"a"}`)
	dup := send(route, `{"id":"a"}`)
	if dup.Code != http.StatusCreated || dup.Body.String() != `{"received":true}` {
		t.Fatalf("replay: %d %q", dup.Code, dup.Body)
	}
	if first.Header().Get("Set-Cookie") == "" {
		t.Fatal("the first caller must get the handler's headers untouched")
	}
	for name, want := range map[string]string{
		"Content-Type":        "application/json",
		"Idempotent-Replayed": "true",
		"Content-Length":      "17",
		"Set-Cookie":          "",
		"X-Not-Replayed":      "",
		"X-Trace":             "",
	} {
		if got := dup.Header().Get(name); got != want {
			t.Errorf("replayed %s = %q, want %q", name, got, want)
		}
	}
}

func TestRouteRejectsHeadersThatAreNeverReplayed(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	for _, name := range []string{"Set-Cookie", "authorization", "Transfer-Encoding"} {
		if _, err := e.mw.Route(idemhook.Route{Source: "s", ReplayHeaders: []string{name}}); err == nil {
			t.Errorf("ReplayHeaders %s accepted", name)
		}
	}
}

// Two routes of one Middleware with one Source would share their keys: the
// second tenant of a loop over tenants would get the first one's stored
// answers. Route refuses the second, unless every route of the Source
// says it shares keys on purpose.
func TestRouteRefusesASharedSource(t *testing.T) {
	tests := []struct {
		name    string
		routes  []idemhook.Route
		wantErr []bool // for each route
	}{
		{"one Source per route", []idemhook.Route{{Source: "stripe-acme"}, {Source: "stripe-globex"}}, []bool{false, false}},
		{"a second route with the Source", []idemhook.Route{{Source: "stripe"}, {Source: "stripe"}, {Source: "stripe"}}, []bool{false, true, true}},
		{"ShareKeys on every route", []idemhook.Route{{Source: "stripe", ShareKeys: true}, {Source: "stripe", ShareKeys: true}}, []bool{false, false}},
		{"ShareKeys on the second only", []idemhook.Route{{Source: "stripe"}, {Source: "stripe", ShareKeys: true}}, []bool{false, true}},
		{"ShareKeys on the first only", []idemhook.Route{{Source: "stripe", ShareKeys: true}, {Source: "stripe"}}, []bool{false, true}},
		{"a refused route claims no Source", []idemhook.Route{{Source: "stripe", TTL: -time.Second}, {Source: "stripe"}}, []bool{true, false}},
		{"routes without a Source share nothing", []idemhook.Route{{}, {}}, []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			for i, rt := range tt.routes {
				_, err := e.mw.Route(rt)
				if (err != nil) != tt.wantErr[i] {
					t.Fatalf("route %d (%+v): error = %v, want error %v", i, rt, err, tt.wantErr[i])
				}
				var re *idemhook.RouteError
				if err != nil && rt.TTL >= 0 && (!errors.As(err, &re) || re.Field != "Source" || re.Source != rt.Source ||
					!strings.Contains(err.Error(), "is already the Source of another route") || !strings.Contains(err.Error(), "ShareKeys")) {
					t.Errorf("route %d: error = %#v, want a *RouteError for field Source that names ShareKeys", i, err)
				}
			}
		})
	}
}

// The report's case end to end: one route per tenant built in a loop, each
// mounted on its own path. Refused, the loop can't serve globex acme's
// answer; with a Source per tenant, each tenant's event runs once.
func TestRoutesPerTenantKeepTheirAnswers(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	mux := http.NewServeMux()
	counts := map[string]*counter{}
	for _, tenant := range []string{"acme", "globex"} {
		if _, err := e.mw.Route(idemhook.Route{Source: "stripe"}); err == nil && tenant == "globex" {
			t.Fatal("a second route with Source stripe was accepted")
		}
		wrap, err := e.mw.Route(idemhook.Route{Source: "stripe-" + tenant})
		if err != nil {
			t.Fatal(err)
		}
		counts[tenant] = &counter{body: tenant}
		mux.Handle("POST /webhooks/stripe-"+tenant, wrap(counts[tenant]))
	}
	for range 2 {
		for _, tenant := range []string{"acme", "globex"} {
			req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe-"+tenant, strings.NewReader(`{"id":"evt_1"}`))
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tenant) {
				t.Errorf("POST for %s: %d %q, want 200 and %s's own answer", tenant, rec.Code, rec.Body, tenant)
			}
		}
	}
	for tenant, c := range counts {
		if n := c.n.Load(); n != 1 {
			t.Errorf("%s's handler ran %d times, want 1", tenant, n)
		}
	}
}

// The rules a configuration checker shares with Route: a Source the store
// key can hold, and the statuses StoreStatuses may list.
func TestValidSourceAndStorableStatus(t *testing.T) {
	for _, tt := range []struct {
		give string
		want bool
	}{{"stone", true}, {"", true}, {"stripe-acme", true}, {"a:b", false}, {"a@b", false}, {"a\x00b", false}} {
		if got := idemhook.ValidSource(tt.give); got != tt.want {
			t.Errorf("ValidSource(%q) = %v, want %v", tt.give, got, tt.want)
		}
		_, err := newMemEnv(t, idemhook.Options{}).mw.Route(idemhook.Route{Source: tt.give})
		if (err == nil) != tt.want {
			t.Errorf("Route(Source %q): error %v, want ValidSource's verdict %v", tt.give, err, tt.want)
		}
	}
	for _, tt := range []struct {
		give int
		want bool
	}{{200, false}, {299, false}, {300, true}, {410, true}, {499, true}, {500, false}, {100, false}} {
		if got := idemhook.StorableStatus(tt.give); got != tt.want {
			t.Errorf("StorableStatus(%d) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// Validate refuses what Route refuses about a route on its own, with the
// same error, and needs no Middleware.
func TestRouteValidate(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	for _, rt := range []idemhook.Route{
		{Source: "s", InFlight: "queue"}, {Source: "a:b"}, {Source: "s", StoreStatuses: []int{410, 200}},
		{Source: "s", ReplayHeaders: []string{"X-Id", "set-cookie"}}, {Source: "s", Lease: time.Microsecond},
	} {
		verr := rt.Validate()
		_, rerr := e.mw.Route(rt)
		if verr == nil || rerr == nil || verr.Error() != rerr.Error() {
			t.Errorf("Route(%+v): Validate() = %v, Route error = %v, want the same error", rt, verr, rerr)
		}
	}
	rt := idemhook.Route{Source: "ok", TTL: time.Hour}
	for range 2 { // Validate knows no other route: the same Source twice is fine
		if err := rt.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", rt, err)
		}
	}
	if rt.Header != "" || rt.InFlight != "" {
		t.Errorf("Validate changed its route: %+v", rt)
	}
}

func TestRouteValidation(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	tests := []struct {
		give  idemhook.Route
		want  string
		field string // RouteError.Field
		index int    // RouteError.Index
	}{
		{idemhook.Route{Source: "s", InFlight: "queue"}, `InFlight "queue" is not one of proceed, wait, reject`, "InFlight", 0},
		{idemhook.Route{Source: "s", OnStoreError: "maybe"}, `OnStoreError "maybe" is not one of open, closed`, "OnStoreError", 0},
		{idemhook.Route{Source: "s", TTL: -time.Second}, "TTL -1s is negative", "TTL", 0},
		{idemhook.Route{Source: "a:b"}, "must not contain ':'", "Source", 0},
		{idemhook.Route{Source: "a@b"}, "must not contain ':' or '@'", "Source", 0},
		{idemhook.Route{Source: "s", StoreStatuses: []int{500}}, "StoreStatuses: 500 is not a status from 300 to 499", "StoreStatuses", 0},
		{idemhook.Route{Source: "s", StoreStatuses: []int{410, 200}}, "StoreStatuses: 200 is not a status from 300 to 499", "StoreStatuses", 1},
		{idemhook.Route{Source: "s", ReplayHeaders: []string{"X-Id", "set-cookie"}}, "ReplayHeaders: Set-Cookie is never stored or replayed", "ReplayHeaders", 1},
		{idemhook.Route{Source: "s", Preset: &idemhook.Preset{Name: "p", RetryWindow: -time.Hour}}, "RetryWindow -1h0m0s is negative", "Preset", 0},
		{idemhook.Route{Source: "s", MaxBodyBytes: -1}, "must not be negative", "MaxBodyBytes", 0},
		{idemhook.Route{Source: "s", MaxStoredBodyBytes: -1}, "must not be negative", "MaxStoredBodyBytes", 0},
		{idemhook.Route{Source: "s", Lease: time.Microsecond}, "Lease 1µs is under the minimum of 1ms", "Lease", 0},
		{idemhook.Route{Source: "s", Preset: &idemhook.Preset{Name: "p", DuplicateStatus: 500}}, "DuplicateStatus 500 is not a 2xx status", "Preset", 0},
		{idemhook.Route{Source: "s", Preset: &idemhook.Preset{Name: "p", SuccessStatus: 204}}, "SuccessStatus 204 is not a 2xx status with a body", "Preset", 0},
		{idemhook.Route{Source: "s", Preset: &idemhook.Preset{Name: "p", SuccessStatus: 302}}, "SuccessStatus 302 is not a 2xx status with a body", "Preset", 0},
		{idemhook.Route{Source: "s", Preset: &idemhook.Preset{Name: "p", SuccessBody: "[accepted]"}}, "SuccessBody is set without a SuccessStatus", "Preset", 0},
		{idemhook.Route{Source: "s", Preset: &idemhook.Preset{Name: "p", SuccessStatus: 200, SuccessBody: "\xff"}}, "SuccessBody is not valid UTF-8", "Preset", 0},
	}
	for _, tt := range tests {
		_, err := e.mw.Route(tt.give)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Route(%+v) error = %v, want it to contain %q", tt.give, err, tt.want)
			continue
		}
		var re *idemhook.RouteError
		if !errors.As(err, &re) || re.Field != tt.field || re.Index != tt.index || re.Source != tt.give.Source {
			t.Errorf("Route(%+v) error = %#v, want a *RouteError for field %s[%d] of source %q", tt.give, err, tt.field, tt.index, tt.give.Source)
		}
	}
	if _, err := e.mw.Route(idemhook.Route{TTL: -time.Second}); err == nil || err.Error() != "idemhook: Route: TTL -1s is negative" {
		t.Errorf("Route without a source: error = %v", err)
	}
	if _, err := idemhook.New(nil, idemhook.Options{}); err == nil {
		t.Error("New(nil store) accepted")
	}
}

// blocker is a handler that holds every execution until released.
type blocker struct {
	n       atomic.Int64
	started chan struct{}
	release chan struct{}
	status  atomic.Int64
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := b.n.Add(1)
	b.started <- struct{}{}
	<-b.release
	if s := b.status.Load(); s != 0 && n == 1 {
		w.WriteHeader(int(s))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "execution %d", n)
}

func TestInFlightProceedRunsTheHandlerAgain(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	b := newBlocker()
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightProceed}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	second := sendAsync(route, `{"id":1}`)
	<-b.started // the duplicate runs while the first is still running
	close(b.release)
	<-first
	<-second
	if n := b.n.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	if c := e.countOutcomes(); c[idemhook.OutcomeProcessed] != 1 || c[idemhook.OutcomeInFlightProceeded] != 1 {
		t.Fatalf("outcomes %v", c)
	}
}

// concurrentDuplicates sends n copies of one event at once through a real
// HTTP server; the handler is held until every copy has made its claim.
func concurrentDuplicates(t *testing.T, policy idemhook.InFlightPolicy, n int) (*env, *blocker, []*http.Response, []string) {
	t.Helper()
	b := newBlocker()
	var claims atomic.Int64
	allClaimed := make(chan struct{})
	clk := newClock()
	st, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st, clk, idemhook.Options{OnStoreCall: func(ci idemhook.StoreCallInfo) {
		if ci.Op == "claim" && claims.Add(1) == int64(n) {
			close(allClaimed)
		}
	}})
	srv := httptest.NewServer(e.route(idemhook.Route{Source: "stone", InFlight: policy, WaitTimeout: time.Minute}, b))
	t.Cleanup(srv.Close)
	go func() {
		<-allClaimed
		close(b.release)
	}()
	resps := make([]*http.Response, n)
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(`{"id":"evt_concurrent"}`))
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			resps[i], bodies[i] = resp, string(body)
		})
	}
	wg.Wait()
	return e, b, resps, bodies
}

func TestInFlightWaitExecutesOnceAndAllGetTheSameResponse(t *testing.T) {
	e, b, resps, bodies := concurrentDuplicates(t, idemhook.InFlightWait, 100)
	if n := b.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	for i, resp := range resps {
		if resp == nil || resp.StatusCode != 200 || bodies[i] != "execution 1" {
			t.Fatalf("response %d: %v %q", i, resp, bodies[i])
		}
	}
	c := e.countOutcomes()
	if c[idemhook.OutcomeProcessed] != 1 || c[idemhook.OutcomeInFlightWaited]+c[idemhook.OutcomeReplayed] != 99 {
		t.Fatalf("outcomes %v", c)
	}
}

func TestInFlightRejectExecutesOnce(t *testing.T) {
	e, b, resps, bodies := concurrentDuplicates(t, idemhook.InFlightReject, 100)
	if n := b.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	var ok, rejected int
	for i, resp := range resps {
		switch {
		case resp.StatusCode == 200 && bodies[i] == "execution 1":
			ok++
		case resp.StatusCode == http.StatusConflict:
			rejected++
			if resp.Header.Get("Retry-After") != "5" || resp.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(bodies[i], `"status":409`) {
				t.Fatalf("409 answer: %v %s", resp.Header, bodies[i])
			}
		default:
			t.Fatalf("response %d: %d %q", i, resp.StatusCode, bodies[i])
		}
	}
	if ok < 1 || ok+rejected != 100 {
		t.Fatalf("ok %d, rejected %d", ok, rejected)
	}
	if c := e.countOutcomes(); c[idemhook.OutcomeInFlightRejected] != rejected {
		t.Fatalf("outcomes %v, rejected %d", c, rejected)
	}
}

// A waiter takes over when the first delivery fails.
func TestInFlightWaitTakesOverAfterAFailure(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	b := newBlocker()
	b.status.Store(http.StatusInternalServerError)
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: time.Minute}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	second := sendAsync(route, `{"id":1}`)
	close(b.release) // the first fails with 500 and releases; the waiter claims and runs
	if r := <-first; r.Code != 500 {
		t.Fatalf("first: %d", r.Code)
	}
	r := <-second
	if r.Code != 200 || r.Body.String() != "execution 2" {
		t.Fatalf("waiter: %d %q", r.Code, r.Body)
	}
	// The waiter may have arrived after the release and simply claimed;
	// either way the handler ran exactly twice and the success is stored.
	if n := b.n.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	if r := send(route, `{"id":1}`); r.Body.String() != "execution 2" || r.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("after: %q %v", r.Body, r.Header())
	}
}

// A waiter takes over a claim whose lease lapsed (its owner crashed).
func TestInFlightWaitTakesOverALapsedLease(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{Lease: 30 * time.Second})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: time.Minute}, h)
	body := `{"id":"crashed"}`
	key := idemhook.StoreKey("stone", idemhook.BodyKey([]byte(body)))
	stale := &idemhook.Record{State: idemhook.StatePending, Token: "crashed-process", CreatedAt: e.clock.Now()}
	if existing, err := e.store.Claim(t.Context(), key, stale, 30*time.Second); err != nil || existing != nil {
		t.Fatal(existing, err)
	}
	go func() {
		// Let the waiter poll at least once against the live claim, then
		// move the clock past the lease.
		for {
			e.mu.Lock()
			polled := len(e.storeCalls) >= 2
			e.mu.Unlock()
			if polled {
				break
			}
			time.Sleep(time.Millisecond)
		}
		e.clock.Advance(31 * time.Second)
	}()
	r := send(route, body)
	if r.Code != 200 || h.n.Load() != 1 {
		t.Fatalf("waiter: %d, handler ran %d times", r.Code, h.n.Load())
	}
	wantOutcomes(t, e, idemhook.OutcomeProcessed)
}

// A waiter whose WaitTimeout passes while the first delivery still holds the
// claim never runs the handler unclaimed: it answers 409 with the lease as
// Retry-After, so the provider comes back once a dead owner's lease lapsed.
func TestInFlightWaitTimesOutWith409(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{Lease: 20 * time.Second})
	b := newBlocker()
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: 20 * time.Millisecond}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	second := send(route, `{"id":1}`)
	if second.Code != http.StatusConflict || second.Header().Get("Retry-After") != "20" ||
		second.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("waiter after its timeout: %d %v %q", second.Code, second.Header(), second.Body)
	}
	close(b.release)
	<-first
	if n := b.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if c := e.countOutcomes(); c[idemhook.OutcomeProcessed] != 1 || c[idemhook.OutcomeInFlightRejected] != 1 {
		t.Fatalf("outcomes %v", c)
	}
	wantStatus(t, e, idemhook.OutcomeInFlightRejected, http.StatusConflict)
}

// wantStatus checks the Status the hook reported for outcome.
func wantStatus(t *testing.T, e *env, outcome idemhook.Outcome, want int) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range e.deliveries {
		if d.Outcome == outcome && d.Status != want {
			t.Errorf("%s reported status %d, the caller got %d", outcome, d.Status, want)
		}
	}
}

func TestFailuresReleaseTheClaim(t *testing.T) {
	for _, status := range []int{500, 502, 503, 408, 429, 400, 401, 404, 409, 422, 301, 304} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			h := &counter{status: status}
			route := e.route(idemhook.Route{Source: "stone"}, h)
			if r := send(route, `{"id":1}`); r.Code != status {
				t.Fatalf("first: %d", r.Code)
			}
			h.status = 200
			if r := send(route, `{"id":1}`); r.Code != 200 || r.Header().Get(idemhook.ReplayedHeader) != "" {
				t.Fatalf("retry: %d %v", r.Code, r.Header())
			}
			if r := send(route, `{"id":1}`); r.Header().Get(idemhook.ReplayedHeader) != "true" {
				t.Fatal("success after the retry was not stored")
			}
			if n := h.n.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2", n)
			}
			wantOutcomes(t, e, idemhook.OutcomeFailedReleased, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed)
		})
	}
}

func TestFinalAnswersAreStored(t *testing.T) {
	for _, status := range []int{200, 201, 202, 204, 206, 299, 404, 410} {
		e := newMemEnv(t, idemhook.Options{})
		h := &counter{status: status}
		// 2xx always; a 4xx only when the route lists it.
		route := e.route(idemhook.Route{Source: "stone", StoreStatuses: []int{404, 410}}, h)
		send(route, `{"id":1}`)
		if r := send(route, `{"id":1}`); r.Code != status || r.Header().Get(idemhook.ReplayedHeader) != "true" {
			t.Fatalf("status %d: replay %d %v", status, r.Code, r.Header())
		}
		if n := h.n.Load(); n != 1 {
			t.Fatalf("status %d: handler ran %d times", status, n)
		}
	}
}

func TestPanicReleasesAndRepanics(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var calls atomic.Int64
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(200)
	}))
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		send(route, `{"id":1}`)
	}()
	if r := send(route, `{"id":1}`); r.Code != 200 || calls.Load() != 2 {
		t.Fatalf("retry after panic: %d, calls %d", r.Code, calls.Load())
	}
	wantOutcomes(t, e, idemhook.OutcomeFailedReleased, idemhook.OutcomeProcessed)
}

// A delivery whose sender is gone before the handler answered is released.
func TestDeliveryCutShortIsReleased(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			cancel() // the provider hung up
			<-r.Context().Done()
			return // nothing written
		}
		io.WriteString(w, "ok") //nolint:errcheck
	}))
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader(`{"id":1}`))
	route.ServeHTTP(httptest.NewRecorder(), req)
	if r := send(route, `{"id":1}`); r.Code != 200 || r.Body.String() != "ok" {
		t.Fatalf("retry: %d %q", r.Code, r.Body)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	e.mu.Lock()
	first := e.deliveries[0]
	e.mu.Unlock()
	if first.Outcome != idemhook.OutcomeFailedReleased || first.Err == nil || !strings.Contains(first.Err.Error(), "cut short") {
		t.Fatalf("first delivery: %v %v", first.Outcome, first.Err)
	}
}

func TestHeaderKeyWithADifferentBodyIs422(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "billing"}, h)
	send(route, `{"amount":100}`, "Idempotency-Key", "k1")
	r := send(route, `{"amount":999}`, "Idempotency-Key", "k1")
	if r.Code != http.StatusUnprocessableEntity || r.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("mismatch: %d %v %s", r.Code, r.Header(), r.Body)
	}
	var problem map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &problem); err != nil || problem["status"] != float64(422) || problem["title"] == "" {
		t.Fatalf("problem body %s: %v", r.Body, err)
	}
	// The same JSON, pretty-printed, is the same body.
	if r := send(route, "{\n  \"amount\": 100\n}", "Idempotency-Key", "k1"); r.Code != 200 || r.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("pretty-printed same body: %d", r.Code)
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeProcessed, idemhook.OutcomeMismatch, idemhook.OutcomeReplayed)
}

func TestBodyLimit(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone", MaxBodyBytes: 16}, h)
	tests := []struct {
		name    string
		body    io.Reader
		wantLen int64
	}{
		{"declared length", strings.NewReader(strings.Repeat("x", 17)), 17},
		{"chunked", io.MultiReader(strings.NewReader(strings.Repeat("y", 40))), -1},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(http.MethodPost, "/", tt.body)
		req.ContentLength = tt.wantLen
		rec := httptest.NewRecorder()
		route.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "exceeds the limit of 16 bytes") {
			t.Fatalf("%s: %d %s", tt.name, rec.Code, rec.Body)
		}
	}
	if h.n.Load() != 0 || e.store.(*memstore.Store).Len() != 0 {
		t.Fatalf("handler ran %d times, store holds %d keys: want nothing", h.n.Load(), e.store.(*memstore.Store).Len())
	}
	if r := send(route, strings.Repeat("z", 16)); r.Code != 200 {
		t.Fatalf("body at the limit: %d", r.Code)
	}
	wantOutcomes(t, e, idemhook.OutcomeTooLarge, idemhook.OutcomeTooLarge, idemhook.OutcomeProcessed)
}

// untouchedBody is a request body that records whether it was read.
type untouchedBody struct {
	io.Reader
	read atomic.Bool
}

func (b *untouchedBody) Read(p []byte) (int, error) { b.read.Store(true); return b.Reader.Read(p) }

func TestBodyBudget(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{MaxHeldBodyBytes: 1000})
	// A delivery with X-Hold stays in the handler until the release
	// channel of its time is closed.
	entered := make(chan struct{})
	var releaseMu sync.Mutex
	release := make(chan struct{})
	releaseOf := func() chan struct{} { releaseMu.Lock(); defer releaseMu.Unlock(); return release }
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		io.Copy(io.Discard, r.Body) //nolint:errcheck
		if r.Header.Get("X-Hold") != "" {
			wait := releaseOf()
			entered <- struct{}{}
			<-wait
		}
		w.Write([]byte("ok")) //nolint:errcheck
	})
	route := e.route(idemhook.Route{Source: "stone", MaxBodyBytes: 600}, h)
	event := func(id string, size int) string {
		return `{"id":"` + id + `","pad":"` + strings.Repeat("x", size-len(`{"id":"`+id+`","pad":""}`)) + `"}`
	}
	post := func(body io.Reader, length int64, header ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/webhook", body)
		req.ContentLength = length
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		route.ServeHTTP(rec, req)
		return rec
	}

	// evt_1 (500 bytes, 501 held) stays in its handler.
	held := make(chan *httptest.ResponseRecorder)
	go func() { held <- post(strings.NewReader(event("evt_1", 500)), 500, "X-Hold", "1") }()
	<-entered

	// evt_2 declares 500 bytes: 1002 would be held. Refused before a byte
	// of it is read, with nothing claimed.
	b2 := &untouchedBody{Reader: strings.NewReader(event("evt_2", 500))}
	r := post(b2, 500)
	if r.Code != http.StatusServiceUnavailable || r.Header().Get("Retry-After") != "5" ||
		r.Header().Get("Content-Type") != "application/problem+json" || !strings.Contains(r.Body.String(), "1000 bytes") {
		t.Fatalf("over the budget: %d %v %s", r.Code, r.Header(), r.Body)
	}
	if b2.read.Load() {
		t.Fatal("the refused body was read")
	}
	// A body of unknown length is refused once its buffer would pass the
	// budget: read up to there, not claimed.
	if r := post(strings.NewReader(event("evt_3", 590)), -1); r.Code != http.StatusServiceUnavailable {
		t.Fatalf("chunked over the budget: %d %s", r.Code, r.Body)
	}
	// What fits beside it runs.
	if r := post(strings.NewReader(event("evt_4", 300)), 300); r.Code != http.StatusOK {
		t.Fatalf("a body that fits: %d %s", r.Code, r.Body)
	}
	if n := e.store.(*memstore.Store).Len(); n != 2 {
		t.Fatalf("store holds %d keys: want evt_1's claim and evt_4", n)
	}

	close(releaseOf())
	if r := <-held; r.Code != http.StatusOK {
		t.Fatalf("held delivery: %d", r.Code)
	}
	// Every body was let go: the provider's retries of the refused events
	// run, each once, and the budget holds two bodies of 499 at once again.
	for _, tt := range []struct {
		id     string
		size   int
		length int64
	}{{"evt_2", 500, 500}, {"evt_3", 590, -1}} {
		if r := post(strings.NewReader(event(tt.id, tt.size)), tt.length); r.Code != http.StatusOK || r.Header().Get(idemhook.ReplayedHeader) != "" {
			t.Fatalf("retry of %s: %d %s", tt.id, r.Code, r.Body)
		}
	}
	releaseMu.Lock()
	release = make(chan struct{}) // evt_5 stays in its handler while evt_6 is sent
	releaseMu.Unlock()
	go func() { held <- post(strings.NewReader(event("evt_5", 498)), 498, "X-Hold", "1") }()
	<-entered
	if r := post(strings.NewReader(event("evt_6", 498)), 498); r.Code != http.StatusOK {
		t.Fatalf("second body of 499 beside the first: %d %s", r.Code, r.Body)
	}
	close(releaseOf())
	<-held
	if n := runs.Load(); n != 6 {
		t.Fatalf("handler ran %d times, want 6 (evt_1 to evt_6 once each)", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeOverloaded, idemhook.OutcomeOverloaded, idemhook.OutcomeProcessed,
		idemhook.OutcomeProcessed, idemhook.OutcomeProcessed, idemhook.OutcomeProcessed, idemhook.OutcomeProcessed, idemhook.OutcomeProcessed)

	// A route whose bodies could never be held is refused.
	_, err := e.mw.Route(idemhook.Route{Source: "big", MaxBodyBytes: 1000})
	var re *idemhook.RouteError
	if !errors.As(err, &re) || re.Field != "MaxBodyBytes" {
		t.Fatalf("route with MaxBodyBytes at the budget: %v", err)
	}
	if _, err := idemhook.New(e.store, idemhook.Options{MaxHeldBodyBytes: -1}); err == nil {
		t.Fatal("negative MaxHeldBodyBytes accepted")
	}
}

// TestBodyBudgetCountsTheHash: hashing a body over 64 KiB makes a canonical
// copy of it for a moment, which the budget counts too.
func TestBodyBudgetCountsTheHash(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{MaxHeldBodyBytes: 200_000})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone", MaxBodyBytes: 150_000}, h)
	big := `{"id":"evt_1","pad":"` + strings.Repeat("x", 100_000) + `"}`
	if r := send(route, big); r.Code != http.StatusServiceUnavailable {
		t.Fatalf("body and its canonical copy over the budget: %d %s", r.Code, r.Body)
	}
	if r := send(route, big, "Idempotency-Key", "k1"); r.Code != http.StatusServiceUnavailable {
		t.Fatalf("header key (the body's fingerprint is its hash): %d %s", r.Code, r.Body)
	}
	small := `{"id":"evt_2","pad":"` + strings.Repeat("x", 90_000) + `"}`
	for range 2 { // the second is a replay: the first let go of everything it took
		if r := send(route, small); r.Code != http.StatusOK {
			t.Fatalf("body and its copy within the budget: %d %s", r.Code, r.Body)
		}
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeOverloaded, idemhook.OutcomeOverloaded, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed)
}

// TestBodyBudgetUnderLoad sends many distinct events at once through a
// small budget: each is answered 200 or 503, the 503s are sent again until
// they pass (as a provider does), and each event runs exactly once.
func TestBodyBudgetUnderLoad(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{MaxHeldBodyBytes: 64 << 10})
	var mu sync.Mutex
	runs := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ ID string }
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Error(err)
		}
		mu.Lock()
		runs[ev.ID]++
		mu.Unlock()
		time.Sleep(time.Millisecond) // hold the body a moment
		w.Write([]byte("ok"))        //nolint:errcheck
	})
	route := e.route(idemhook.Route{Source: "stone", MaxBodyBytes: 32 << 10}, h)
	const events, senders = 400, 32
	var refused atomic.Int64
	var wg sync.WaitGroup
	ids := make(chan int)
	for range senders {
		wg.Go(func() {
			for i := range ids {
				body := fmt.Sprintf(`{"id":"evt_%d","pad":"%s"}`, i, strings.Repeat("x", 8<<10+i))
				for give := time.Now().Add(30 * time.Second); ; {
					if time.Now().After(give) {
						t.Errorf("evt_%d still refused after 30s of tries", i)
						return
					}
					r := send(route, body)
					if r.Code == http.StatusOK {
						break
					}
					if r.Code != http.StatusServiceUnavailable {
						t.Errorf("evt_%d: %d %s", i, r.Code, r.Body)
						return
					}
					refused.Add(1)
					time.Sleep(100 * time.Microsecond) // as a provider waits before it sends again
				}
			}
		})
	}
	for i := range events {
		ids <- i
	}
	close(ids)
	wg.Wait()
	if len(runs) != events {
		t.Fatalf("%d events ran, want %d", len(runs), events)
	}
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	t.Logf("%d events, %d answers 503 sent again", events, refused.Load())
}

func TestHandlerGetsTheBodyUnchanged(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	body := "{\n  \"pretty\": true,\n  \"n\": 1.50\n}"
	var got []byte
	var gotLen int64
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		gotLen = r.ContentLength
		again, _ := r.GetBody()
		if b, _ := io.ReadAll(again); string(b) != body {
			t.Errorf("GetBody gave %q", b)
		}
	}))
	send(route, body)
	if string(got) != body || gotLen != int64(len(body)) {
		t.Fatalf("handler got %q (len %d), want %q", got, gotLen, body)
	}
}

// An answer over MaxStoredBodyBytes is sent in full, stored without its
// body, and said so where it happens: a WARN once per route, the header on
// its replays, DeliveryInfo.BodyOmitted on both.
func TestLargeResponseIsSentInFullButNotStored(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	big := strings.Repeat("b", 100)
	route := e.route(idemhook.Route{Source: "stone", MaxStoredBodyBytes: 64}, &counter{status: 202, body: big})
	first := send(route, `{"id":1}`)
	if first.Code != 202 || first.Body.String() != big || first.Header().Get(idemhook.BodyOmittedHeader) != "" {
		t.Fatalf("first: %d, %d bytes, %v", first.Code, first.Body.Len(), first.Header())
	}
	dup := send(route, `{"id":1}`)
	if dup.Code != 202 || dup.Body.Len() != 0 || dup.Header().Get("Content-Type") != "application/json" ||
		dup.Header().Get(idemhook.ReplayedHeader) != "true" || dup.Header().Get(idemhook.BodyOmittedHeader) != "true" {
		t.Fatalf("replay of an oversized response: %d %q %v", dup.Code, dup.Body, dup.Header())
	}
	rec, _ := e.store.Get(t.Context(), idemhook.StoreKey("stone", idemhook.BodyKey([]byte(`{"id":1}`))))
	if rec == nil || !rec.BodyOmitted || len(rec.Body) != 0 {
		t.Fatalf("record %+v", rec)
	}
	send(route, `{"id":2}`) // another oversized answer on the route: no second WARN
	small := e.route(idemhook.Route{Source: "small", MaxStoredBodyBytes: 200}, &counter{body: big})
	send(small, `{"id":1}`)
	send(small, `{"id":1}`)

	e.mu.Lock()
	var omitted []string
	for _, d := range e.deliveries {
		omitted = append(omitted, fmt.Sprintf("%s %s %v", d.Source, d.Outcome, d.BodyOmitted))
	}
	e.mu.Unlock()
	want := []string{"stone processed true", "stone replayed true", "stone processed true", "small processed false", "small replayed false"}
	if !slices.Equal(omitted, want) {
		t.Errorf("deliveries (source, outcome, BodyOmitted) = %q, want %q", omitted, want)
	}
	logs := e.logs.String()
	if n := strings.Count(logs, "response body over MaxStoredBodyBytes was sent but not stored"); n != 1 {
		t.Errorf("%d WARNs for an oversized body, want 1 (once per route):\n%s", n, logs)
	}
	if !strings.Contains(logs, "source=stone max_stored_body_bytes=64 body_bytes=100") {
		t.Errorf("the WARN names no source, limit or size:\n%s", logs)
	}
	if _, err := e.mw.Route(idemhook.Route{Source: "h", ReplayHeaders: []string{idemhook.BodyOmittedHeader}}); err == nil {
		t.Errorf("ReplayHeaders %s accepted: the middleware sets it", idemhook.BodyOmittedHeader)
	}
}

func TestTTLExpiryWithInjectedClock(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone", TTL: time.Hour}, h)
	send(route, `{"id":1}`)
	e.clock.Advance(59 * time.Minute)
	send(route, `{"id":1}`)
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times within the TTL", n)
	}
	e.clock.Advance(2 * time.Minute)
	if r := send(route, `{"id":1}`); r.Header().Get(idemhook.ReplayedHeader) != "" {
		t.Fatal("replayed after the TTL")
	}
	if n := h.n.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 after expiry", n)
	}
}

func TestSafeMethodsPassThrough(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone"}, h)
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		route.ServeHTTP(httptest.NewRecorder(), req)
	}
	if h.n.Load() != 2 || len(e.outcomes()) != 0 {
		t.Fatalf("GET: handler ran %d times, outcomes %v", h.n.Load(), e.outcomes())
	}
}

func TestPresetVerifyKeyAndDuplicateStatus(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	preset := &idemhook.Preset{
		Name: "acme",
		Verify: func(r *http.Request, body []byte) error {
			if r.Header.Get("X-Acme-Token") != "s3cret" {
				return errors.New("bad token")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			var ev struct{ ID string }
			if err := json.Unmarshal(body, &ev); err != nil {
				return "", err
			}
			return ev.ID, nil
		},
		DuplicateStatus: http.StatusAccepted,
	}
	route := e.route(idemhook.Route{Source: "acme", Preset: preset}, h)

	forged := send(route, `{"ID":"evt_1"}`, "X-Acme-Token", "guess")
	if forged.Code != 401 || !strings.Contains(forged.Body.String(), "bad token") {
		t.Fatalf("forged: %d %s", forged.Code, forged.Body)
	}
	if e.store.(*memstore.Store).Len() != 0 || h.n.Load() != 0 {
		t.Fatal("a forged request claimed a key or ran the handler")
	}
	send(route, `{"ID":"evt_1","attempt":1}`, "X-Acme-Token", "s3cret")
	// A retry with a different envelope: preset keys replay, never 422.
	dup := send(route, `{"ID":"evt_1","attempt":2}`, "X-Acme-Token", "s3cret")
	if dup.Code != http.StatusAccepted || dup.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("duplicate: %d %v", dup.Code, dup.Header())
	}
	if rec, _ := e.store.Get(t.Context(), "idem:acme:evt_1"); rec == nil {
		t.Fatal("no record under the preset's key")
	}
	// An unparseable body is a key error: the handler runs unprotected.
	send(route, `not json`, "X-Acme-Token", "s3cret")
	if n := h.n.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeSignatureInvalid, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed, idemhook.OutcomeKeyError)
}

// failingStore is a real memory store with one operation made to fail, to
// drive the error paths that a live server only reaches by accident.
type failingStore struct {
	*memstore.Store
	fail             map[string]error
	getFailures      atomic.Int64 // the next n Gets time out
	completeFailures atomic.Int64 // the next n Completes fail
}

func (f *failingStore) Name() string { return "Flaky" }

func (f *failingStore) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	if err := f.fail["claim"]; err != nil {
		return nil, err
	}
	return f.Store.Claim(ctx, key, claim, lease)
}

func (f *failingStore) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	if f.getFailures.Add(-1) >= 0 {
		return nil, context.DeadlineExceeded
	}
	return f.Store.Get(ctx, key)
}

func (f *failingStore) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	if err := f.fail["complete"]; err != nil {
		return err
	}
	if f.completeFailures.Add(-1) >= 0 {
		return errors.New("connection refused")
	}
	return f.Store.Complete(ctx, key, claim, done, ttl)
}

func newFailingEnv(t *testing.T, fail map[string]error, opts idemhook.Options) *env {
	clk := newClock()
	st, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, &failingStore{Store: st, fail: fail}, clk, opts)
}

func TestStoreErrorFailOpenAndClosed(t *testing.T) {
	down := errors.New("connection refused")
	e := newFailingEnv(t, map[string]error{"claim": down}, idemhook.Options{})
	h := &counter{}
	open := e.route(idemhook.Route{Source: "stone"}, h)
	closed := e.route(idemhook.Route{Source: "stone-closed", OnStoreError: idemhook.StoreErrorClosed}, h)

	if r := send(open, `{"id":1}`); r.Code != 200 {
		t.Fatalf("open: %d", r.Code)
	}
	r := send(closed, `{"id":1}`)
	if r.Code != http.StatusServiceUnavailable || r.Header().Get("Retry-After") == "" || r.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("closed: %d %v", r.Code, r.Header())
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1 (open only)", n)
	}
	if !strings.Contains(e.logs.String(), `msg="WebhookIdempotencyGuard Flaky error for key=idem:stone:sha256:`) {
		t.Fatalf("missing store error WARN:\n%s", e.logs)
	}
	wantOutcomes(t, e, idemhook.OutcomeStoreErrorOpen, idemhook.OutcomeStoreErrorClosed)
}

func TestCacheWriteFailureIsLogged(t *testing.T) {
	// The store keeps refusing: the answer is tried again in the background
	// until three leases have passed, then given up with a WARN.
	e := newFailingEnv(t, map[string]error{"complete": errors.New("disk full")}, idemhook.Options{Lease: 60 * time.Millisecond})
	route := e.route(idemhook.Route{Source: "stone"}, &counter{})
	if r := send(route, `{"id":1}`); r.Code != 200 {
		t.Fatalf("status %d", r.Code)
	}
	if !strings.Contains(e.logs.String(), `msg="WebhookIdempotencyInterceptor cache write failed for key=idem:stone:sha256:`) {
		t.Fatalf("missing cache write WARN:\n%s", e.logs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.mw.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.logs.String(), "could not be stored before its claim's lease ran out, or within three leases") {
		t.Fatalf("missing give-up WARN:\n%s", e.logs)
	}
}

// TestCacheWriteRetriedInTheBackground: the store refuses an answer three
// times (it was down when the handler finished), then takes it. The answer
// sent is stored in the background meanwhile the claim stays held, so a
// copy of the event is replayed instead of running the handler again.
func TestCacheWriteRetriedInTheBackground(t *testing.T) {
	e := newFailingEnv(t, nil, idemhook.Options{})
	e.store.(*failingStore).completeFailures.Store(3)
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone"}, h)
	if r := send(route, `{"id":1}`); r.Code != 200 {
		t.Fatalf("status %d", r.Code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.mw.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.logs.String(), "stored once it took it again") || !strings.Contains(e.logs.String(), "tries=3") {
		t.Fatalf("missing the stored-later line:\n%s", e.logs)
	}
	r := send(route, `{"id":1}`)
	if r.Code != 200 || r.Header().Get(idemhook.ReplayedHeader) != "true" || h.n.Load() != 1 {
		t.Fatalf("copy after the store took the answer: %d replayed=%q, handler ran %d times", r.Code, r.Header().Get(idemhook.ReplayedHeader), h.n.Load())
	}
}

func TestCorruptRecordIsParseErrorAndRunsTheHandler(t *testing.T) {
	e := newFailingEnv(t, map[string]error{"claim": fmt.Errorf("decode: %w", idemhook.ErrCorruptRecord)}, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone", OnStoreError: idemhook.StoreErrorClosed}, h)
	if r := send(route, `{"id":1}`); r.Code != 200 || h.n.Load() != 1 {
		t.Fatalf("status %d, handler ran %d times", r.Code, h.n.Load())
	}
	if !strings.Contains(e.logs.String(), `msg="WebhookIdempotencyGuard cached value parse error for key=idem:stone:sha256:`) {
		t.Fatalf("missing parse error WARN:\n%s", e.logs)
	}
}

func TestBreakerSkipsADeadStore(t *testing.T) {
	var changes []bool
	e := newFailingEnv(t, map[string]error{"claim": errors.New("i/o timeout")}, idemhook.Options{
		BreakerThreshold: 3,
		BreakerCooldown:  time.Second,
		OnBreakerChange:  func(open bool) { changes = append(changes, open) },
	})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone"}, h)
	for range 10 {
		send(route, `{"id":1}`)
	}
	var called, skipped int
	for _, c := range e.storeCalls {
		if c.Skipped {
			skipped++
		} else {
			called++
		}
	}
	if called != 3 || skipped != 7 || !e.breakerOpen.Load() {
		t.Fatalf("store called %d times, skipped %d, open %v: want 3, 7, true", called, skipped, e.breakerOpen.Load())
	}
	if h.n.Load() != 10 {
		t.Fatalf("handler ran %d times, want 10 (fail-open)", h.n.Load())
	}
	// The store comes back; after the cooldown one probe closes the breaker.
	e.store.(*failingStore).fail = nil
	e.clock.Advance(time.Second)
	send(route, `{"id":2}`)
	send(route, `{"id":2}`)
	if e.breakerOpen.Load() || h.n.Load() != 11 {
		t.Fatalf("after recovery: open %v, handler ran %d times", e.breakerOpen.Load(), h.n.Load())
	}
	if fmt.Sprint(changes) != "[true false]" {
		t.Fatalf("breaker changes %v", changes)
	}
}

func TestEveryDeliveryHasExactlyOneOutcome(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	route := e.route(idemhook.Route{Source: "stone", MaxBodyBytes: 64}, &counter{})
	bodies := []string{`{"id":1}`, `{"id":1}`, `{"id":2}`, strings.Repeat("x", 65)}
	for _, b := range bodies {
		send(route, b)
	}
	if got := len(e.outcomes()); got != len(bodies) {
		t.Fatalf("%d outcomes for %d deliveries", got, len(bodies))
	}
	for _, d := range e.deliveries {
		if d.Status == 0 || d.Source != "stone" {
			t.Fatalf("delivery info %+v", d)
		}
	}
	if d := e.deliveries[0]; d.RequestBytes != 8 || d.ResponseBytes != int64(len(`{"execution":1}`)) {
		t.Fatalf("sizes %d %d", d.RequestBytes, d.ResponseBytes)
	}
}

// A waiter whose polls time out now and then (a slow store, not a dead one)
// keeps waiting: it must not run the handler a second time.
func TestInFlightWaitSurvivesSlowPolls(t *testing.T) {
	e := newFailingEnv(t, nil, idemhook.Options{BreakerThreshold: 5})
	e.store.(*failingStore).getFailures.Store(3) // fewer than the breaker's threshold
	b := newBlocker()
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: time.Minute}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	second := sendAsync(route, `{"id":1}`)
	for e.store.(*failingStore).getFailures.Load() >= 0 { // until the waiter has met every failure
		select {
		case <-b.started:
			close(b.release)
			t.Fatal("the waiter ran the handler after a slow poll")
		case <-time.After(time.Millisecond):
		}
	}
	close(b.release)
	<-first
	if r := <-second; r.Body.String() != "execution 1" {
		t.Fatalf("waiter got %q", r.Body)
	}
	if n := b.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeProcessed, idemhook.OutcomeInFlightWaited)
}

// A duplicate whose caller hangs up while it waits for the running delivery
// is reported as abandoned (not as waited and replayed): nothing was sent,
// the handler did not run for it, and the first delivery is unaffected.
func TestInFlightWaitCallerHangsUp(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	b := newBlocker()
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: time.Minute}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the duplicate's sender is gone: the wait ends at once
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/webhook", strings.NewReader(`{"id":1}`))
	rec := httptest.NewRecorder()
	route.ServeHTTP(rec, req)
	close(b.release)
	if r := <-first; r.Body.String() != "execution 1" {
		t.Fatalf("first delivery got %q", r.Body)
	}
	if n := b.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	wantOutcomesSet(t, e, idemhook.OutcomeProcessed, idemhook.OutcomeInFlightAbandoned)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range e.deliveries {
		if d.Outcome == idemhook.OutcomeInFlightAbandoned && (d.Status != 0 || !errors.Is(d.Err, context.Canceled) || rec.Body.Len() != 0) {
			t.Errorf("abandoned delivery: status %d, err %v, body %q; want 0, context.Canceled, nothing", d.Status, d.Err, rec.Body)
		}
	}
}

// With the store dead (the breaker open), a waiter applies the store-error
// policy at once instead of waiting out WaitTimeout.
func TestInFlightWaitWithADeadStoreFailsOpen(t *testing.T) {
	e := newFailingEnv(t, nil, idemhook.Options{BreakerThreshold: 2})
	e.store.(*failingStore).getFailures.Store(1000)
	b := newBlocker()
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: time.Hour}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	second := sendAsync(route, `{"id":1}`)
	<-b.started // the waiter gave up on the dead store and ran the handler
	close(b.release)
	<-first
	<-second
	if c := e.countOutcomes(); c[idemhook.OutcomeStoreErrorOpen] != 1 {
		t.Fatalf("outcomes %v", c)
	}
}

// A handler that runs longer than the lease keeps its claim: the lease is
// renewed every Lease/3 while it runs. The duplicate sent after four renewals
// (past the original lease) still finds the claim held.
func TestLeaseIsRenewedWhileTheHandlerRuns(t *testing.T) {
	var extends atomic.Int64
	renewed := make(chan struct{})
	st, err := memstore.New(memstore.Config{}) // real clock: the renewal timer is real
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st, nil, idemhook.Options{
		Lease: 300 * time.Millisecond,
		OnStoreCall: func(c idemhook.StoreCallInfo) {
			if c.Op == "extend" && c.Err == nil && extends.Add(1) == 4 {
				close(renewed)
			}
		},
	})
	b := newBlocker()
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightReject}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	select {
	case <-renewed:
	case <-time.After(10 * time.Second):
		close(b.release)
		t.Fatalf("%d lease renewals in 10s, want 4", extends.Load())
	}
	if r := send(route, `{"id":1}`); r.Code != http.StatusConflict {
		close(b.release)
		t.Fatalf("duplicate after the original lease: %d, want 409 (claim still held)", r.Code)
	}
	close(b.release)
	if r := <-first; r.Code != 200 {
		t.Fatalf("first: %d", r.Code)
	}
	if n := b.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	if strings.Contains(e.logs.String(), "lease lost") {
		t.Fatalf("unexpected lease-lost WARN:\n%s", e.logs)
	}
}

// The deliveries of a route share one renewal timer: each running claim is
// still renewed, also when a delivery in the middle of the queue finishes,
// and a duplicate sent past the original lease finds every claim held.
func TestLeaseRenewalsOfConcurrentDeliveries(t *testing.T) {
	var mu sync.Mutex
	extends := map[string]int{}                // X-N of the delivery → successful extends
	st, err := memstore.New(memstore.Config{}) // real clock: the renewal timer is real
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st, nil, idemhook.Options{
		Lease: 150 * time.Millisecond,
		OnStoreCall: func(c idemhook.StoreCallInfo) {
			if c.Op == "extend" && c.Err == nil {
				mu.Lock()
				extends[c.Request.Header.Get("X-N")]++
				mu.Unlock()
			}
		},
	})
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	started := make(chan struct{}, 3)
	var runs atomic.Int64
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightReject}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		started <- struct{}{}
		<-release[r.Header.Get("X-N")]
	}))
	done := map[string]chan *httptest.ResponseRecorder{}
	for _, n := range []string{"a", "b", "c"} {
		c := make(chan *httptest.ResponseRecorder, 1)
		done[n] = c
		go func() { c <- send(route, `{"id":"`+n+`"}`, "X-N", n) }()
		<-started
	}
	// Let b's claim be renewed once, then finish it: a and c stay queued
	// around it.
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		nb := extends["b"]
		mu.Unlock()
		if nb > 0 {
			break
		}
		if time.Now().After(wait) {
			for _, c := range release {
				close(c)
			}
			t.Fatal("b's claim was not renewed in 10s")
		}
	}
	close(release["b"])
	if r := <-done["b"]; r.Code != 200 {
		t.Fatalf("b: %d", r.Code)
	}
	mu.Lock()
	base := map[string]int{"a": extends["a"], "c": extends["c"]}
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		na, nc := extends["a"]-base["a"], extends["c"]-base["c"]
		mu.Unlock()
		if na >= 4 && nc >= 4 {
			break // past the original lease of both since b finished
		}
		if time.Now().After(deadline) {
			close(release["a"])
			close(release["c"])
			t.Fatalf("renewals after b finished: a %d, c %d in 10s, want 4 each", na, nc)
		}
		time.Sleep(time.Millisecond)
	}
	for _, n := range []string{"a", "c"} {
		if r := send(route, `{"id":"`+n+`"}`, "X-N", n); r.Code != http.StatusConflict {
			t.Errorf("duplicate of %s: %d, want 409 (claim still held)", n, r.Code)
		}
	}
	close(release["a"])
	close(release["c"])
	for _, n := range []string{"a", "c"} {
		if r := <-done[n]; r.Code != 200 {
			t.Fatalf("%s: %d", n, r.Code)
		}
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
	if strings.Contains(e.logs.String(), "lease lost") {
		t.Fatalf("unexpected lease-lost WARN:\n%s", e.logs)
	}
}

// One tenant's answer never reaches another: routes whose pattern can match
// several paths scope their keys by path, a fixed route keeps the guard's
// unscoped key, and Route.Scope overrides both.
func TestScopeKeepsPathsAndTenantsApart(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	wrap := func(rt idemhook.Route) http.Handler {
		w, err := e.mw.Route(rt)
		if err != nil {
			t.Fatal(err)
		}
		return w(h)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{tenant}", wrap(idemhook.Route{Source: "orders"}))
	mux.Handle("POST /t/", wrap(idemhook.Route{Source: "t"}))
	mux.Handle("POST /fixed", wrap(idemhook.Route{Source: "fixed"}))
	mux.Handle("POST /exact/{$}", wrap(idemhook.Route{Source: "exact"}))
	mux.Handle("POST /custom/{tenant}/{id}", wrap(idemhook.Route{Source: "custom",
		Scope: func(r *http.Request) string { return r.PathValue("tenant") }}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(path, key string) (string, bool) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"e":2}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.Header.Get(idemhook.ReplayedHeader) == "true"
	}
	bodyKey := idemhook.BodyKey([]byte(`{"e":2}`))
	tests := []struct {
		path, key    string
		wantReplayed bool
		wantStoreKey string
	}{
		{"/orders/acme", "o-1", false, "idem:orders@/orders/acme:o-1"},
		{"/orders/other", "o-1", false, "idem:orders@/orders/other:o-1"},
		{"/orders/acme", "o-1", true, "idem:orders@/orders/acme:o-1"},
		{"/t/acme", "", false, "idem:t@/t/acme:" + bodyKey},
		{"/t/globex", "", false, "idem:t@/t/globex:" + bodyKey},
		{"/t/globex", "", true, "idem:t@/t/globex:" + bodyKey},
		{"/t/a:b", "", false, "idem:t@/t/a%3Ab:" + bodyKey},     // ':' escaped: the scope never holds it
		{"/t/a%3Ab", "", true, "idem:t@/t/a%3Ab:" + bodyKey},    // the same path, spelled otherwise
		{"/t/a%25b", "", false, "idem:t@/t/a%2525b:" + bodyKey}, // a '%' in the path is escaped twice: once in the path, once in the key
		{"/fixed", "", false, "idem:fixed:" + bodyKey},
		{"/fixed", "", true, "idem:fixed:" + bodyKey},
		{"/exact/", "", false, "idem:exact:" + bodyKey},
		{"/custom/acme/1", "k", false, "idem:custom@acme:k"},
		{"/custom/acme/2", "k", true, "idem:custom@acme:k"}, // the scope the route chose: the tenant
		{"/custom/globex/1", "k", false, "idem:custom@globex:k"},
	}
	for i, tt := range tests {
		_, replayed := post(tt.path, tt.key)
		if replayed != tt.wantReplayed {
			t.Errorf("%d: POST %s key %q: replayed %v, want %v", i, tt.path, tt.key, replayed, tt.wantReplayed)
		}
		e.mu.Lock()
		got := e.deliveries[len(e.deliveries)-1].StoreKey
		e.mu.Unlock()
		if got != tt.wantStoreKey {
			t.Errorf("%d: POST %s: store key %q, want %q", i, tt.path, got, tt.wantStoreKey)
		}
	}
	if n, want := h.n.Load(), int64(10); n != want {
		t.Fatalf("handler ran %d times, want %d (once per path or tenant and event)", n, want)
	}
}

// A delivery re-sent on another spelling of its path (a trailing slash, a
// percent-encoded letter, a doubled slash) is the same event on the same
// route, so it is replayed: with the Stripe preset, a captured signed
// payload can't be run again inside the signature's tolerance by adding a
// slash. Each router below reaches the route with the spellings it lets
// through (ServeMux redirects unclean paths), and the handler runs once per
// tenant. examples/chi runs the same test through chi, with and without
// StripSlashes, and chi's Compress inside a route.
func TestScopeIgnoresThePathsSpelling(t *testing.T) {
	const secret = "whsec_scope"
	preset, err := provider.New("stripe", provider.Config{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"id":"evt_1","type":"invoice.paid"}`
	signature := func() string {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "." + body))
		return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
	}
	tests := []struct {
		name   string
		router func(route http.Handler) http.Handler
		paths  []string // the first runs the event for tenant acme, every other is a duplicate
		globex string   // the same event for another tenant: runs again
	}{
		{
			name: "ServeMux wildcard",
			router: func(route http.Handler) http.Handler {
				mux := http.NewServeMux()
				mux.Handle("POST /t/{tenant}/orders", route)
				return mux
			},
			paths:  []string{"/t/acme/orders", "/t/%61cme/orders", "/t/%61%63me/orders"},
			globex: "/t/globex/orders",
		},
		{
			name: "ServeMux subtree",
			router: func(route http.Handler) http.Handler {
				mux := http.NewServeMux()
				mux.Handle("POST /t/", route)
				return mux
			},
			paths:  []string{"/t/acme/orders", "/t/acme/orders/", "/t/%61cme/orders", "/t/acme/%6Frders/"},
			globex: "/t/globex/orders",
		},
		{
			name:   "no router",
			router: func(route http.Handler) http.Handler { return route },
			paths:  []string{"/t/acme/orders", "/t/acme/orders/", "/t//acme/orders", "/t/./acme/orders", "/t/%61cme//orders/"},
			globex: "/t/globex/orders",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			wrap, err := e.mw.Route(idemhook.Route{Source: "stripe", Preset: preset})
			if err != nil {
				t.Fatal(err)
			}
			h := &counter{}
			srv := httptest.NewServer(tt.router(wrap(h)))
			defer srv.Close()
			post := func(path string) (status int, replayed bool) {
				req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Stripe-Signature", signature())
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				io.Copy(io.Discard, resp.Body) //nolint:errcheck
				return resp.StatusCode, resp.Header.Get(idemhook.ReplayedHeader) == "true"
			}
			var scope string
			for i, path := range tt.paths {
				status, replayed := post(path)
				if status != http.StatusOK || replayed != (i > 0) {
					t.Errorf("POST %s: status %d, replayed %v; want 200, replayed %v", path, status, replayed, i > 0)
				}
				e.mu.Lock()
				got := e.deliveries[len(e.deliveries)-1].Scope
				e.mu.Unlock()
				if i == 0 {
					scope = got
				} else if got != scope {
					t.Errorf("POST %s: scope %q, want %q (that of %s)", path, got, scope, tt.paths[0])
				}
			}
			if n := h.n.Load(); n != 1 {
				t.Fatalf("handler ran %d times for tenant acme's event, want 1", n)
			}
			if status, replayed := post(tt.globex); status != http.StatusOK || replayed {
				t.Errorf("POST %s: status %d, replayed %v; want 200 and a run of its own", tt.globex, status, replayed)
			}
			if n := h.n.Load(); n != 2 {
				t.Fatalf("handler ran %d times in all, want 2 (once per tenant)", n)
			}
		})
	}
}

// On a fixed ServeMux route with the default scope, the records sit under
// exactly the keys the NestJS guard used (see TestBodyHashRouteUsesTheGuardsKeys).
func TestGuardKeysOnAFixedMuxRoute(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	wrap, err := e.mw.Route(idemhook.Route{Source: "stone"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stone", wrap(&counter{}))
	for _, v := range loadGuardVectors(t) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(v.Body)))
		if got, err := e.store.Get(t.Context(), v.Key); err != nil || got == nil {
			t.Errorf("%s: no record under the guard's key %s (%v)", v.Name, v.Key, err)
		}
	}
}

// Without a key header, a body-hash key covers the query string. Events that
// a provider puts in the query (Mercado Pago's IPN, ?topic=payment&id=123,
// empty body) are told apart. A route can refuse deliveries without a key.
func TestQueryStringIsPartOfTheBodyKey(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "mp"}, h)
	for _, q := range []string{"?id=0", "?id=1", "?id=2", "?id=1", ""} {
		rec := httptest.NewRecorder()
		route.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/ipn"+q, nil))
	}
	if n := h.n.Load(); n != 4 {
		t.Fatalf("handler ran %d times for 4 distinct events (one repeated), want 4", n)
	}
	e.mu.Lock()
	keys := []string{e.deliveries[1].Key, e.deliveries[3].Key, e.deliveries[4].Key}
	e.mu.Unlock()
	if keys[0] != keys[1] || keys[0] != idemhook.RequestKey(nil, "id=1") {
		t.Errorf("?id=1 keys %q, %q; want both %q", keys[0], keys[1], idemhook.RequestKey(nil, "id=1"))
	}
	if keys[2] != idemhook.BodyKey(nil) {
		t.Errorf("no query: key %q, want the body hash %q", keys[2], idemhook.BodyKey(nil))
	}

	strict := newMemEnv(t, idemhook.Options{})
	h2 := &counter{}
	required := strict.route(idemhook.Route{Source: "s", RequireKey: true}, h2)
	r := send(required, `{"id":1}`)
	if r.Code != http.StatusBadRequest || r.Header().Get("Content-Type") != "application/problem+json" || h2.n.Load() != 0 {
		t.Fatalf("no key on a RequireKey route: %d %q, handler ran %d times", r.Code, r.Body, h2.n.Load())
	}
	if r := send(required, `{"id":1}`, "Idempotency-Key", "k-1"); r.Code != 200 || h2.n.Load() != 1 {
		t.Fatalf("with a key: %d, handler ran %d times", r.Code, h2.n.Load())
	}
	wantOutcomes(t, strict, idemhook.OutcomeKeyError, idemhook.OutcomeProcessed)
}

// The zero Route waits for a running delivery instead of running the event
// twice: a duplicate arriving mid-delivery gets the first answer.
func TestDefaultInFlightPolicyIsWait(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	b := newBlocker()
	route := e.route(idemhook.Route{Source: "stone"}, b)
	first := sendAsync(route, `{"id":1}`)
	<-b.started
	second := sendAsync(route, `{"id":1}`)
	e.waitForStoreCalls("claim", 2) // the duplicate found the claim pending
	close(b.release)
	f, s := <-first, <-second
	if n := b.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if s.Body.String() != f.Body.String() || s.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("duplicate got %d %q, first %q", s.Code, s.Body, f.Body)
	}
	wantOutcomesSet(t, e, idemhook.OutcomeProcessed, idemhook.OutcomeInFlightWaited)
	wantStatus(t, e, idemhook.OutcomeInFlightWaited, s.Code)
}

func wantOutcomesSet(t *testing.T, e *env, want ...idemhook.Outcome) {
	t.Helper()
	got := e.countOutcomes()
	for _, o := range want {
		got[o]--
	}
	for _, n := range got {
		if n != 0 {
			t.Fatalf("outcomes %v, want %v in any order", e.outcomes(), want)
		}
	}
}

// waitForStoreCalls waits until the store has seen n calls of op.
func (e *env) waitForStoreCalls(op string, n int) {
	e.t.Helper()
	for range 5000 {
		e.mu.Lock()
		seen := 0
		for _, c := range e.storeCalls {
			if c.Op == op {
				seen++
			}
		}
		e.mu.Unlock()
		if seen >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	e.t.Fatalf("fewer than %d %s calls after 5s", n, op)
}

// DeliveryInfo.Status is the status the caller received, for every outcome,
// seen by a real client through a real server.
func TestDeliveryInfoStatusIsWhatTheCallerGot(t *testing.T) {
	type step struct {
		body, key string
		status    int // the handler's
		panics    bool
	}
	tests := []struct {
		name    string
		route   idemhook.Route
		store   map[string]error // store ops that fail
		steps   []step
		outcome idemhook.Outcome // of the last step
		want    int
	}{
		{"processed", idemhook.Route{}, nil, []step{{body: `{"a":1}`, status: 201}}, idemhook.OutcomeProcessed, 201},
		{"replayed", idemhook.Route{}, nil, []step{{body: `{"a":1}`, status: 201}, {body: `{"a":1}`}}, idemhook.OutcomeReplayed, 201},
		{"replayed with a duplicate status", idemhook.Route{Preset: &idemhook.Preset{Name: "p", DuplicateStatus: 202}}, nil,
			[]step{{body: `{"a":1}`, status: 200}, {body: `{"a":1}`}}, idemhook.OutcomeReplayed, 202},
		{"mismatch", idemhook.Route{}, nil, []step{{body: `{"a":1}`, key: "k"}, {body: `{"a":2}`, key: "k"}}, idemhook.OutcomeMismatch, 422},
		{"failed and released", idemhook.Route{}, nil, []step{{body: `{"a":1}`, status: 503}}, idemhook.OutcomeFailedReleased, 503},
		{"4xx released", idemhook.Route{}, nil, []step{{body: `{"a":1}`, status: 404}}, idemhook.OutcomeFailedReleased, 404},
		{"panic", idemhook.Route{}, nil, []step{{body: `{"a":1}`, status: 200, panics: true}}, idemhook.OutcomeFailedReleased, 500},
		{"store error, open", idemhook.Route{}, map[string]error{"claim": errors.New("down")}, []step{{body: `{"a":1}`, status: 201}}, idemhook.OutcomeStoreErrorOpen, 201},
		{"store error, closed", idemhook.Route{OnStoreError: idemhook.StoreErrorClosed}, map[string]error{"claim": errors.New("down")}, []step{{body: `{"a":1}`}}, idemhook.OutcomeStoreErrorClosed, 503},
		{"key required", idemhook.Route{RequireKey: true}, nil, []step{{body: `{"a":1}`}}, idemhook.OutcomeKeyError, 400},
		{"signature invalid", idemhook.Route{Preset: &idemhook.Preset{Name: "p", Verify: func(*http.Request, []byte) error { return errors.New("bad") }}}, nil,
			[]step{{body: `{"a":1}`}}, idemhook.OutcomeSignatureInvalid, 401},
		{"too large", idemhook.Route{MaxBodyBytes: 4}, nil, []step{{body: `{"a":1}`}}, idemhook.OutcomeTooLarge, 413},
		{"handler writes nothing", idemhook.Route{}, nil, []step{{body: `{"a":1}`}}, idemhook.OutcomeProcessed, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFailingEnv(t, tt.store, idemhook.Options{BreakerThreshold: -1})
			var cur step
			rt := tt.route
			rt.Source = "s"
			h := e.route(rt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if cur.status != 0 {
					w.WriteHeader(cur.status)
					io.WriteString(w, `{"ok":true}`) //nolint:errcheck
				}
				if cur.panics {
					panic(http.ErrAbortHandler) // net/http logs nothing for this one
				}
			}))
			srv := httptest.NewUnstartedServer(h)
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.Start()
			defer srv.Close()
			var got int
			for _, st := range tt.steps {
				cur = st
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(st.body))
				if st.key != "" {
					req.Header.Set("Idempotency-Key", st.key)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body) //nolint:errcheck
				resp.Body.Close()
				got = resp.StatusCode
			}
			e.mu.Lock()
			last := e.deliveries[len(e.deliveries)-1]
			e.mu.Unlock()
			if got != tt.want || last.Status != got || last.Outcome != tt.outcome {
				t.Fatalf("caller got %d (want %d); hook reported %s status %d", got, tt.want, last.Outcome, last.Status)
			}
		})
	}
}

// A problem body is valid JSON whatever the detail holds: control bytes and
// invalid UTF-8 from a Verify error are escaped, not quoted the Go way.
func TestProblemBodyIsValidJSON(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	route := e.route(idemhook.Route{Source: "s", Preset: &idemhook.Preset{Name: "p",
		Verify: func(*http.Request, []byte) error { return errors.New("bad \x01 byte \xff and \"quotes\"") }}}, &counter{})
	r := send(route, `{}`)
	var doc struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(r.Body.Bytes(), &doc); err != nil {
		t.Fatalf("problem body is not JSON: %v: %q", err, r.Body)
	}
	if doc.Status != 401 || !strings.Contains(doc.Detail, "bad \x01 byte") {
		t.Fatalf("problem %+v", doc)
	}
}

// fuzzStore answers every call from a script: each call takes the next byte.
// 0 acts on a real memory store, 1 fails, 2 finds a pending claim, 3 finds a
// completed record, 4 finds a corrupt value, 5 is ErrNotOwner.
type fuzzStore struct {
	*memstore.Store
	mu     sync.Mutex
	script []byte
}

func (s *fuzzStore) next() byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.script) == 0 {
		return 0
	}
	b := s.script[0] % 6
	s.script = s.script[1:]
	return b
}

var errFuzzDown = errors.New("fuzz: store down")

func (s *fuzzStore) answer(ctx context.Context, real func() (*idemhook.Record, error)) (*idemhook.Record, error) {
	switch s.next() {
	case 1:
		return nil, errFuzzDown
	case 2:
		return &idemhook.Record{State: idemhook.StatePending, Token: "other"}, nil
	case 3:
		return &idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: []byte("stored")}, nil
	case 4:
		return nil, fmt.Errorf("fuzz: %w", idemhook.ErrCorruptRecord)
	case 5:
		return nil, idemhook.ErrNotOwner
	}
	return real()
}

func (s *fuzzStore) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	return s.answer(ctx, func() (*idemhook.Record, error) { return s.Store.Claim(ctx, key, claim, lease) })
}

func (s *fuzzStore) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	return s.answer(ctx, func() (*idemhook.Record, error) { return s.Store.Get(ctx, key) })
}

func (s *fuzzStore) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	_, err := s.answer(ctx, func() (*idemhook.Record, error) { return nil, s.Store.Complete(ctx, key, claim, done, ttl) })
	return err
}

func (s *fuzzStore) Release(ctx context.Context, key string, claim *idemhook.Record) error {
	_, err := s.answer(ctx, func() (*idemhook.Record, error) { return nil, s.Store.Release(ctx, key, claim) })
	return err
}

// Every request that is a delivery reports exactly one outcome, whatever the
// store answers, the route's policies and the handler do, and the status it
// reports is the one the caller received.
func FuzzEveryDeliveryReportsOnce(f *testing.F) {
	f.Add([]byte{0, 0}, uint8(0), uint8(0))
	f.Add([]byte{2, 2, 2, 2}, uint8(1), uint8(2))
	f.Add([]byte{2, 0, 3}, uint8(0), uint8(3))
	f.Add([]byte{1, 1, 1}, uint8(6), uint8(1))
	f.Add([]byte{4}, uint8(2), uint8(4))
	f.Add([]byte{0, 5, 5}, uint8(9), uint8(5))
	f.Fuzz(func(t *testing.T, script []byte, routeBits, handlerBits uint8) {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		st := &fuzzStore{Store: mem, script: script}
		var reports []idemhook.DeliveryInfo
		var mu sync.Mutex
		mw, err := idemhook.New(st, idemhook.Options{BreakerThreshold: -1, OnDelivery: func(d idemhook.DeliveryInfo) {
			mu.Lock()
			reports = append(reports, d)
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
		rt := idemhook.Route{
			Source:       "fz",
			Scope:        unscoped,
			InFlight:     []idemhook.InFlightPolicy{idemhook.InFlightWait, idemhook.InFlightReject, idemhook.InFlightProceed}[routeBits%3],
			WaitTimeout:  5 * time.Millisecond,
			RequireKey:   routeBits&8 != 0,
			MaxBodyBytes: map[bool]int64{true: 4, false: 0}[routeBits&16 != 0],
		}
		if routeBits&4 != 0 {
			rt.OnStoreError = idemhook.StoreErrorClosed
		}
		wrap, err := mw.Route(rt)
		if err != nil {
			t.Fatal(err)
		}
		h := wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch handlerBits % 6 {
			case 0:
				w.WriteHeader(201)
			case 1:
				w.WriteHeader(404)
			case 2:
				w.WriteHeader(503)
			case 3:
				panic(http.ErrAbortHandler)
			case 4:
				// writes nothing: 200
			case 5:
				io.WriteString(w, "body") //nolint:errcheck
			}
		}))
		req := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(`{"id":1}`))
		if handlerBits&32 != 0 {
			req.Header.Set("Idempotency-Key", "k")
		}
		rec := &statusRecorder{ResponseRecorder: httptest.NewRecorder()}
		panicked := false
		func() {
			defer func() {
				if p := recover(); p != nil {
					if p != http.ErrAbortHandler {
						panic(p)
					}
					panicked = true
				}
			}()
			h.ServeHTTP(rec, req)
		}()
		got := rec.status // what went on the wire: 0 when nothing did
		if got == 0 && !panicked {
			got = http.StatusOK // net/http sends 200 for a handler that wrote nothing
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reports) != 1 {
			t.Fatalf("%d OnDelivery calls for one delivery: %+v", len(reports), reports)
		}
		if reports[0].Status != got {
			t.Fatalf("outcome %s reported status %d, the caller got %d", reports[0].Outcome, reports[0].Status, got)
		}
	})
}

// statusRecorder records the status actually written, 0 when none was.
type statusRecorder struct {
	*httptest.ResponseRecorder
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseRecorder.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseRecorder.Write(b)
}

// A delivery that failed open on a store error reports a *StoreError naming
// the operation and the key, wrapping the store's error.
func TestStoreErrorIsReportedAsStoreError(t *testing.T) {
	down := errors.New("connection refused")
	e := newFailingEnv(t, map[string]error{"claim": down}, idemhook.Options{})
	send(e.route(idemhook.Route{Source: "stone"}, &counter{}), `{"id":1}`)
	var se *idemhook.StoreError
	if d := e.deliveries[0]; d.Outcome != idemhook.OutcomeStoreErrorOpen || !errors.As(d.Err, &se) ||
		se.Op != "claim" || se.Key != d.StoreKey || !errors.Is(d.Err, down) {
		t.Fatalf("outcome %s, Err %#v", d.Outcome, d.Err)
	}
}

// A store error's WARN names the key once, in the message after the
// guard's prefix; the store's error is an attribute, not repeated text.
func TestStoreWarnNamesTheKeyOnce(t *testing.T) {
	e := newFailingEnv(t, map[string]error{"claim": errors.New("connection refused")}, idemhook.Options{})
	send(e.route(idemhook.Route{Source: "stone"}, &counter{}), `{"id":1}`)
	key := e.deliveries[0].StoreKey
	logs := e.logs.String()
	if n := strings.Count(logs, key); n != 1 || !strings.Contains(logs, `msg="WebhookIdempotencyGuard Flaky error for key=`+key+`"`) ||
		!strings.Contains(logs, `op=claim error="connection refused"`) {
		t.Fatalf("the key appears %d times in:\n%s", n, logs)
	}
	// Stores name the key in their errors too (redisstore: "redisstore:
	// claim <key>: ..."). The WARN still holds it once.
	e = newFailingEnv(t, map[string]error{"claim": fmt.Errorf("flakystore: claim %s: %w", key, errors.New("connection refused"))}, idemhook.Options{})
	send(e.route(idemhook.Route{Source: "stone"}, &counter{}), `{"id":1}`)
	logs = e.logs.String()
	if n := strings.Count(logs, key); n != 1 || !strings.Contains(logs, `op=claim error="flakystore: claim: connection refused"`) {
		t.Fatalf("the key appears %d times in:\n%s", n, logs)
	}
}

// scriptedStore is a real memory store whose Claim can be made to fail or
// panic, and whose Get can be made to report a corrupt value.
type scriptedStore struct {
	*memstore.Store
	claimMode  atomic.Int32 // 0 works, 1 fails, 2 panics
	corruptGet atomic.Bool
}

const (
	claimWorks = iota
	claimFails
	claimPanics
)

func (s *scriptedStore) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	switch s.claimMode.Load() {
	case claimFails:
		return nil, errors.New("connection refused")
	case claimPanics:
		panic("store bug")
	}
	return s.Store.Claim(ctx, key, claim, lease)
}

func (s *scriptedStore) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	if s.corruptGet.Load() {
		return nil, fmt.Errorf("decode: %w", idemhook.ErrCorruptRecord)
	}
	return s.Store.Get(ctx, key)
}

func newScriptedEnv(t *testing.T, opts idemhook.Options) (*env, *scriptedStore) {
	t.Helper()
	clk := newClock()
	mem, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	st := &scriptedStore{Store: mem}
	return newEnv(t, st, clk, opts), st
}

// The breaker's half-open probe is one store call; if that call panics (a
// store bug), the probe must still count as failed. Before, the breaker
// stayed half-open for good: every later call was skipped and the store was
// never used again, even after it recovered.
func TestBreakerProbeThatPanicsDoesNotWedgeTheBreaker(t *testing.T) {
	e, st := newScriptedEnv(t, idemhook.Options{BreakerThreshold: 2, BreakerCooldown: time.Second})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone"}, h)

	st.claimMode.Store(claimFails)
	send(route, `{"id":1}`)
	send(route, `{"id":1}`)
	if !e.breakerOpen.Load() {
		t.Fatal("breaker not open after 2 failures")
	}

	e.clock.Advance(time.Second)
	st.claimMode.Store(claimPanics)
	func() {
		defer func() {
			if p := recover(); p != "store bug" {
				t.Fatalf("recovered %v, want the store's panic", p)
			}
		}()
		send(route, `{"id":1}`) // the probe
	}()

	st.claimMode.Store(claimWorks)
	e.clock.Advance(time.Second)
	send(route, `{"id":2}`) // the next probe: the store works again
	if e.breakerOpen.Load() {
		t.Fatal("breaker still open: the panicking probe wedged it half-open")
	}
	if r := send(route, `{"id":2}`); r.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("deduplication did not resume: %d %v", r.Code, r.Header())
	}
}

// A waiter that finds the key holding a value it can't decode (e.g. the
// NestJS guard writing to the same Redis during a migration) applies the
// parse-error rule at once: WARN, run the handler. Before, it took the
// corrupt value for a slow poll, waited the whole WaitTimeout and then
// proceeded without the WARN.
func TestInFlightWaitSeesACorruptRecord(t *testing.T) {
	e, st := newScriptedEnv(t, idemhook.Options{})
	body := `{"id":1}`
	key := idemhook.StoreKey("stone", idemhook.BodyKey([]byte(body)))
	other := &idemhook.Record{State: idemhook.StatePending, Token: "another process"}
	if existing, err := st.Store.Claim(t.Context(), key, other, time.Minute); err != nil || existing != nil {
		t.Fatalf("claim: %v %v", existing, err)
	}
	st.corruptGet.Store(true)
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: 2 * time.Second}, h)
	if r := send(route, body); r.Code != 200 || h.n.Load() != 1 {
		t.Fatalf("status %d, handler ran %d times", r.Code, h.n.Load())
	}
	if !strings.Contains(e.logs.String(), `msg="WebhookIdempotencyGuard cached value parse error for key=`+key) {
		t.Fatalf("missing parse error WARN:\n%s", e.logs)
	}
	wantOutcomes(t, e, idemhook.OutcomeStoreErrorOpen)
}

// errAfter is a request body that declares more than it sends: it fails
// after its first bytes, as a sender that hangs up does. It notes the
// largest buffer it was handed, the memory set aside for the body.
type errAfter struct {
	sent    bool
	largest int
}

func (b *errAfter) Read(p []byte) (int, error) {
	b.largest = max(b.largest, len(p))
	if b.sent {
		return 0, io.ErrUnexpectedEOF
	}
	b.sent = true
	return copy(p, `{"id":`), nil
}

// The Content-Length a sender declares costs it nothing; memory for the
// body must follow the bytes that arrive. Before, the middleware allocated
// the declared length (up to MaxBodyBytes, 5 MiB) before reading a byte, so
// a few hundred connections declaring 5 MiB and sending nothing pinned
// gigabytes.
func TestDeclaredLengthIsNotAllocatedUpFront(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	route := e.route(idemhook.Route{Source: "stone"}, &counter{})
	const declared = 4 << 20
	body := &errAfter{}
	req := httptest.NewRequest(http.MethodPost, "/webhook", io.NopCloser(body))
	req.ContentLength = declared
	rec := httptest.NewRecorder()
	route.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400 for a body cut short", rec.Code)
	}
	if body.largest >= declared/4 {
		t.Fatalf("a body that sent 6 bytes was read into a %d-byte buffer (declared %d)", body.largest, declared)
	}
}

// A Lease under a millisecond made the renewal interval (Lease/3) 0: the
// renewal timer fired back to back, hammering the store for as long as the
// handler ran. New refuses it.
func TestNewRefusesALeaseUnderAMillisecond(t *testing.T) {
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, lease := range []time.Duration{time.Nanosecond, 2, time.Millisecond - 1} {
		if _, err := idemhook.New(st, idemhook.Options{Lease: lease}); err == nil || !strings.Contains(err.Error(), "Lease") {
			t.Errorf("Lease %v: err %v, want an error naming Lease", lease, err)
		}
	}
	if _, err := idemhook.New(st, idemhook.Options{Lease: time.Millisecond}); err != nil {
		t.Errorf("Lease 1ms: %v", err)
	}
}

// A handler that ends its goroutine with runtime.Goexit (t.FailNow in a
// test handler, a library's bail-out) never answers. Before, only a panic
// released the claim: after a Goexit the renewal timer kept extending the
// lease for good, so under InFlightReject every retry got 409, forever.
func TestGoexitInTheHandlerReleasesTheClaim(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var calls atomic.Int64
	route := e.route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightReject}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			runtime.Goexit()
		}
		io.WriteString(w, "ok") //nolint:errcheck
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		send(route, `{"id":1}`)
	}()
	<-done
	if r := send(route, `{"id":1}`); r.Code != 200 || r.Body.String() != "ok" {
		t.Fatalf("retry: %d %q, want the handler to run afresh", r.Code, r.Body)
	}
	wantOutcomes(t, e, idemhook.OutcomeFailedReleased, idemhook.OutcomeProcessed)
}

// StoreCallInfo.Err is nil on success, and ErrNotOwner is a success (the
// store answered; the claim was simply no longer held). The hook got
// ErrNotOwner in Err, so the gateway counted a lost lease in
// idemhook_store_errors_total, an alarm about a healthy store.
func TestStoreCallHookTreatsNotOwnerAsSuccess(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	body := `{"id":1}`
	key := idemhook.StoreKey("stone", idemhook.BodyKey([]byte(body)))
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An operator deletes the key while the handler runs: the
		// claim is no longer held when the response is stored.
		if ok, err := e.store.Delete(r.Context(), key); !ok || err != nil {
			t.Errorf("Delete: %v %v", ok, err)
		}
		io.WriteString(w, "ok") //nolint:errcheck
	}))
	if r := send(route, body); r.Code != 200 {
		t.Fatalf("status %d", r.Code)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var complete *idemhook.StoreCallInfo
	for i, c := range e.storeCalls {
		if c.Op == "complete" {
			complete = &e.storeCalls[i]
		}
	}
	if complete == nil || complete.Err != nil || complete.Skipped {
		t.Fatalf("complete call reported as %+v, want a success (Err nil)", complete)
	}
	if !strings.Contains(e.logs.String(), "cache write failed") {
		t.Fatalf("the response was not stored, yet no WARN:\n%s", e.logs)
	}
}

// Route.Lease replaces Options.Lease for one route: the pending claim lives
// that long (a duplicate after it takes over), and a wait that times out
// says so in Retry-After.
func TestRouteLease(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{Lease: time.Minute})
	b := newBlocker()
	defer close(b.release)
	short := e.route(idemhook.Route{Source: "short", Lease: 7 * time.Second, InFlight: idemhook.InFlightWait, WaitTimeout: 10 * time.Millisecond}, b)
	sendAsync(short, `{"id":1}`)
	<-b.started
	r := send(short, `{"id":1}`)
	if r.Code != 409 || r.Header().Get("Retry-After") != "7" {
		t.Errorf("a duplicate that waited out WaitTimeout: %d Retry-After %q, want 409 and 7 (the route's lease)", r.Code, r.Header().Get("Retry-After"))
	}
	// Past the route's lease (well before its first renewal, due after
	// Lease/3 of real time), the claim has lapsed: a duplicate claims it.
	e.clock.Advance(8 * time.Second)
	sendAsync(short, `{"id":1}`)
	select {
	case <-b.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the duplicate did not take over a claim past the route's lease")
	}

	other := e.route(idemhook.Route{Source: "other", InFlight: idemhook.InFlightWait, WaitTimeout: 10 * time.Millisecond}, b)
	go send(other, `{"id":2}`)
	<-b.started
	if r := send(other, `{"id":2}`); r.Header().Get("Retry-After") != "60" {
		t.Errorf("without Route.Lease, Retry-After = %q, want 60 (Options.Lease)", r.Header().Get("Retry-After"))
	}
	for _, bad := range []time.Duration{-time.Second, time.Microsecond} {
		if _, err := e.mw.Route(idemhook.Route{Source: "x", Lease: bad}); err == nil || !strings.Contains(err.Error(), "Lease") {
			t.Errorf("Route with Lease %v: %v, want an error naming Lease", bad, err)
		}
	}
}

// DeliveryInfo.Waited is how long a delivery waited for another one of its
// key, whatever came of it: a replay, or a take-over once the first
// released its claim. It is read from the middleware's clock.
func TestDeliveryInfoWaited(t *testing.T) {
	tests := []struct {
		name        string
		firstStatus int64
		wantSecond  idemhook.Outcome
	}{
		{"the first answers: replayed", 0, idemhook.OutcomeInFlightWaited},
		{"the first fails: taken over", 500, idemhook.OutcomeProcessed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			st, err := memstore.New(memstore.Config{Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			var gets atomic.Int64
			var mu sync.Mutex
			var infos []idemhook.DeliveryInfo
			mw, err := idemhook.New(st, idemhook.Options{
				Now: clk.Now,
				OnStoreCall: func(c idemhook.StoreCallInfo) {
					if c.Op == "get" {
						gets.Add(1)
					}
				},
				OnDelivery: func(d idemhook.DeliveryInfo) {
					mu.Lock()
					infos = append(infos, d)
					mu.Unlock()
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			wrap, err := mw.Route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: time.Minute, Scope: unscoped})
			if err != nil {
				t.Fatal(err)
			}
			b := newBlocker()
			b.status.Store(tt.firstStatus)
			route := wrap(b)
			first := sendAsync(route, `{"id":1}`)
			<-b.started
			second := sendAsync(route, `{"id":1}`)
			for gets.Load() == 0 { // the duplicate is waiting
				time.Sleep(time.Millisecond)
			}
			clk.Advance(2 * time.Second)
			close(b.release)
			<-first
			<-second
			mu.Lock()
			defer mu.Unlock()
			if len(infos) != 2 {
				t.Fatalf("%d deliveries", len(infos))
			}
			if infos[0].Waited != 0 {
				t.Errorf("the first delivery: Waited = %v, want 0", infos[0].Waited)
			}
			if d := infos[1]; d.Outcome != tt.wantSecond || d.Waited != 2*time.Second {
				t.Errorf("the duplicate: %s after waiting %v, want %s after 2s", d.Outcome, d.Waited, tt.wantSecond)
			}
		})
	}
}

// boundedStore is a store that asks for its own call bound.
type boundedStore struct {
	idemhook.Store
	bound time.Duration
}

func (s boundedStore) StoreTimeout() time.Duration { return s.bound }

// TestStoreTimeoutDefault: Options.StoreTimeout when set; otherwise the
// store's StoreTimeout() when it has one (sqlitestore's is its busy
// timeout); otherwise DefaultStoreTimeout.
func TestStoreTimeoutDefault(t *testing.T) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for _, tt := range []struct {
		name  string
		store idemhook.Store
		opt   time.Duration
		want  time.Duration
	}{
		{"plain store", mem, 0, idemhook.DefaultStoreTimeout},
		{"store with its own bound", boundedStore{mem, 7 * time.Second}, 0, 7 * time.Second},
		{"option over the store's bound", boundedStore{mem, 7 * time.Second}, time.Second, time.Second},
		{"store's bound of zero", boundedStore{mem, 0}, 0, idemhook.DefaultStoreTimeout},
	} {
		mw, err := idemhook.New(tt.store, idemhook.Options{StoreTimeout: tt.opt})
		if err != nil {
			t.Fatal(err)
		}
		if got := mw.StoreTimeout(); got != tt.want {
			t.Errorf("%s: StoreTimeout() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
