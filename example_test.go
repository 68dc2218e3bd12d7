package idemhook_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// A Stone-style route keyed on the body hash: the handler runs once, the
// re-delivery gets the first response back.
func ExampleNew() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		panic(err)
	}
	stone, err := mw.Route(idemhook.Route{Source: "stone"}) // TTL 24h, header idempotency-key
	if err != nil {
		panic(err)
	}
	runs := 0
	handler := stone(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"processed":%d}`, runs)
	}))

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(`{"id":"evt_1","type":"payment.succeeded"}`))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Body.String(), "replayed:", rec.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("handler runs:", runs)
	// Output:
	// 200 {"processed":1} replayed: false
	// 200 {"processed":1} replayed: true
	// handler runs: 1
}

// A route that reads its key from a header, refuses duplicates of a delivery
// still running, and fails closed when the store is down.
func ExampleMiddleware_Route() {
	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	billing, err := mw.Route(idemhook.Route{
		Source:       "billing",
		Header:       "Idempotency-Key",
		InFlight:     idemhook.InFlightReject,
		OnStoreError: idemhook.StoreErrorClosed,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/billing", billing(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "charged\n")
	})))

	send := func(key, body string) {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/billing", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Printf("%d %s", rec.Code, rec.Body.String())
	}
	send("order-1", `{"amount":100}`)
	send("order-1", `{"amount":100}`)
	send("order-1", `{"amount":999}`) // same key, another body
	// Output:
	// 200 charged
	// 200 charged
	// 422 {"type":"about:blank","title":"Idempotency key reused","status":422,"detail":"this idempotency key was already used for a request with a different body"}
}

// A custom preset: the key comes from a header the provider signs, and a
// shared token is checked before anything is claimed.
func ExamplePreset() {
	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	acme := &idemhook.Preset{
		Name: "acme",
		Verify: func(r *http.Request, body []byte) error {
			if r.Header.Get("X-Acme-Token") != "s3cret" { // use subtle.ConstantTimeCompare in real code
				return fmt.Errorf("X-Acme-Token does not match")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return r.Header.Get("X-Acme-Event-Id"), nil // "" falls back to the body hash
		},
	}
	route, _ := mw.Route(idemhook.Route{Source: "acme", Preset: acme})
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))

	for _, token := range []string{"guess", "s3cret", "s3cret"} {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/acme", strings.NewReader(`{}`))
		req.Header.Set("X-Acme-Token", token)
		req.Header.Set("X-Acme-Event-Id", "ev_42")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, "replayed:", rec.Header().Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// 401 replayed: false
	// 200 replayed: false
	// 200 replayed: true
}

// A route with a path parameter: the default scope keys each tenant's
// deliveries apart (the router records the route's pattern in
// Request.Pattern, and a pattern with a wildcard scopes by its values), so
// one tenant's answer is never replayed to another, even for the same
// Idempotency-Key. chi does the same (examples/chi).
func ExampleRoute_scope() {
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
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/orders/{tenant}", orders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "order for %s", r.PathValue("tenant"))
	})))

	for _, path := range []string{"/webhooks/orders/acme", "/webhooks/orders/globex", "/webhooks/orders/%61cme"} {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"total":10}`))
		req.Header.Set("Idempotency-Key", "o-1")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
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

// A handler finds its delivery's claim in the request's context while it
// runs for a delivery that holds one, to complete it in its own database
// transaction (pgstore.Store.CompleteTx); a replay never reaches the handler.
func ExampleDeliveryFromContext() {
	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	route, _ := mw.Route(idemhook.Route{Source: "shop", Header: "Idempotency-Key"})
	h := http.NewServeMux()
	h.Handle("POST /webhooks/orders", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := idemhook.DeliveryFromContext(r.Context())
		fmt.Println("handler: claimed", ok, d.StoreKey())
		fmt.Fprint(w, "ok")
	})))
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/orders", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "order-42")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Body, "replayed:", rec.Header().Get(idemhook.ReplayedHeader) == "true")
	}
	// Output:
	// handler: claimed true idem:shop:order-42
	// 200 ok replayed: false
	// 200 ok replayed: true
}

// A backend that records the largest fence it has seen for each key, and
// refuses work whose fence is smaller, refuses the work of a stale holder
// of the claim: here the first delivery, which fails, then resumes after
// its retry took the event over. (A real backend keeps the fences in its
// database, and checks them in the transaction of its effect:
// docs/stores.md.)
func ExampleDelivery_Fence() {
	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	route, _ := mw.Route(idemhook.Route{Source: "shop", Header: "Idempotency-Key"})
	highest := map[string]uint64{} // the backend's: the largest fence seen per key
	var stale func()               // the first delivery's late commit
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := idemhook.DeliveryFromContext(r.Context())
		key, fence := d.StoreKey(), d.Fence()
		highest[key] = max(highest[key], fence)
		commit := func() string {
			if fence < highest[key] {
				return "refused: a later delivery holds the event"
			}
			return "committed"
		}
		if stale == nil {
			stale = func() { fmt.Println("first delivery, resumed:", commit()) }
			http.Error(w, "timed out", http.StatusGatewayTimeout) // the claim is released: the provider retries
			return
		}
		fmt.Println("retry:", commit())
	}))
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/orders", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "order-42")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	stale()
	// Output:
	// retry: committed
	// first delivery, resumed: refused: a later delivery holds the event
}

// A program the docs quote whole must be the file the build compiles and
// vets (and, for recordorder, its test runs), so that it compiles as
// written: the README's quick start, docs/stores.md's exactly-once handler.
func TestDocsQuoteTheCompiledExamples(t *testing.T) {
	for _, tt := range []struct{ doc, program, where string }{
		{"README.md", "examples/quickstart/main.go", "the README's first go block"},
		{"docs/stores.md", "examples/exactlyonce/recordorder/main.go", `the go block of "Exactly-once effects"`},
	} {
		doc, err := os.ReadFile(tt.doc)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(tt.program)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```go\n"+string(src)+"```\n") {
			t.Errorf("%s differs from %s: paste the file into %s", tt.doc, tt.program, tt.where)
		}
	}
}
