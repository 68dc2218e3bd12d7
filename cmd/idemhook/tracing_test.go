package main

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemhook/idemhook/otelhook"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// export requests the gateway sends to /v1/traces.
type otlpReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each resource received
	paths   []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf body", http.StatusUnsupportedMediaType)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.paths = append(rc.paths, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			rc.service = append(rc.service, attrString(rs.GetResource().GetAttributes(), "service.name"))
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key == key {
			if v, ok := kv.Value.Value.(*commonpb.AnyValue_StringValue); ok {
				return v.StringValue
			}
			return kv.Value.String()
		}
	}
	return ""
}

func attrValue(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

const (
	senderTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	senderSpan  = "00f067aa0ba902b7"
)

func TestTracingExportsDeliverySpans(t *testing.T) {
	rc := newOTLPReceiver(t)
	up := newUpstream(t)
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rc.srv.URL,
		"OTEL_SERVICE_NAME":           "webhooks-gw",
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "header: X-Event-Id")),
		startOpts{getenv: func(k string) string { return env[k] }})

	traceparent := "00-" + senderTrace + "-" + senderSpan + "-01"
	body := `{"card":"4111-1111-secret"}`
	first := post(t, g.url("/webhooks/test"), body, "X-Event-Id", "e-1", "Traceparent", traceparent)
	again := post(t, g.url("/webhooks/test"), body, "X-Event-Id", "e-1", "Traceparent", traceparent)
	if first.Status != 200 || again.Status != 200 || up.Calls.Load() != 1 {
		t.Fatalf("statuses %d, %d and %d upstream calls; want 200, 200 and 1", first.Status, again.Status, up.Calls.Load())
	}
	if err := g.stop(); err != nil { // the shutdown flushes the spans
		t.Fatal(err)
	}

	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, p := range rc.paths {
		if p != "/v1/traces" {
			t.Errorf("export to %s, want /v1/traces", p)
		}
	}
	for _, s := range rc.service {
		if s != "webhooks-gw" {
			t.Errorf("service.name %q, want webhooks-gw (OTEL_SERVICE_NAME)", s)
		}
	}
	byID := map[string]*tracepb.Span{}
	var deliveries, stores, upstreams []*tracepb.Span
	for _, s := range rc.spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		if got := hex.EncodeToString(s.TraceId); got != senderTrace {
			t.Errorf("span %s in trace %s, want the sender's %s", s.Name, got, senderTrace)
		}
		switch {
		case s.Kind == tracepb.Span_SPAN_KIND_SERVER:
			deliveries = append(deliveries, s)
		case strings.HasPrefix(s.Name, "idemhook.store "):
			stores = append(stores, s)
		case strings.HasPrefix(s.Name, "upstream "):
			upstreams = append(upstreams, s)
		}
		for _, kv := range s.Attributes {
			if v := kv.Value.String(); strings.Contains(v, "secret") || strings.Contains(v, "e-1") {
				t.Errorf("span %s attribute %s = %s leaks the body or the key", s.Name, kv.Key, v)
			}
		}
	}
	if len(deliveries) != 2 || len(upstreams) != 1 || len(stores) != 3 {
		t.Fatalf("got %d delivery, %d upstream and %d store spans, want 2, 1 and 3 (claim, complete, claim): %v",
			len(deliveries), len(upstreams), len(stores), rc.spans)
	}
	wantKeyHash := otelhook.KeyHash("idem:test:e-1")
	for i, d := range deliveries {
		if got := hex.EncodeToString(d.ParentSpanId); got != senderSpan {
			t.Errorf("delivery %d: parent %s, want the sender's span %s", i, got, senderSpan)
		}
		if d.Name != "POST /webhooks/test" {
			t.Errorf("delivery %d: name %q", i, d.Name)
		}
		outcome := attrString(d.Attributes, "idemhook.outcome")
		replayed := attrValue(d.Attributes, "idemhook.replayed").GetBoolValue()
		if want := []string{"processed", "replayed"}[i]; outcome != want || replayed != (i == 1) {
			t.Errorf("delivery %d: outcome %q replayed %v, want %q %v", i, outcome, replayed, want, i == 1)
		}
		if got := attrString(d.Attributes, "idemhook.source"); got != "test" {
			t.Errorf("delivery %d: source %q", i, got)
		}
		if got := attrValue(d.Attributes, "http.response.status_code").GetIntValue(); got != 200 {
			t.Errorf("delivery %d: status %d", i, got)
		}
		if got := attrString(d.Attributes, "idemhook.key.hash"); got != wantKeyHash {
			t.Errorf("delivery %d: key hash %q, want %q", i, got, wantKeyHash)
		}
	}
	for _, s := range append(stores, upstreams...) {
		p, ok := byID[hex.EncodeToString(s.ParentSpanId)]
		if !ok || p.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("span %s: parent %x is not a delivery span", s.Name, s.ParentSpanId)
		}
	}
	// The upstream got a traceparent naming the gateway's upstream span,
	// in the sender's trace.
	got := up.Received()[0].Header.Get("Traceparent")
	want := "00-" + senderTrace + "-" + hex.EncodeToString(upstreams[0].SpanId) + "-01"
	if got != want {
		t.Errorf("upstream traceparent %q, want %q", got, want)
	}
}

func TestTracingUpstreamDown(t *testing.T) {
	rc := newOTLPReceiver(t)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // nothing listens there any more
	env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rc.srv.URL + "/v1/traces"}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(downURL)),
		startOpts{getenv: func(k string) string { return env[k] }})
	if r := post(t, g.url("/webhooks/test"), `{"id":1}`); r.Status != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", r.Status)
	}
	if err := g.stop(); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var sawDelivery, sawUpstream bool
	for _, s := range rc.spans {
		switch {
		case s.Kind == tracepb.Span_SPAN_KIND_SERVER:
			sawDelivery = true
			if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attrString(s.Attributes, "error.type") != "failed_released" {
				t.Errorf("delivery span status %v error.type %q, want an error, failed_released", s.Status, attrString(s.Attributes, "error.type"))
			}
			if got := attrValue(s.Attributes, "http.response.status_code").GetIntValue(); got != 502 {
				t.Errorf("delivery span status code %d, want 502", got)
			}
		case strings.HasPrefix(s.Name, "upstream "):
			sawUpstream = true
			if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(s.Status.GetMessage(), "connection refused") {
				t.Errorf("upstream span status %v, want an error saying connection refused", s.Status)
			}
		}
	}
	if !sawDelivery || !sawUpstream {
		t.Errorf("spans %v: want a delivery and an upstream span", rc.spans)
	}
}

// Tracing off (no OTEL_* variables: TestTracingOffWithoutVariables), the
// gateway forwards the sender's traceparent unchanged.
func TestTracingOffForwardsTraceparentUnchanged(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})
	traceparent := "00-" + senderTrace + "-" + senderSpan + "-01"
	post(t, g.url("/webhooks/test"), `{"id":1}`, "Traceparent", traceparent)
	if got := up.Received()[0].Header.Get("Traceparent"); got != traceparent {
		t.Errorf("upstream traceparent %q, want the sender's %q", got, traceparent)
	}
}
