package otelhook_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/otelhook"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A route traced with otelhook: one server span per delivery, continuing
// the sender's traceparent, with the store calls as its children.
func ExampleHooks_Handler() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h, err := otelhook.New(otelhook.Config{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	store, _ := memstore.New(memstore.Config{})
	mw, err := idemhook.New(store, h.Instrument(idemhook.Options{}))
	if err != nil {
		panic(err)
	}
	stone, _ := mw.Route(idemhook.Route{Source: "stone"})
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stone", h.Handler(stone(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))))

	for range 2 { // a delivery and its re-delivery
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(`{"id":"evt_1"}`))
		req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		mux.ServeHTTP(httptest.NewRecorder(), req)
	}
	for _, s := range spans.Ended() {
		line := s.Name()
		for _, kv := range s.Attributes() {
			if kv.Key == otelhook.AttrOutcome || kv.Key == otelhook.AttrReplayed {
				line += fmt.Sprintf(" %s=%s", kv.Key, kv.Value.Emit())
			}
		}
		fmt.Println(line, "trace", s.SpanContext().TraceID())
	}
	// Output:
	// idemhook.store claim trace 4bf92f3577b34da6a3ce929d0e0e4736
	// idemhook.store complete trace 4bf92f3577b34da6a3ce929d0e0e4736
	// POST /webhooks/stone idemhook.outcome=processed idemhook.replayed=false trace 4bf92f3577b34da6a3ce929d0e0e4736
	// idemhook.store claim trace 4bf92f3577b34da6a3ce929d0e0e4736
	// POST /webhooks/stone idemhook.outcome=replayed idemhook.replayed=true trace 4bf92f3577b34da6a3ce929d0e0e4736
}
