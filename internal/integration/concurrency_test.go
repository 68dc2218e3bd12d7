package integration

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/sqlitestore"
)

// stores lists every store, each fresh for one test.
var stores = []struct {
	name string
	new  func(t *testing.T) idemhook.Store
}{
	{"memory", func(t *testing.T) idemhook.Store {
		st, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"sqlite", func(t *testing.T) idemhook.Store {
		db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "idemhook.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		st, err := sqlitestore.New(db, sqlitestore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"redis", func(t *testing.T) idemhook.Store {
		st, _ := newRedisStore(t, redistest.URL(t))
		return st
	}},
	{"postgres", func(t *testing.T) idemhook.Store {
		pool := pgtest.Pool(t)
		st, err := pgstore.New(t.Context(), pool, pgstore.Config{Table: pgtest.Table(t, pool, "idemhook_concurrency")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

// TestConcurrentDuplicatesOnEveryStore sends 100 copies of one event at once
// through a real HTTP server. The handler is held until all 100 have made
// their claim, so that every duplicate meets a running first delivery.
// wait and reject must execute the handler exactly once. wait gives all 100
// the same response. proceed (the NestJS guard's policy) runs the handler
// for every copy that met the running delivery.
func TestConcurrentDuplicatesOnEveryStore(t *testing.T) {
	const n = 100
	for _, st := range stores {
		for _, policy := range []idemhook.InFlightPolicy{idemhook.InFlightWait, idemhook.InFlightReject, idemhook.InFlightProceed} {
			t.Run(st.name+"/"+string(policy), func(t *testing.T) {
				store := st.new(t)
				var claims atomic.Int64
				allClaimed := make(chan struct{})
				var mu sync.Mutex
				outcomes := map[string]int{}
				mw, err := idemhook.New(store, idemhook.Options{
					// 100 claims at once queue for PostgreSQL's few pool
					// connections. On a loaded machine that can pass the
					// 250ms default. A claim that fails open is not what
					// this test counts.
					StoreTimeout: 5 * time.Second,
					OnStoreCall: func(c idemhook.StoreCallInfo) {
						if c.Op == "claim" && claims.Add(1) == n {
							close(allClaimed)
						}
					},
					OnDelivery: func(d idemhook.DeliveryInfo) {
						mu.Lock()
						outcomes[string(d.Outcome)+errSuffix(d.Err)]++
						mu.Unlock()
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				route, err := mw.Route(idemhook.Route{Source: "stone", InFlight: policy, WaitTimeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int64
				// Every execution is held until all n copies have claimed, so
				// that none of them can find the first one completed (under
				// proceed, a duplicate may reach the handler before the claim's
				// owner does).
				srv := httptest.NewServer(route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					run := runs.Add(1)
					select {
					case <-allClaimed:
					case <-time.After(30 * time.Second):
						t.Error("not every duplicate claimed within 30s")
					}
					fmt.Fprintf(w, "run %d", run)
				})))
				defer srv.Close()

				evt := body(fmt.Sprintf("concurrent-%s-%d", policy, time.Now().UnixNano()))
				codes := make([]int, n)
				bodies := make([]string, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(evt))
						if err != nil {
							t.Error(err)
							return
						}
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						codes[i], bodies[i] = resp.StatusCode, string(b)
					})
				}
				wg.Wait()

				mu.Lock()
				t.Logf("outcomes: %v", outcomes)
				mu.Unlock()
				switch policy {
				case idemhook.InFlightWait:
					if got := runs.Load(); got != 1 {
						t.Fatalf("handler ran %d times, want 1", got)
					}
					for i := range n {
						if codes[i] != 200 || bodies[i] != "run 1" {
							t.Fatalf("response %d: %d %q, want every caller to get 200 \"run 1\"", i, codes[i], bodies[i])
						}
					}
				case idemhook.InFlightReject:
					if got := runs.Load(); got != 1 {
						t.Fatalf("handler ran %d times, want 1", got)
					}
					var ok, conflict int
					for i := range n {
						switch {
						case codes[i] == 200 && bodies[i] == "run 1":
							ok++
						case codes[i] == http.StatusConflict:
							conflict++
						default:
							t.Fatalf("response %d: %d %q", i, codes[i], bodies[i])
						}
					}
					if ok == 0 || ok+conflict != n {
						t.Fatalf("%d answered 200, %d 409", ok, conflict)
					}
				case idemhook.InFlightProceed:
					// Every copy claimed while the first was held, so every
					// copy met a pending claim and ran the handler itself.
					if got := runs.Load(); got != n {
						t.Fatalf("handler ran %d times, want %d (proceed runs duplicates of a running delivery)", got, n)
					}
				}
			})
		}
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}
