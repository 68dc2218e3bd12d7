package promhook_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/promhook"
	"github.com/idemhook/idemhook/storetest"
	"github.com/prometheus/client_golang/prometheus"
)

var errDown = errors.New("connection refused")

func deliver(t *testing.T, h http.Handler, body string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body)))
	return rec.Code
}

// memRoute is the route rt of a middleware on a memory store, with opts.
func memRoute(t *testing.T, opts idemhook.Options, rt idemhook.Route) func(http.Handler) http.Handler {
	t.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhook.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	route, err := mw.Route(rt)
	if err != nil {
		t.Fatal(err)
	}
	return route
}

// instrument registers a Metrics on reg and returns opts with its hooks.
func instrument(t testing.TB, reg prometheus.Registerer, opts idemhook.Options) idemhook.Options {
	t.Helper()
	m, err := promhook.New(promhook.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return m.Instrument(opts)
}

func TestCountsOutcomesAndStoreCalls(t *testing.T) {
	reg := prometheus.NewRegistry()
	var prevDeliveries, prevCalls int
	opts := instrument(t, reg, idemhook.Options{
		OnDelivery:  func(idemhook.DeliveryInfo) { prevDeliveries++ },
		OnStoreCall: func(idemhook.StoreCallInfo) { prevCalls++ },
	})
	route := memRoute(t, opts, idemhook.Route{Source: "stone"})
	runs := 0
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ }))
	for range 3 {
		deliver(t, h, `{"id":"evt_1"}`)
	}
	deliver(t, h, `{"id":"evt_2"}`)

	if runs != 2 {
		t.Errorf("handler ran %d times, want 2", runs)
	}
	tests := []struct {
		give string
		want float64
	}{
		{`idemhook_deliveries_total{source="stone",outcome="processed"}`, 2},
		{`idemhook_deliveries_total{source="stone",outcome="replayed"}`, 2},
		{`idemhook_delivery_duration_seconds_count{source="stone",outcome="processed"}`, 2},
		{`idemhook_store_operation_duration_seconds_count{op="claim"}`, 4},
		{`idemhook_store_operation_duration_seconds_count{op="complete"}`, 2},
		{`idemhook_breaker_open`, 0},
	}
	for _, tt := range tests {
		if got := sample(t, reg, tt.give); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.give, got, tt.want)
		}
	}
	if prevDeliveries != 4 || prevCalls != 6 {
		t.Errorf("the hooks already set saw %d deliveries and %d store calls, want 4 and 6", prevDeliveries, prevCalls)
	}
}

// Answers over the route's MaxStoredBodyBytes are counted when they are
// stored without their body and each time such an answer is replayed.
func TestCountsOmittedBodies(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := instrument(t, reg, idemhook.Options{})
	route := memRoute(t, opts, idemhook.Route{Source: "stone", MaxStoredBodyBytes: 4})
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "0123456789") }))
	for range 3 {
		deliver(t, h, `{"id":"evt_1"}`)
	}
	for _, tt := range []struct {
		give string
		want float64
	}{
		{`idemhook_body_omitted_total{source="stone",outcome="processed"}`, 1},
		{`idemhook_body_omitted_total{source="stone",outcome="replayed"}`, 2},
	} {
		if got := sample(t, reg, tt.give); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// The items of batched deliveries are counted by state.
func TestCountsItems(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := instrument(t, reg, idemhook.Options{})
	route := memRoute(t, opts, idemhook.Route{Source: "sendgrid", Items: &idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "id"}}}})
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), `"c"`) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	deliver(t, h, `[{"id":"a"},{"id":"b"},{"id":"c"}]`) // a, b processed; c failed
	deliver(t, h, `[{"id":"a"},{"id":"b"}]`)            // both replayed
	for _, tt := range []struct {
		give string
		want float64
	}{
		{`idemhook_items_total{source="sendgrid",state="processed"}`, 2},
		{`idemhook_items_total{source="sendgrid",state="replayed"}`, 2},
		{`idemhook_items_total{source="sendgrid",state="failed"}`, 1},
		{`idemhook_deliveries_total{source="sendgrid",outcome="failed_released"}`, 1},
		{`idemhook_deliveries_total{source="sendgrid",outcome="replayed"}`, 1},
	} {
		if got := sample(t, reg, tt.give); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestStoreDownOpensBreaker(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := instrument(t, reg, idemhook.Options{BreakerThreshold: 2, BreakerCooldown: time.Hour})
	mw, err := idemhook.New(storetest.Unreachable(errDown), opts)
	if err != nil {
		t.Fatal(err)
	}
	route, _ := mw.Route(idemhook.Route{Source: "stone"})
	runs := 0
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ }))
	for i := range 4 {
		if code := deliver(t, h, `{"n":`+string(rune('0'+i))+`}`); code != http.StatusOK {
			t.Fatalf("delivery %d: status %d, want 200 (fail-open)", i, code)
		}
	}
	if runs != 4 {
		t.Errorf("handler ran %d times, want 4 (fail-open)", runs)
	}
	tests := []struct {
		give string
		want float64
	}{
		{`idemhook_deliveries_total{source="stone",outcome="store_error_open"}`, 4},
		{`idemhook_store_errors_total{op="claim"}`, 4},                     // 2 failed, 2 skipped
		{`idemhook_store_operation_duration_seconds_count{op="claim"}`, 2}, // skipped calls not observed
		{`idemhook_breaker_open`, 1},
	}
	for _, tt := range tests {
		if got := sample(t, reg, tt.give); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.give, got, tt.want)
		}
	}
}

