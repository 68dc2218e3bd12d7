// Command chi is a chi webhook receiver whose handler runs once per event
// and per tenant: an idemhook route is chi middleware as it is.
//
// The route's pattern holds the tenant ({tenant}), so the default scope
// keys each tenant's events apart. chi records the pattern and its values
// in the request (Request.Pattern, Request.PathValue, chi v5.2.2 on), so
// behind StripSlashes, /webhooks/acme/orders/ is the same event as
// /webhooks/acme/orders: a re-sent delivery is never a new one.
package main

import (
	"log"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// newRouter returns the receiver. handle is the webhook's business logic.
func newRouter(store idemhook.Store, handle http.HandlerFunc) (http.Handler, error) {
	mw, err := idemhook.New(store, idemhook.Options{Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	orders, err := mw.Route(idemhook.Route{Source: "orders"})
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	r.Use(middleware.StripSlashes)
	r.With(orders).Post("/webhooks/{tenant}/orders", handle)
	return r, nil
}

func main() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := newRouter(store, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"tenant":"` + chi.URLParam(r, "tenant") + `"}`)) //nolint:errcheck
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", r))
}
