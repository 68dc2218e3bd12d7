package idemhook_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/storetest"
)

// The tests below play the handler's transaction with memstore: a write
// that calls Complete is a transaction that committed, a write that stores
// nothing one that rolled back. pgstore's tests run the same flows in real
// PostgreSQL transactions.

func txRoute(t *testing.T, e *env, h http.HandlerFunc) http.Handler {
	t.Helper()
	route, err := e.mw.Route(idemhook.Route{Source: "orders", MaxStoredBodyBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux() // a fixed route: unscoped keys
	mux.Handle("POST /orders", route(h))
	return mux
}

func post(h http.Handler, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body)))
	return rec
}

func (e *env) lastOutcome() idemhook.DeliveryInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.deliveries[len(e.deliveries)-1]
}

func TestDeliveryCommitted(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var runs atomic.Int32
	h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		d, ok := idemhook.DeliveryFromContext(r.Context())
		if !ok {
			t.Error("no Delivery in the context of an owned delivery")
			return
		}
		if idemhook.DeliveryStore(d) != e.store || !strings.HasPrefix(d.StoreKey(), "idem:orders:sha256:") {
			t.Errorf("Delivery: store %v key %q", idemhook.DeliveryStore(d), d.StoreKey())
		}
		// A replay header from the ResponseWriter is stored, one the route
		// doesn't store is not, and so is not sent either.
		w.Header().Set("Content-Language", "pt-BR")
		w.Header().Set("X-Not-Replayed", "1")
		hdr := http.Header{"content-type": {"application/json"}}
		err := idemhook.CompleteDelivery(d, http.StatusCreated, hdr, []byte(`{"order":1}`), func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
			if key != d.StoreKey() || ttl != idemhook.DefaultTTL || claim.State != idemhook.StatePending || claim.Token == "" {
				t.Errorf("write(key %q, claim %+v, ttl %v), want the delivery's key, its pending claim and the route's TTL", key, claim, ttl)
			}
			want := http.Header{"Content-Type": {"application/json"}, "Content-Language": {"pt-BR"}}
			if !reflect.DeepEqual(done.Header, want) {
				t.Errorf("stored header %v, want %v", done.Header, want)
			}
			return e.store.Complete(context.Background(), key, claim, done, ttl)
		})
		if err != nil {
			t.Errorf("CompleteDelivery: %v", err)
		}
		// What the handler writes afterwards is discarded.
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte("ignored")) //nolint:errcheck
	})
	first := post(h, `{"id":"evt_1"}`)
	wantHeader := http.Header{"Content-Type": {"application/json"}, "Content-Language": {"pt-BR"}, "Content-Length": {"11"}}
	if first.Code != http.StatusCreated || first.Body.String() != `{"order":1}` || !reflect.DeepEqual(first.Header(), wantHeader) {
		t.Fatalf("first answer: %d %q %v; want the committed 201 with %v", first.Code, first.Body, first.Header(), wantHeader)
	}
	if got := e.lastOutcome(); got.Outcome != idemhook.OutcomeProcessed || got.Status != http.StatusCreated || got.Err != nil {
		t.Fatalf("first delivery: %+v", got)
	}
	// After the commit the middleware wrote nothing more: the only calls
	// are the claim and the one read that saw the commit.
	e.mu.Lock()
	var ops []string
	for _, c := range e.storeCalls {
		ops = append(ops, c.Op)
	}
	e.mu.Unlock()
	if strings.Join(ops, ",") != "claim,get" {
		t.Fatalf("store calls %v, want claim,get", ops)
	}
	again := post(h, `{"id":"evt_1"}`)
	wantHeader.Set(idemhook.ReplayedHeader, "true")
	if again.Code != http.StatusCreated || again.Body.String() != `{"order":1}` || !reflect.DeepEqual(again.Header(), wantHeader) {
		t.Fatalf("re-delivery: %d %q %v; want the first answer replayed, with %v", again.Code, again.Body, again.Header(), wantHeader)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
}