type counts struct{ dropped, failed uint64 }

func (c *counts) Dropped() uint64 { return c.dropped }
func (c *counts) Failed() uint64  { return c.failed }

func TestRegisterAudit(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := promhook.New(promhook.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"claim", "complete", "release", "extend", "get"} {
		if got := sample(t, reg, `idemhook_store_errors_total{op="`+op+`"}`); got != 0 {
			t.Errorf("idemhook_store_errors_total{op=%q} = %v at start, want 0", op, got)
		}
	}
	c := &counts{dropped: 3, failed: 1}
	if err := m.RegisterAudit(c); err != nil {
		t.Fatal(err)
	}
	c.dropped = 5 // read at scrape time
	if got := sample(t, reg, "idemhook_audit_dropped_total"); got != 5 {
		t.Errorf("idemhook_audit_dropped_total = %v, want 5", got)
	}
	if got := sample(t, reg, "idemhook_audit_failed_total"); got != 1 {
		t.Errorf("idemhook_audit_failed_total = %v, want 1", got)
	}
	if err := m.RegisterAudit(c); err == nil {
		t.Error("a second RegisterAudit on one registry succeeded, want an already-registered error")
	}
	if err := m.RegisterAudit(nil); err == nil {
		t.Error("RegisterAudit(nil) succeeded")
	}
}

func TestNewTwiceOnOneRegistryFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := promhook.New(promhook.Config{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	_, err := promhook.New(promhook.Config{Registerer: reg})
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second New on one registry: err = %v, want AlreadyRegisteredError", err)
	}
	// Middlewares sharing a registry each wrap it with the same label, of
	// different values.
	shared := prometheus.NewRegistry()
	for _, app := range []string{"billing", "orders"} {
		if _, err := promhook.New(promhook.Config{Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"app": app}, shared)}); err != nil {
			t.Errorf("New wrapped with app=%s: %v", app, err)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	tests := []struct {
		give string // Config.Version
		want string // "" means any non-empty version
	}{
		{give: ""},
		{give: "v1.4.0", want: "v1.4.0"},
	}
	for _, tt := range tests {
		reg := prometheus.NewRegistry()
		if _, err := promhook.New(promhook.Config{Registerer: reg, Version: tt.give}); err != nil {
			t.Fatal(err)
		}
		labels := buildInfo(t, reg)
		if labels["goversion"] != runtime.Version() {
			t.Errorf("goversion = %q, want %s", labels["goversion"], runtime.Version())
		}
		if got := labels["version"]; got == "" || tt.want != "" && got != tt.want {
			t.Errorf("version = %q, want %q", got, tt.want)
		}
	}
}

func buildInfo(t *testing.T, g prometheus.Gatherer) map[string]string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idemhook_build_info" {
			continue
		}
		ms := mf.GetMetric()
		if len(ms) != 1 || ms[0].GetGauge().GetValue() != 1 {
			t.Fatalf("idemhook_build_info = %v, want one sample of 1", ms)
		}
		labels := map[string]string{}
		for _, l := range ms[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		return labels
	}
	t.Fatal("idemhook_build_info not registered")
	return nil
}

// sample returns the value of one series, written as in the exposition
// format (labels in any order).
func sample(t *testing.T, g prometheus.Gatherer, series string) float64 {
	t.Helper()
	name, labelText, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	want := map[string]string{}
	if labelText != "" {
		for _, kv := range strings.Split(labelText, ",") {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = strings.Trim(v, `"`)
		}
	}
	base, suffix := name, ""
	for _, s := range []string{"_count", "_sum"} {
		if strings.HasSuffix(name, s) && !strings.HasSuffix(name, "_total") {
			base, suffix = strings.TrimSuffix(name, s), s
		}
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != base {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if len(got) != len(want) {
				continue
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			switch {
			case suffix == "_count":
				return float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}

// BenchmarkHooks measures what the hooks add to each delivery: one
// OnDelivery and the two store calls of a first delivery, from parallel
// goroutines as the middleware calls them.
func BenchmarkHooks(b *testing.B) {
	m, err := promhook.New(promhook.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	d := idemhook.DeliveryInfo{Source: "stone", Outcome: idemhook.OutcomeProcessed, Duration: 3 * time.Millisecond}
	claim := idemhook.StoreCallInfo{Op: "claim", Duration: 40 * time.Microsecond}
	complete := idemhook.StoreCallInfo{Op: "complete", Duration: 50 * time.Microsecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.OnStoreCall(claim)
			m.OnStoreCall(complete)
			m.OnDelivery(d)
		}
	})
}
