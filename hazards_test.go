package idemhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

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

// net/http panics on a status outside 100-999 when the handler calls
// WriteHeader. The capture must do the same, inside the handler, so that the
// claim is released; before, the bad status was stored first, the panic came
// when the buffered response was sent, and the stored record (status 42)
// was "corrupt" to every retry for the whole TTL.
func TestInvalidStatusPanicsInTheHandlerAndIsReleased(t *testing.T) {
	for _, code := range []int{0, 42, 1000} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			var calls atomic.Int64
			route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.WriteHeader(code)
					return
				}
				io.WriteString(w, "ok") //nolint:errcheck
			}))
			func() {
				defer func() {
					p := recover()
					if p == nil || !strings.Contains(fmt.Sprint(p), "invalid WriteHeader code") {
						t.Fatalf("recovered %v, want net/http's invalid WriteHeader code panic", p)
					}
				}()
				send(route, `{"id":1}`)
			}()
			if r := send(route, `{"id":1}`); r.Code != 200 || r.Body.String() != "ok" {
				t.Fatalf("retry: %d %q", r.Code, r.Body)
			}
			if strings.Contains(e.logs.String(), "parse error") || strings.Contains(e.logs.String(), "cache write failed") {
				t.Fatalf("unexpected WARN:\n%s", e.logs)
			}
			wantOutcomes(t, e, idemhook.OutcomeFailedReleased, idemhook.OutcomeProcessed)
		})
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

// A handler that hijacks the connection (through http.ResponseController)
// answers on the raw connection: the middleware never sees that answer, so
// it must neither write after it nor store a response that was never sent.
// Before, it stored "200, empty body" and replayed that to every retry.
func TestHijackingHandlerReleasesTheClaim(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var calls atomic.Int64
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked") //nolint:errcheck
			brw.Flush()                                                                                        //nolint:errcheck
			return
		}
		io.WriteString(w, "second") //nolint:errcheck
	}))
	srv := httptest.NewServer(route)
	t.Cleanup(srv.Close)
	post := func() (int, string, string) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"id":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get(idemhook.ReplayedHeader)
	}
	if code, body, _ := post(); code != 202 || body != "hijacked" {
		t.Fatalf("first: %d %q", code, body)
	}
	// The hijacked response reaches the client before the handler returns
	// and the claim is released (nothing can order them), and
	// httptest.Server.Close doesn't wait for hijacked connections: wait for
	// the first delivery's outcome, which comes after the release.
	deadline := time.Now().Add(10 * time.Second)
	for len(e.outcomes()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hijacked delivery reported no outcome within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if got := e.outcomes(); got[0] != idemhook.OutcomeFailedReleased {
		t.Fatalf("outcome of the hijacked delivery: %v, want failed_released", got[0])
	}
	if code, body, replayed := post(); code != 200 || body != "second" || replayed != "" {
		t.Fatalf("retry: %d %q replayed=%q: want the handler to run afresh", code, body, replayed)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	if got := e.outcomes(); len(got) != 2 || got[1] != idemhook.OutcomeProcessed {
		t.Fatalf("outcomes %v, want [failed_released processed]", got)
	}
}

// Where the connection can't be hijacked (here a ResponseRecorder, in
// production HTTP/2) the attempt fails with http.ErrNotSupported and the
// response is stored and replayed as usual.
func TestFailedHijackChangesNothing(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "a") //nolint:errcheck
		if _, _, err := http.NewResponseController(w).Hijack(); !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("hijack: %v, want http.ErrNotSupported", err)
		}
		io.WriteString(w, "b") //nolint:errcheck
		h.n.Add(1)
	}))
	for i := range 2 {
		if r := send(route, `{"id":1}`); r.Code != http.StatusCreated || r.Body.String() != "ab" {
			t.Fatalf("delivery %d: %d %q", i, r.Code, r.Body)
		}
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed)
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

// An informational status written after the final one is superfluous and
// net/http drops it. While the final status is only buffered, the capture
// passed such a 1xx straight to the client, which then saw a 103 before
// the answer that, as far as the handler knew, had already started.
func TestInformationalAfterTheFinalStatusIsDropped(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints) // before the final status: sent
		w.WriteHeader(http.StatusAccepted)
		w.WriteHeader(http.StatusEarlyHints) // after it: dropped
		io.WriteString(w, "ok")              //nolint:errcheck
	}))
	srv := httptest.NewServer(route)
	t.Cleanup(srv.Close)
	var got []int
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			got = append(got, code)
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || fmt.Sprint(got) != "[103]" {
		t.Fatalf("status %d, informational responses %v; want 202 after one 103", resp.StatusCode, got)
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