// A committed answer over MaxStoredBodyBytes (16 here) is sent in full and
// reported as stored without its body, as on the middleware's own path.
func TestDeliveryCommittedOmittedBody(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	big := strings.Repeat("x", 40)
	h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
		d, _ := idemhook.DeliveryFromContext(r.Context())
		err := idemhook.CompleteDelivery(d, http.StatusOK, nil, []byte(big), func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
			return e.store.Complete(context.Background(), key, claim, done, ttl)
		})
		if err != nil {
			t.Errorf("CompleteDelivery: %v", err)
		}
	})
	if first := post(h, `{"id":"evt_big"}`); first.Body.String() != big {
		t.Fatalf("first answer: %d %q, want the whole body", first.Code, first.Body)
	}
	if got := e.lastOutcome(); got.Outcome != idemhook.OutcomeProcessed || !got.BodyOmitted {
		t.Errorf("first delivery: outcome %s, BodyOmitted %v; want processed, true", got.Outcome, got.BodyOmitted)
	}
	again := post(h, `{"id":"evt_big"}`)
	if again.Body.Len() != 0 || again.Header().Get(idemhook.BodyOmittedHeader) != "true" {
		t.Errorf("replay: %q %v, want an empty body and %s", again.Body, again.Header(), idemhook.BodyOmittedHeader)
	}
	if !strings.Contains(e.logs.String(), "over MaxStoredBodyBytes was sent but not stored") {
		t.Errorf("no WARN for the omitted body:\n%s", e.logs)
	}
}

func TestDeliveryRolledBack(t *testing.T) {
	for _, tt := range []struct {
		name       string
		status     int // what the handler answers after the rollback; 0: nothing
		wantStatus int
	}{
		{"handler answers 500", http.StatusInternalServerError, http.StatusInternalServerError},
		{"handler answers 503", http.StatusServiceUnavailable, http.StatusServiceUnavailable},
		{"handler answers 200", http.StatusOK, http.StatusInternalServerError},
		{"handler answers nothing", 0, http.StatusInternalServerError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			var runs atomic.Int32
			h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				d, _ := idemhook.DeliveryFromContext(r.Context())
				err := idemhook.CompleteDelivery(d, http.StatusOK, nil, []byte("ok"), func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
					if n == 1 {
						return nil // written, then the transaction rolls back
					}
					return e.store.Complete(context.Background(), key, claim, done, ttl)
				})
				if err != nil {
					t.Errorf("CompleteDelivery: %v", err)
				}
				if n == 1 && tt.status != 0 {
					w.Header().Set("Content-Encoding", "gzip")
					w.WriteHeader(tt.status)
				}
			})
			first := post(h, `{"id":"evt_2"}`)
			if first.Code != tt.wantStatus {
				t.Fatalf("after a rollback: status %d, want %d", first.Code, tt.wantStatus)
			}
			if replaced := tt.status != tt.wantStatus; replaced && first.Header().Get("Content-Encoding") != "" {
				t.Fatalf("the problem in place of the handler's %d carries its Content-Encoding: %v", tt.status, first.Header())
			}
			if got := e.lastOutcome(); got.Outcome != idemhook.OutcomeFailedReleased || got.Err == nil {
				t.Fatalf("after a rollback: %+v", got)
			}
			if rec, _ := e.store.Get(t.Context(), e.lastOutcome().StoreKey); rec != nil {
				t.Fatalf("the claim was not released: %+v", rec)
			}
			// The retry runs afresh and commits.
			if again := post(h, `{"id":"evt_2"}`); again.Code != http.StatusOK || again.Body.String() != "ok" || again.Header().Get(idemhook.ReplayedHeader) != "" {
				t.Fatalf("retry: %d %q", again.Code, again.Body)
			}
			if runs.Load() != 2 {
				t.Fatalf("handler ran %d times, want 2", runs.Load())
			}
		})
	}
}

// failingGets is memstore whose Get fails on demand: the middleware then
// can't tell whether the handler's transaction committed.
type failingGets struct {
	*memstore.Store
	fail atomic.Bool
}

func (f *failingGets) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	if f.fail.Load() {
		return nil, errors.New("connection refused")
	}
	return f.Store.Get(ctx, key)
}

