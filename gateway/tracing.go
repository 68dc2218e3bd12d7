package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/otelhook"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracing exports one span per delivery over OTLP/HTTP, when the standard
// OpenTelemetry variables name an endpoint. A nil *tracing is tracing off:
// its methods hand back what they are given.
type tracing struct {
	tp     *sdktrace.TracerProvider
	hooks  *otelhook.Hooks
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// openTracing reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the traces URL as
// is) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, traces at /v1/traces),
// OTEL_SERVICE_NAME (default idemhook) and OTEL_SDK_DISABLED /
// OTEL_TRACES_EXPORTER=none. Without an endpoint tracing is off and it
// returns nil. The exporter reads its other settings (headers, timeout,
// compression, certificates) from the process environment as the
// OpenTelemetry SDK documents them. It reads the sampler from
// OTEL_TRACES_SAMPLER. The default sampler samples what the sender sampled,
// and everything without a parent. A nil getenv (the demo's gateway) is
// tracing off.
//
// Export failures (a collector down) are logged to logger at WARN, once per
// failed batch. The SDK reports them through its process-wide error
// handler, which the gateway, one per process, points at its logger.
func openTracing(ctx context.Context, getenv func(string) string, logger *slog.Logger, version string) (*tracing, error) {
	if getenv == nil || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return nil, nil
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if base == "" {
			return nil, nil
		}
		endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	if exp := getenv("OTEL_TRACES_EXPORTER"); exp != "" && exp != "otlp" {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: the gateway exports traces over OTLP only (otlp or none)", exp)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%s: the gateway exports OTLP over HTTP only (http/protobuf)", v, p)
			}
			break
		}
	}
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry exporter for %s: %w", endpoint, err)
	}
	service := getenv("OTEL_SERVICE_NAME")
	if service == "" {
		service = "idemhook"
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.version", version),
	)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("idemhook trace export failed; spans are dropped until the collector answers", "endpoint", endpoint, "err", err)
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	prop := propagation.TraceContext{}
	hooks, err := otelhook.New(otelhook.Config{TracerProvider: tp, Propagator: prop})
	if err != nil {
		tp.Shutdown(ctx)
		return nil, err
	}
	return &tracing{tp: tp, hooks: hooks, tracer: tp.Tracer("github.com/idemhook/idemhook/cmd/idemhook"), prop: prop}, nil
}

// instrument adds the span hooks to opts.
func (t *tracing) instrument(opts idemhook.Options) idemhook.Options {
	if t == nil {
		return opts
	}
	return t.hooks.Instrument(opts)
}

// handler starts each delivery's span before the middleware runs.
func (t *tracing) handler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return t.hooks.Handler(next)
}

// transport makes each upstream call a client span, child of the
// delivery's, and sends the upstream a traceparent naming it (in place of
// the sender's, which the proxy would otherwise forward as received).
func (t *tracing) transport(next http.RoundTripper) http.RoundTripper {
	if t == nil {
		return next
	}
	return tracedTransport{next: next, t: t}
}

// shutdown flushes the spans not yet exported, within a few seconds.
func (t *tracing) shutdown() error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.tp.Shutdown(ctx)
}

type tracedTransport struct {
	next http.RoundTripper
	t    *tracing
}

func (tt tracedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, span := tt.t.tracer.Start(r.Context(), "upstream "+r.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", r.Method),
			attribute.String("server.address", r.URL.Host)))
	defer span.End()
	out := r.WithContext(ctx)
	out.Header = r.Header.Clone()
	tt.t.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := tt.next.RoundTrip(out)
	if err != nil {
		span.SetStatus(codes.Error, errText(err))
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}
