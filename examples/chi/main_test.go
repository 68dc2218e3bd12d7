package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/provider"
)

type answer struct {
	status   int
	body     string
	replayed bool
}

func send(t *testing.T, url, path, body string) answer {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get(idemhook.ReplayedHeader) == "true"}
}

// server runs the receiver with a handler that counts its executions per
// tenant.
func server(t *testing.T) (*httptest.Server, func(tenant string) int64) {
	t.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]*atomic.Int64{}
	count := func(tenant string) *atomic.Int64 {
		mu.Lock()
		defer mu.Unlock()
		if runs[tenant] == nil {
			runs[tenant] = &atomic.Int64{}
		}
		return runs[tenant]
	}
	r, err := newRouter(store, func(w http.ResponseWriter, r *http.Request) {
		tenant := chi.URLParam(r, "tenant")
		n := count(tenant).Add(1)
		fmt.Fprintf(w, `{"tenant":%q,"run":%d}`, tenant, n)
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, func(tenant string) int64 { return count(tenant).Load() }
}

// The same event delivered twice, once with a trailing slash (StripSlashes
// routes both), runs once; the same event for another tenant runs on its own.
func TestDeliveredTwiceRunsOncePerTenant(t *testing.T) {
	srv, runs := server(t)
	event := `{"id":"evt_1"}`
	tests := []struct {
		path string
		want answer
	}{
		{"/webhooks/acme/orders", answer{200, `{"tenant":"acme","run":1}`, false}},
		{"/webhooks/acme/orders/", answer{200, `{"tenant":"acme","run":1}`, true}},
		{"/webhooks/globex/orders", answer{200, `{"tenant":"globex","run":1}`, false}},
		{"/webhooks/globex/orders", answer{200, `{"tenant":"globex","run":1}`, true}},
	}
	for _, tt := range tests {
		if got := send(t, srv.URL, tt.path, event); got != tt.want {
			t.Errorf("POST %s = %+v, want %+v", tt.path, got, tt.want)
		}
	}
	for _, tenant := range []string{"acme", "globex"} {
		if n := runs(tenant); n != 1 {
			t.Errorf("handler ran %d times for %s, want 1", n, tenant)
		}
	}
}

func TestConcurrentCopiesRunOnce(t *testing.T) {
	srv, runs := server(t)
	const copies = 20
	var wg sync.WaitGroup
	answers := make([]answer, copies)
	for i := range copies {
		path := "/webhooks/acme/orders"
		if i%2 == 1 {
			path += "/" // half of them spelled with a trailing slash
		}
		wg.Go(func() { answers[i] = send(t, srv.URL, path, `{"id":"evt_2"}`) })
	}
	wg.Wait()
	if got := runs("acme"); got != 1 {
		t.Errorf("handler ran %d times for %d concurrent copies, want 1", got, copies)
	}
	replayed := 0
	for _, a := range answers {
		if a.status != 200 || a.body != `{"tenant":"acme","run":1}` {
			t.Errorf("answer %+v, want the first one's", a)
		}
		if a.replayed {
			replayed++
		}
	}
	if replayed != copies-1 {
		t.Errorf("%d replayed answers, want %d", replayed, copies-1)
	}
}

// A delivery re-sent on another spelling of its path is the same event on
// the same route, so it is replayed: with the Stripe preset, a captured
// signed payload can't be run again inside the signature's tolerance by
// adding a slash or percent-encoding a letter. chi matches a trailing slash
// only behind StripSlashes; it routes on the escaped path and hands its
// values over escaped.
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
			name: "chi",
			router: func(route http.Handler) http.Handler {
				r := chi.NewRouter()
				r.Handle("/t/{tenant}/orders", route)
				return r
			},
			paths:  []string{"/t/acme/orders", "/t/%61cme/orders"},
			globex: "/t/globex/orders",
		},
		{
			name: "chi behind StripSlashes",
			router: func(route http.Handler) http.Handler {
				r := chi.NewRouter()
				r.Use(middleware.StripSlashes)
				r.Handle("/t/{tenant}/orders", route)
				return r
			},
			paths:  []string{"/t/acme/orders", "/t/acme/orders/", "/t/%61cme/orders/"},
			globex: "/t/globex/orders/",
		},
		{
			name: "chi subrouter behind StripSlashes",
			router: func(route http.Handler) http.Handler {
				r := chi.NewRouter()
				r.Use(middleware.StripSlashes)
				r.Route("/t/{tenant}", func(r chi.Router) { r.Handle("/orders", route) })
				return r
			},
			paths:  []string{"/t/acme/orders/", "/t/acme/orders"},
			globex: "/t/globex/orders",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var scopes []string
			mw, err := idemhook.New(store, idemhook.Options{OnDelivery: func(d idemhook.DeliveryInfo) {
				mu.Lock()
				scopes = append(scopes, d.Scope)
				mu.Unlock()
			}})
			if err != nil {
				t.Fatal(err)
			}
			wrap, err := mw.Route(idemhook.Route{Source: "stripe", Preset: preset})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			srv := httptest.NewServer(tt.router(wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
			}))))
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
			for i, path := range tt.paths {
				status, replayed := post(path)
				if status != http.StatusOK || replayed != (i > 0) {
					t.Errorf("POST %s: status %d, replayed %v; want 200, replayed %v", path, status, replayed, i > 0)
				}
			}
			mu.Lock()
			for i, s := range scopes {
				if s != scopes[0] {
					t.Errorf("POST %s: scope %q, want %q (that of %s)", tt.paths[i], s, scopes[0], tt.paths[0])
				}
			}
			mu.Unlock()
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times for tenant acme's event, want 1", n)
			}
			if status, replayed := post(tt.globex); status != http.StatusOK || replayed {
				t.Errorf("POST %s: status %d, replayed %v; want 200 and a run of its own", tt.globex, status, replayed)
			}
			if n := runs.Load(); n != 2 {
				t.Fatalf("handler ran %d times in all, want 2 (once per tenant)", n)
			}
		})
	}
}

