package otelhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/otelhook"
	"github.com/idemhook/idemhook/storetest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	senderTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	senderSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + senderTrace + "-" + senderSpan + "-01"
)

type harness struct {
	spans   *tracetest.SpanRecorder
	reader  *sdkmetric.ManualReader
	hooks   *otelhook.Hooks
	handler http.Handler
	runs    int
}

// newHarness builds a middleware instrumented by otelhook over store, with
// one route at POST /hook whose handler answers status. wrap says whether
// the route is wrapped in Hooks.Handler.
func newHarness(t *testing.T, store idemhook.Store, status int, wrap bool) *harness {
	t.Helper()
	h := &harness{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	var err error
	h.hooks, err = otelhook.New(otelhook.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhook.New(store, h.hooks.Instrument(idemhook.Options{BreakerThreshold: 2, BreakerCooldown: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "stone", Header: "Idempotency-Key"})
	if err != nil {
		t.Fatal(err)
	}
	var next http.Handler = route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.runs++
		w.WriteHeader(status)
		w.Write([]byte(`{"secret-answer":true}`))
	}))
	if wrap {
		next = h.hooks.Handler(next)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hook", next)
	h.handler = mux
	return h
}

func (h *harness) deliver(t *testing.T, key string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(`{"card":"4111-secret-body"}`))
	req.Header.Set("Traceparent", traceparent)
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.handler.ServeHTTP(rec, req)
	return rec.Code
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestHandlerSpansAndParents(t *testing.T) {
	store, _ := memstore.New(memstore.Config{})
	h := newHarness(t, store, http.StatusOK, true)
	h.deliver(t, "evt_1")
	h.deliver(t, "evt_1")
	if h.runs != 1 {
		t.Fatalf("handler ran %d times, want 1", h.runs)
	}

	var deliveries []sdktrace.ReadOnlySpan
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range h.spans.Ended() {
		byID[s.SpanContext().SpanID()] = s
		if s.SpanKind() == trace.SpanKindServer {
			deliveries = append(deliveries, s)
		}
	}
	if len(deliveries) != 2 {
		t.Fatalf("%d server spans, want 2", len(deliveries))
	}
	wantOutcome := []string{"processed", "replayed"}
	for i, d := range deliveries {
		if d.Name() != "POST /hook" {
			t.Errorf("span name %q, want POST /hook", d.Name())
		}
		if got := d.Parent().SpanID().String(); got != senderSpan || !d.Parent().IsRemote() {
			t.Errorf("delivery %d: parent %s (remote %v), want the sender's %s", i, got, d.Parent().IsRemote(), senderSpan)
		}
		if got := d.SpanContext().TraceID().String(); got != senderTrace {
			t.Errorf("delivery %d: trace %s, want %s", i, got, senderTrace)
		}
		a := attrs(d)
		if got := a[otelhook.AttrOutcome].AsString(); got != wantOutcome[i] {
			t.Errorf("delivery %d: outcome %q, want %q", i, got, wantOutcome[i])
		}
		if got := a[otelhook.AttrReplayed].AsBool(); got != (i == 1) {
			t.Errorf("delivery %d: replayed %v", i, got)
		}
		if got, want := a[otelhook.AttrKeyHash].AsString(), otelhook.KeyHash("idem:stone:evt_1"); got != want {
			t.Errorf("delivery %d: key hash %q, want %q", i, got, want)
		}
		if got := a["http.response.status_code"].AsInt64(); got != 200 {
			t.Errorf("delivery %d: status %d", i, got)
		}
		if got := a["http.route"].AsString(); got != "/hook" {
			t.Errorf("delivery %d: route %q", i, got)
		}
	}
	var ops []string
	for _, s := range h.spans.Ended() {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		ops = append(ops, attrs(s)[otelhook.AttrStoreOp].AsString())
		parent, ok := byID[s.Parent().SpanID()]
		if !ok || parent.SpanKind() != trace.SpanKindServer {
			t.Errorf("store span %s: parent %s is not a delivery span", s.Name(), s.Parent().SpanID())
		}
		if s.StartTime().Before(parent.StartTime()) || s.EndTime().After(parent.EndTime()) {
			t.Errorf("store span %s [%v, %v] outside its delivery [%v, %v]", s.Name(), s.StartTime(), s.EndTime(), parent.StartTime(), parent.EndTime())
		}
	}
	if got := strings.Join(ops, ","); got != "claim,complete,claim" {
		t.Errorf("store spans %s, want claim,complete,claim", got)
	}
	// Nothing of the key, the body or the answer in any span.
	for _, s := range h.spans.Ended() {
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "evt_1") || strings.Contains(v, "secret") {
				t.Errorf("span %s attribute %s = %q leaks the key or a body", s.Name(), kv.Key, v)
			}
		}
	}
}

