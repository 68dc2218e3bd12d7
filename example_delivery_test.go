package idemhook_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

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
		fmt.Println("handler: claimed", ok, d.StoreKey(), d.Claim().State)
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
	// handler: claimed true idem:shop:order-42 pending
	// 200 ok replayed: false
	// 200 ok replayed: true
}