func TestDeliveryCommitUnknown(t *testing.T) {
	clk := newClock()
	ms, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	st := &failingGets{Store: ms}
	e := newEnv(t, st, clk, idemhook.Options{})
	h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
		d, _ := idemhook.DeliveryFromContext(r.Context())
		err := idemhook.CompleteDelivery(d, http.StatusOK, nil, []byte("committed"), func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
			return ms.Complete(context.Background(), key, claim, done, ttl)
		})
		if err != nil {
			t.Errorf("CompleteDelivery: %v", err)
		}
		w.Header().Set("Content-Encoding", "gzip")
		st.fail.Store(true)
	})
	first := post(h, `{"id":"evt_3"}`)
	if first.Code != http.StatusServiceUnavailable || first.Header().Get("Retry-After") == "" || first.Header().Get("Content-Encoding") != "" {
		t.Fatalf("commit unknown: %d %v; want 503 with Retry-After and none of the handler's headers", first.Code, first.Header())
	}
	if got := e.lastOutcome(); got.Outcome != idemhook.OutcomeStoreErrorClosed || got.Err == nil {
		t.Fatalf("commit unknown: %+v", got)
	}
	st.fail.Store(false)
	if again := post(h, `{"id":"evt_3"}`); again.Code != http.StatusOK || again.Body.String() != "committed" || again.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q; want the committed response replayed", again.Code, again.Body)
	}
}

// A writer whose transaction committed says so (Committed): the middleware
// answers the committed record without reading the key back, so a store
// whose reads fail still answers what happened. Committed fails before a
// completion is written and after the handler returned.
func TestDeliveryCommittedNeedsNoReadBack(t *testing.T) {
	clk := newClock()
	ms, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	st := &failingGets{Store: ms}
	e := newEnv(t, st, clk, idemhook.Options{})
	var kept *idemhook.Delivery
	h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
		d, _ := idemhook.DeliveryFromContext(r.Context())
		kept = d
		if err := idemhook.DeliveryCommitted(d); err == nil || !strings.Contains(err.Error(), "no completion has been written") {
			t.Errorf("DeliveryCommitted before CompleteDelivery: %v", err)
		}
		err := idemhook.CompleteDelivery(d, http.StatusOK, nil, []byte("committed"), func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
			return ms.Complete(context.Background(), key, claim, done, ttl)
		})
		if err != nil {
			t.Errorf("CompleteDelivery: %v", err)
		}
		if err := idemhook.DeliveryCommitted(d); err != nil {
			t.Errorf("Committed: %v", err)
		}
		st.fail.Store(true)
	})
	first := post(h, `{"id":"evt_c"}`)
	if first.Code != http.StatusOK || first.Body.String() != "committed" {
		t.Fatalf("committed, reads failing: %d %q; want 200 with the committed answer", first.Code, first.Body)
	}
	if got := e.lastOutcome(); got.Outcome != idemhook.OutcomeProcessed || got.Err != nil {
		t.Fatalf("outcome %+v; want processed", got)
	}
	if err := idemhook.DeliveryCommitted(kept); err == nil || !strings.Contains(err.Error(), "handler has returned") {
		t.Fatalf("Committed after the handler returned: %v", err)
	}
	st.fail.Store(false)
	if again := post(h, `{"id":"evt_c"}`); again.Code != http.StatusOK || again.Body.String() != "committed" || again.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q; want the committed response replayed", again.Code, again.Body)
	}
}