func TestOnDeliveryWithoutHandler(t *testing.T) {
	store, _ := memstore.New(memstore.Config{})
	h := newHarness(t, store, http.StatusOK, false)
	h.deliver(t, "evt_2")
	ended := h.spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans, want 1 (the delivery's own; store calls outside a span make none)", len(ended))
	}
	s := ended[0]
	if s.Parent().SpanID().String() != senderSpan || s.SpanKind() != trace.SpanKindServer {
		t.Errorf("span parent %s kind %v, want the sender's %s, server", s.Parent().SpanID(), s.SpanKind(), senderSpan)
	}
	if !s.EndTime().After(s.StartTime()) {
		t.Errorf("span [%v, %v] covers no time", s.StartTime(), s.EndTime())
	}
	if got := attrs(s)[otelhook.AttrOutcome].AsString(); got != "processed" {
		t.Errorf("outcome %q", got)
	}
}

func TestFailedDeliveryIsAnError(t *testing.T) {
	store, _ := memstore.New(memstore.Config{})
	h := newHarness(t, store, http.StatusInternalServerError, true)
	h.deliver(t, "evt_3")
	for _, s := range h.spans.Ended() {
		if s.SpanKind() != trace.SpanKindServer {
			continue
		}
		if s.Status().Code != codes.Error || attrs(s)["error.type"].AsString() != "failed_released" {
			t.Errorf("status %v, error.type %q; want Error, failed_released", s.Status(), attrs(s)["error.type"].AsString())
		}
		return
	}
	t.Fatal("no delivery span")
}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func TestStoreDownSpansAndMetrics(t *testing.T) {
	h := newHarness(t, storetest.Unreachable(errDown), http.StatusOK, true)
	for _, key := range []string{"a", "b", "c"} {
		if code := h.deliver(t, key); code != http.StatusOK {
			t.Fatalf("status %d, want 200 (fail-open)", code)
		}
	}
	var failed, skipped int
	for _, s := range h.spans.Ended() {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		if s.Status().Code != codes.Error {
			t.Errorf("store span %s status %v, want Error", s.Name(), s.Status())
		}
		if attrs(s)[otelhook.AttrSkipped].AsBool() {
			skipped++
		} else {
			failed++
			if s.Status().Description != errDown.Error() {
				t.Errorf("store span description %q, want the store's error", s.Status().Description)
			}
		}
	}
	if failed != 2 || skipped != 1 {
		t.Errorf("store spans: %d failed, %d skipped; want 2 and 1 (threshold 2)", failed, skipped)
	}

	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					outcome, _ := p.Attributes.Value(otelhook.AttrOutcome)
					got[m.Name+"/"+outcome.AsString()] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name] += int64(p.Count)
				}
			}
		}
	}
	want := map[string]int64{
		"idemhook.deliveries/store_error_open": 3,
		"idemhook.store.errors/":               3, // 2 failed, 1 skipped
		"idemhook.store.duration":              2, // skipped calls not observed
		"idemhook.delivery.duration":           3,
		"idemhook.breaker.open":                1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
