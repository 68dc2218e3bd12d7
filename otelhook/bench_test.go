package otelhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/otelhook"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkReplay measures a replayed delivery (the common case under
// retries) on the memory store. It runs the bare middleware, then the
// middleware traced by otelhook with every span sampled. The provider has
// no exporter, so it measures the cost of recording, not of sending. The
// request is built in the loop for both.
func BenchmarkReplay(b *testing.B) {
	bare := func(opts idemhook.Options) (idemhook.Options, func(http.Handler) http.Handler) {
		return opts, func(h http.Handler) http.Handler { return h }
	}
	traced := func(opts idemhook.Options) (idemhook.Options, func(http.Handler) http.Handler) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		h, err := otelhook.New(otelhook.Config{TracerProvider: tp, MeterProvider: mp})
		if err != nil {
			b.Fatal(err)
		}
		return h.Instrument(opts), h.Handler
	}
	for _, bc := range []struct {
		name  string
		setup func(idemhook.Options) (idemhook.Options, func(http.Handler) http.Handler)
	}{{"bare", bare}, {"otelhook", traced}} {
		b.Run(bc.name, func(b *testing.B) {
			store, _ := memstore.New(memstore.Config{})
			opts, wrap := bc.setup(idemhook.Options{})
			mw, err := idemhook.New(store, opts)
			if err != nil {
				b.Fatal(err)
			}
			route, _ := mw.Route(idemhook.Route{Source: "stone"})
			h := wrap(route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
			body := `{"id":"evt_1"}`
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body)))
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body)))
			}
		})
	}
}