// A backend that compresses (chi's Compress inside the route) is replayed
// with its Content-Encoding: Go's client, which asks for gzip, decodes the
// replay to the same bytes as the first answer.
func TestCompressedResponseIsReplayedAsSent(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		t.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "gz", ReplayHeaders: []string{"X-Request-Cost"}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	big := strings.Repeat(`{"item":"compressible"},`, 200)
	r := chi.NewRouter()
	r.With(route, middleware.Compress(5)).Post("/webhook", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Cost", "7")
		fmt.Fprintf(w, `{"items":[%s{}]}`, big)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	get := func() (string, *http.Response) {
		resp, err := http.Post(srv.URL+"/webhook", "application/json", strings.NewReader(`{"id":"evt_gz"}`)) // Go's default client
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), resp
	}
	first, fr := get()
	replay, rr := get()
	if !fr.Uncompressed {
		t.Fatal("the first answer was not gzip-encoded: the test proves nothing")
	}
	if rr.Header.Get(idemhook.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf("second delivery not replayed (handler ran %d times)", runs.Load())
	}
	if replay != first || !rr.Uncompressed {
		t.Fatalf("decoded replay (gzip: %v) differs from the decoded first answer:\nfirst  %.80q\nreplay %.80q", rr.Uncompressed, first, replay)
	}
	if got := rr.Header.Get("X-Request-Cost"); got != "7" {
		t.Errorf("ReplayHeaders entry not replayed next to the defaults: X-Request-Cost %q", got)
	}
	if got := rr.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q on the replay", got)
	}
}

// A chi route with a path parameter: the default scope keys each tenant's
// deliveries apart (chi records the route's pattern in Request.Pattern, and
// a pattern with a wildcard scopes by its values), so one tenant's answer
// is never replayed to another, even for the same Idempotency-Key.
func Example_scope() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	mw, err := idemhook.New(store, idemhook.Options{OnDelivery: func(d idemhook.DeliveryInfo) {
		fmt.Println(d.Outcome, d.StoreKey)
	}})
	if err != nil {
		panic(err)
	}
	orders, err := mw.Route(idemhook.Route{Source: "orders"}) // Scope nil: idemhook.DefaultScope
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.With(orders).Post("/webhooks/orders/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "order for %s", chi.URLParam(r, "tenant"))
	})

	for _, tenant := range []string{"acme", "globex", "acme"} {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/orders/"+tenant, strings.NewReader(`{"total":10}`))
		req.Header.Set("Idempotency-Key", "o-1")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(" ->", rec.Body.String())
	}
	// Output:
	// processed idem:orders@/webhooks/orders/acme:o-1
	//  -> order for acme
	// processed idem:orders@/webhooks/orders/globex:o-1
	//  -> order for globex
	// replayed idem:orders@/webhooks/orders/acme:o-1
	//  -> order for acme
}