func TestDeliveryCompleteWithErrors(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var kept *idemhook.Delivery
	h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
		d, _ := idemhook.DeliveryFromContext(r.Context())
		kept = d
		write := func(key string, claim, done *idemhook.Record, ttl time.Duration) error { return nil }
		for _, status := range []int{500, 503, 408, 429, 99, 1000, 100} {
			if err := idemhook.CompleteDelivery(d, status, nil, nil, write); err == nil {
				t.Errorf("CompleteDelivery(%d): no error", status)
			}
		}
		if err := idemhook.CompleteDelivery(d, 200, nil, nil, nil); err == nil {
			t.Error("CompleteDelivery(nil write): no error")
		}
		for _, tt := range []struct {
			give http.Header
			want string
		}{
			{http.Header{"x-order-id": {"1"}}, `header X-Order-Id: route "orders" does not store it, so a replay could not carry it: add it to Route.ReplayHeaders`},
			{http.Header{"Set-Cookie": {"s=1"}}, "header Set-Cookie: it is never stored or replayed"},
			{http.Header{"Content-Length": {"3"}}, "header Content-Length: it is never stored or replayed"},
		} {
			if err := idemhook.CompleteDelivery(d, 200, tt.give, nil, write); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CompleteDelivery(header %v): %v, want %q", tt.give, err, tt.want)
			}
		}
		lost := idemhook.CompleteDelivery(d, 200, nil, nil, func(string, *idemhook.Record, *idemhook.Record, time.Duration) error {
			return idemhook.ErrNotOwner
		})
		if !errors.Is(lost, idemhook.ErrNotOwner) {
			t.Errorf("a failed write: got %v, want it returned as is", lost)
		}
		w.WriteHeader(http.StatusOK)
	})
	// Nothing was written in a transaction: the middleware stores the
	// handler's answer as usual.
	if got := post(h, `{"id":"evt_4"}`); got.Code != http.StatusOK {
		t.Fatalf("status %d", got.Code)
	}
	if got := e.lastOutcome(); got.Outcome != idemhook.OutcomeProcessed {
		t.Fatalf("outcome %v", got.Outcome)
	}
	err := idemhook.CompleteDelivery(kept, 200, nil, nil, func(string, *idemhook.Record, *idemhook.Record, time.Duration) error {
		t.Error("write called after the handler returned")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "handler has returned") {
		t.Fatalf("CompleteDelivery after the handler returned: %v", err)
	}
}

// TestDeliveryOnlyWhenClaimed: a replay and a pass-through carry no Delivery.
func TestDeliveryOnlyWhenClaimed(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	route, err := e.mw.Route(idemhook.Route{Source: "orders", InFlight: idemhook.InFlightProceed})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan bool, 2)
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := idemhook.DeliveryFromContext(r.Context())
		entered <- ok
		if ok {
			<-release
		}
	}))
	done := make(chan struct{})
	go func() { post(h, `{"id":"evt_5"}`); close(done) }()
	if !<-entered {
		t.Fatal("the first delivery has no Delivery")
	}
	post(h, `{"id":"evt_5"}`) // in flight: proceeds without the claim
	if <-entered {
		t.Fatal("an in-flight duplicate that proceeded has a Delivery")
	}
	close(release)
	<-done
	if _, ok := idemhook.DeliveryFromContext(context.Background()); ok {
		t.Fatal("a bare context has a Delivery")
	}
}

// TestDeliveryRetriedTransaction: a handler whose first transaction rolled
// back after CompleteWith tries again in a new one. The middleware sends the
// response of the one that committed.
func TestDeliveryRetriedTransaction(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
		d, _ := idemhook.DeliveryFromContext(r.Context())
		rolledBack := func(string, *idemhook.Record, *idemhook.Record, time.Duration) error { return nil }
		if err := idemhook.CompleteDelivery(d, http.StatusOK, nil, []byte("attempt 1"), rolledBack); err != nil {
			t.Errorf("attempt 1: %v", err)
		}
		err := idemhook.CompleteDelivery(d, http.StatusCreated, nil, []byte("attempt 2"), func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
			return e.store.Complete(context.Background(), key, claim, done, ttl)
		})
		if err != nil {
			t.Errorf("attempt 2: %v", err)
		}
		// A third attempt after the commit finds the claim gone.
		err = idemhook.CompleteDelivery(d, http.StatusOK, nil, []byte("attempt 3"), func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
			return e.store.Complete(context.Background(), key, claim, done, ttl)
		})
		if !errors.Is(err, idemhook.ErrNotOwner) {
			t.Errorf("attempt 3 after a commit: %v, want ErrNotOwner", err)
		}
	})
	if got := post(h, `{"id":"evt_6"}`); got.Code != http.StatusCreated || got.Body.String() != "attempt 2" {
		t.Fatalf("answer %d %q, want the committed attempt 2", got.Code, got.Body)
	}
	if again := post(h, `{"id":"evt_6"}`); again.Body.String() != "attempt 2" || again.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("re-delivery %d %q", again.Code, again.Body)
	}
}

// Delivery.Body is the body the handler reads, the same bytes, without a
// copy, and stays what it was after the handler read the request's.
func TestDeliveryBody(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	const body = `{"id":"evt_1","amount":100}`
	h := txRoute(t, e, func(w http.ResponseWriter, r *http.Request) {
		d, ok := idemhook.DeliveryFromContext(r.Context())
		if !ok {
			t.Error("no Delivery")
			return
		}
		read, err := io.ReadAll(r.Body)
		if err != nil || string(read) != body || string(d.Body()) != body {
			t.Errorf("read %q (%v), Body %q; want both %q", read, err, d.Body(), body)
		}
	})
	if rec := post(h, body); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
}

