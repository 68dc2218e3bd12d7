package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// frozenStore is a store as a frozen process uses it: while frozen is set,
// the lease renewals (Extend) of its deliveries never reach the store, so
// their claims lapse one lease after the last renewal, as those of a
// process stopped with SIGSTOP.
type frozenStore struct {
	idemhook.Store
	frozen atomic.Bool
}

func (f *frozenStore) Extend(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) error {
	if f.frozen.Load() {
		return nil
	}
	return f.Store.Extend(ctx, key, claim, lease)
}

// fencingFrozenStore is a frozenStore over a FencingStore: its claims keep
// the store's fences.
type fencingFrozenStore struct {
	*frozenStore
	fs idemhook.FencingStore
}

func (f fencingFrozenStore) ClaimFenced(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, uint64, error) {
	return f.fs.ClaimFenced(ctx, key, claim, lease)
}

// TestFencesIncreaseOnEveryStore runs two middlewares on one store, as two
// gateways would, and gives one event's claims to them in turn: A's
// delivery fails (its claim is released), A's next one is held in its
// handler while A is frozen (its renewals stop), and B's takes the event
// over once that lease lapses. The three fences increase; A's late answer
// is not stored, and a re-delivery to A replays B's.
func TestFencesIncreaseOnEveryStore(t *testing.T) {
	const lease = 500 * time.Millisecond
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.new(t)
			a := &frozenStore{Store: store}
			var storeA idemhook.Store = a
			if fs, ok := store.(idemhook.FencingStore); ok {
				storeA = fencingFrozenStore{a, fs}
			}
			var (
				fences  = make(chan uint64, 10)
				started = make(chan struct{})
				resume  = make(chan struct{})
			)
			handler := func(name string) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					d, _ := idemhook.DeliveryFromContext(r.Context())
					fences <- d.Fence()
					switch r.Header.Get("X-Do") {
					case "fail":
						http.Error(w, "busy", http.StatusServiceUnavailable)
						return
					case "hold":
						close(started)
						<-resume
					}
					io.WriteString(w, name) //nolint:errcheck
				})
			}
			serve := func(s idemhook.Store, name string) http.Handler {
				// A long StoreTimeout: on a loaded machine a SQLite write may
				// pass the 250ms default, and a claim that fails open is not
				// what this test looks at.
				mw, err := idemhook.New(s, idemhook.Options{Lease: lease, StoreTimeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				route, err := mw.Route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return route(handler(name))
			}
			hA, hB := serve(storeA, "A"), serve(store, "B")
			evt := body(fmt.Sprintf("fence-%s-%d", st.name, time.Now().UnixNano()))
			send := func(h http.Handler, do string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(evt))
				req.Header.Set("X-Do", do)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			if rec := send(hA, "fail"); rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("A's failing delivery: %d %q", rec.Code, rec.Body)
			}
			released := <-fences
			a.frozen.Store(true)
			stale := make(chan *httptest.ResponseRecorder, 1)
			go func() { stale <- send(hA, "hold") }()
			<-started
			held := <-fences
			// B's delivery waits (in_flight: wait) until A's claim lapses,
			// then takes the event over.
			if rec := send(hB, ""); rec.Code != http.StatusOK || rec.Body.String() != "B" {
				t.Fatalf("B's delivery: %d %q; want it to take the event over once A's lease lapsed", rec.Code, rec.Body)
			}
			took := <-fences
			close(resume)
			if rec := <-stale; rec.Body.String() != "A" {
				t.Fatalf("A's held delivery answered %d %q", rec.Code, rec.Body)
			}
			if rec := send(hA, ""); rec.Body.String() != "B" || rec.Header().Get(idemhook.ReplayedHeader) != "true" {
				t.Fatalf("re-delivery to A: %d %q; want B's answer replayed (A's late answer must not be stored)", rec.Code, rec.Body)
			}
			if len(fences) != 0 {
				t.Fatal("a handler ran for the replay")
			}
			if !(0 < released && released < held && held < took) {
				t.Fatalf("fences: A's released claim %d, A's held claim %d, B's take-over %d; want them increasing from above 0", released, held, took)
			}
		})
	}
}
