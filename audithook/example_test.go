package audithook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audithook"
	"github.com/idemhook/idemhook/memstore"
)

// A service keeps the gateway's audit trail of its own deliveries: the
// hook feeds a recorder, which writes to a sink (here the in-memory ring,
// which can be queried back).
func Example() {
	ring, err := audit.NewRing(audit.RingConfig{})
	if err != nil {
		panic(err)
	}
	rec := audit.NewRecorder(ring, audit.RecorderConfig{})
	hook, err := audithook.New(audithook.Config{Recorder: rec, Instance: "orders-1"})
	if err != nil {
		panic(err)
	}
	store, _ := memstore.New(memstore.Config{})
	mw, err := idemhook.New(store, hook.Instrument(idemhook.Options{}))
	if err != nil {
		panic(err)
	}
	stone, _ := mw.Route(idemhook.Route{Source: "stone"})
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stone", stone(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	})))
	for range 2 { // a delivery and its re-delivery
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(`{"id":"evt_1"}`))
		mux.ServeHTTP(httptest.NewRecorder(), req)
	}

	rec.Close(context.Background()) // writes what waits
	page, err := ring.Query(context.Background(), audit.Filter{})
	if err != nil {
		panic(err)
	}
	for _, e := range page.Entries { // newest first
		fmt.Println(e.Route, e.Source, e.Outcome, e.Status, e.Instance)
	}
	// Output:
	// POST /webhooks/stone stone replayed 200 orders-1
	// POST /webhooks/stone stone processed 200 orders-1
}
