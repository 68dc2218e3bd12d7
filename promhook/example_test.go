package promhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/promhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// New registers the gateway's metric set and Instrument wires the
// middleware's hooks. The service serves the registry at /metrics as usual.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	m, err := promhook.New(promhook.Config{Registerer: reg})
	if err != nil {
		panic(err)
	}
	store, _ := memstore.New(memstore.Config{})
	mw, err := idemhook.New(store, m.Instrument(idemhook.Options{}))
	if err != nil {
		panic(err)
	}
	stone, _ := mw.Route(idemhook.Route{Source: "stone"})
	handler := stone(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	for range 2 { // a delivery and its re-delivery
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(`{"id":"evt_1"}`))
		handler.ServeHTTP(httptest.NewRecorder(), req)
	}

	scrape := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(scrape.Body.String()) {
		if strings.HasPrefix(line, "idemhook_deliveries_total") || strings.HasPrefix(line, "idemhook_breaker_open") {
			fmt.Print(line)
		}
	}
	// Output:
	// idemhook_breaker_open 0
	// idemhook_deliveries_total{outcome="processed",source="stone"} 1
	// idemhook_deliveries_total{outcome="replayed",source="stone"} 1
}

// A service that also exports its audit recorder's losses, and names its
// own version.
func ExampleMetrics_RegisterAudit() {
	reg := prometheus.NewRegistry()
	m, err := promhook.New(promhook.Config{Registerer: reg, Version: "v1.2.3"})
	if err != nil {
		panic(err)
	}
	rec := audit.NewRecorder(audit.NewLog(nil), audit.RecorderConfig{})
	defer rec.Close(context.Background())
	if err := m.RegisterAudit(rec); err != nil {
		panic(err)
	}
	store, _ := memstore.New(memstore.Config{})
	if _, err := idemhook.New(store, m.Instrument(idemhook.Options{})); err != nil {
		panic(err)
	}

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		fmt.Println(mf.GetName())
	}
	// Output:
	// idemhook_audit_dropped_total
	// idemhook_audit_failed_total
	// idemhook_breaker_open
	// idemhook_build_info
	// idemhook_store_errors_total
}