// Every claim of a key gets a larger fence than the claim before it: the
// retry of a failed delivery, and a delivery that takes the event over
// from one whose lease lapsed while its handler still ran. The stale one's
// answer is not stored; a replay runs no handler.
func TestDeliveryFence(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{Lease: time.Hour}) // renewed every 20 minutes: not during the test
	var (
		fences  = make(chan uint64, 10)
		started = make(chan struct{})
		resume  = make(chan struct{})
	)
	h := e.route(idemhook.Route{Source: "orders", InFlight: idemhook.InFlightReject}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := idemhook.DeliveryFromContext(r.Context())
		fences <- d.Fence()
		switch r.Header.Get("X-Do") {
		case "fail":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case "hold":
			close(started)
			<-resume
			io.WriteString(w, "stale") //nolint:errcheck
		default:
			io.WriteString(w, "fresh") //nolint:errcheck
		}
	}))
	send := func(do string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"id":"evt_fence"}`))
		req.Header.Set("X-Do", do)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := send("fail"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("failed delivery: %d", rec.Code)
	}
	failed := <-fences
	stale := make(chan *httptest.ResponseRecorder, 1)
	go func() { stale <- send("hold") }()
	<-started
	held := <-fences
	e.clock.Advance(2 * time.Hour) // the held delivery's lease lapses: it is frozen, as far as the store sees
	if rec := send(""); rec.Code != http.StatusOK || rec.Body.String() != "fresh" {
		t.Fatalf("delivery after the lease lapsed: %d %q; want it to take the event over", rec.Code, rec.Body)
	}
	took := <-fences
	close(resume)
	<-stale
	if rec := send(""); rec.Body.String() != "fresh" || rec.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("re-delivery: %d %q; want the answer of the take-over replayed", rec.Code, rec.Body)
	}
	if len(fences) != 0 {
		t.Fatalf("the handler ran for the replay")
	}
	if !(0 < failed && failed < held && held < took) {
		t.Fatalf("fences: failed delivery %d, held one %d, take-over %d; want them increasing from above 0", failed, held, took)
	}
	if got := e.outcomes(); !reflect.DeepEqual(got, []idemhook.Outcome{idemhook.OutcomeFailedReleased, idemhook.OutcomeProcessed, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed}) {
		// The held delivery reports processed, with the completion's
		// error: its claim was lost.
		t.Fatalf("outcomes %v", got)
	}
}

// fencingStore gives each stored claim the next of its own fences, as a
// store with a clock of its own (pgstore) does.
type fencingStore struct {
	idemhook.Store
	next uint64
}

func (s *fencingStore) ClaimFenced(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, uint64, error) {
	existing, err := s.Claim(ctx, key, claim, lease)
	if err != nil || existing != nil {
		return existing, 0, err
	}
	s.next += 10
	return nil, s.next, nil
}

// A delivery's fence is the store's when it is a FencingStore; with no
// claim (the store is down, the route fails open) there is none.
func TestDeliveryFenceOfTheStore(t *testing.T) {
	tests := []struct {
		name  string
		store func(t *testing.T) idemhook.Store
		want  []uint64 // the fences the handler sees, in order; 0: none
	}{
		{"store's fences", func(t *testing.T) idemhook.Store {
			st, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return &fencingStore{Store: st}
		}, []uint64{10, 20}},
		{"no claim", func(*testing.T) idemhook.Store {
			return storetest.Unreachable(errors.New("connection refused"))
		}, []uint64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := idemhook.New(tt.store(t), idemhook.Options{})
			if err != nil {
				t.Fatal(err)
			}
			route, err := mw.Route(idemhook.Route{Source: "orders", Scope: unscoped})
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				d, _ := idemhook.DeliveryFromContext(r.Context())
				got = append(got, d.Fence())
				w.WriteHeader(http.StatusInternalServerError) // released: the next delivery claims again
			}))
			for range 2 {
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"id":"evt_1"}`)))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("fences %v; want %v", got, tt.want)
			}
		})
	}
}
