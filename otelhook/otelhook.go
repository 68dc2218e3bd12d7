// Package otelhook turns the middleware's hooks into OpenTelemetry spans and
// metrics. It records one span per delivery, carrying its source, outcome,
// status, whether it was replayed and a hash of its key. Each store call
// gets a child span. The counters and histograms hold the same facts as
// package promhook's Prometheus metrics.
//
//	h, err := otelhook.New(otelhook.Config{}) // the global providers
//	mw, err := idemhook.New(store, h.Instrument(idemhook.Options{}))
//	stone, err := mw.Route(idemhook.Route{Source: "stone"})
//	mux.Handle("POST /webhooks/stone", h.Handler(stone(handler)))
//
// [Hooks.Handler] starts the delivery's span before the middleware runs,
// continuing the sender's W3C traceparent, so that the store calls and
// whatever the handler does (an outgoing call instrumented with
// OpenTelemetry) become its children. Without it, [Hooks.OnDelivery] adds its
// attributes to the span already in the request's context (an outer
// instrumentation's, such as otelhttp's), or records a span of its own
// covering the delivery.
//
// Spans never carry a key, a body or a header value. The key appears as
// idemhook.key.hash, the hex SHA-256 of the store key
// (printf %s 'idem:stone:evt_1' | sha256sum finds a known event's spans).
//
// The gateway (cmd/idemhook) traces its deliveries with this package.
package otelhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/hookchain"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the spans and metrics.
const ScopeName = "github.com/idemhook/idemhook/otelhook"

// Attribute keys set on the spans and, for source, outcome and op, on the
// metrics.
const (
	AttrSource    = attribute.Key("idemhook.source")
	AttrOutcome   = attribute.Key("idemhook.outcome")
	AttrReplayed  = attribute.Key("idemhook.replayed")
	AttrKeyHash   = attribute.Key("idemhook.key.hash")
	AttrStoreOp   = attribute.Key("idemhook.store.operation")
	AttrSkipped   = attribute.Key("idemhook.store.skipped")
	attrMethod    = attribute.Key("http.request.method")
	attrRoute     = attribute.Key("http.route")
	attrStatus    = attribute.Key("http.response.status_code")
	attrReqBytes  = attribute.Key("http.request.body.size")
	attrRespBytes = attribute.Key("http.response.body.size")
	attrErrorType = attribute.Key("error.type")
)

// Config says where the spans and metrics go. The zero value is valid.
type Config struct {
	// TracerProvider makes the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// MeterProvider makes the metrics. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// Propagator reads the sender's trace context from the request headers.
	// Default: propagation.TraceContext{} (W3C traceparent and tracestate).
	Propagator propagation.TextMapPropagator
}

// Hooks holds the tracer and instruments of one middleware. Its methods are
// the hooks of idemhook.Options and are safe for concurrent use.
type Hooks struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator

	deliveries metric.Int64Counter
	duration   metric.Float64Histogram
	storeOps   metric.Float64Histogram
	storeErrs  metric.Int64Counter
	breaker    atomic.Int64
}

// New creates the tracer and the instruments.
func New(cfg Config) (*Hooks, error) {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	h := &Hooks{tracer: cfg.TracerProvider.Tracer(ScopeName), propagator: cfg.Propagator}
	meter := cfg.MeterProvider.Meter(ScopeName)
	var err error
	if h.deliveries, err = meter.Int64Counter("idemhook.deliveries",
		metric.WithDescription("Deliveries by source and outcome."), metric.WithUnit("{delivery}")); err != nil {
		return nil, err
	}
	if h.duration, err = meter.Float64Histogram("idemhook.delivery.duration",
		metric.WithDescription("Time from a delivery's arrival to its answer, by source and outcome."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if h.storeOps, err = meter.Float64Histogram("idemhook.store.duration",
		metric.WithDescription("Latency of store calls by operation; calls skipped by the open breaker are not observed."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if h.storeErrs, err = meter.Int64Counter("idemhook.store.errors",
		metric.WithDescription("Failed store calls by operation, including calls skipped while the breaker was open."), metric.WithUnit("{call}")); err != nil {
		return nil, err
	}
	if _, err = meter.Int64ObservableGauge("idemhook.breaker.open",
		metric.WithDescription("1 while the store's circuit breaker is open, else 0."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(h.breaker.Load())
			return nil
		})); err != nil {
		return nil, err
	}
	return h, nil
}

// Instrument returns opts with the hooks set to feed h. Hooks already set
// in opts are kept and called first.
func (h *Hooks) Instrument(opts idemhook.Options) idemhook.Options {
	return hookchain.Instrument(opts, hookchain.Hooks{OnDelivery: h.OnDelivery, OnStoreCall: h.OnStoreCall, OnBreakerChange: h.OnBreakerChange})
}

// Handler starts a server span for each request, continuing the trace of
// the sender's traceparent header, runs next with the span in the request's
// context and ends it when next returns. Wrap a route's middleware handler
// with it (outside the middleware), after the mux so that the span is named
// after the route's pattern.
func (h *Hooks) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := h.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := h.tracer.Start(ctx, spanName(r), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attrMethod.String(r.Method), attrRoute.String(route(r))))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// OnDelivery records one finished delivery and counts it. It sets the
// attributes on the span in the request's context. When there is none, it
// records a span of its own covering the delivery.
func (h *Hooks) OnDelivery(d idemhook.DeliveryInfo) {
	source, outcome := AttrSource.String(d.Source), AttrOutcome.String(string(d.Outcome))
	set := attribute.NewSet(source, outcome)
	ctx := context.Background()
	if d.Request != nil {
		ctx = d.Request.Context()
	}
	h.deliveries.Add(ctx, 1, metric.WithAttributeSet(set))
	h.duration.Record(ctx, d.Duration.Seconds(), metric.WithAttributeSet(set))

	attrs := []attribute.KeyValue{
		source, outcome,
		AttrReplayed.Bool(d.Outcome == idemhook.OutcomeReplayed || d.Outcome == idemhook.OutcomeInFlightWaited),
		attrStatus.Int(d.Status),
		attrReqBytes.Int64(d.RequestBytes),
		attrRespBytes.Int64(d.ResponseBytes),
	}
	if d.StoreKey != "" {
		attrs = append(attrs, AttrKeyHash.String(KeyHash(d.StoreKey)))
	}
	span := trace.SpanFromContext(ctx)
	if !span.SpanContext().IsValid() && d.Request != nil {
		// No span around the middleware: one for the delivery alone, from
		// its arrival (now minus its duration) to now.
		end := time.Now()
		pctx := h.propagator.Extract(ctx, propagation.HeaderCarrier(d.Request.Header))
		_, span = h.tracer.Start(pctx, spanName(d.Request), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithTimestamp(end.Add(-d.Duration)),
			trace.WithAttributes(attrMethod.String(d.Request.Method), attrRoute.String(route(d.Request))))
		defer span.End(trace.WithTimestamp(end))
	}
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrs...)
	if d.Status >= 500 {
		// The outcome names what happened. An error's text may quote the
		// key or the sender's headers, so it is left out.
		span.SetAttributes(attrErrorType.String(string(d.Outcome)))
		span.SetStatus(codes.Error, string(d.Outcome))
	}
}

// OnStoreCall records one store call. It records a child span of the
// delivery's span (when the call's request carries one) from the call's
// start to its end, and the store metrics.
func (h *Hooks) OnStoreCall(c idemhook.StoreCallInfo) {
	ctx := context.Background()
	if c.Request != nil {
		ctx = c.Request.Context()
	}
	op := AttrStoreOp.String(c.Op)
	if !c.Skipped {
		h.storeOps.Record(ctx, c.Duration.Seconds(), metric.WithAttributes(op))
	}
	failed := c.Err != nil || c.Skipped
	if failed {
		h.storeErrs.Add(ctx, 1, metric.WithAttributes(op))
	}
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return // a store call outside any trace makes no root span
	}
	end := time.Now()
	_, span := h.tracer.Start(ctx, "idemhook.store "+c.Op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(end.Add(-c.Duration)), trace.WithAttributes(op))
	switch {
	case c.Skipped:
		span.SetAttributes(AttrSkipped.Bool(true))
		span.SetStatus(codes.Error, "skipped: circuit breaker open")
	case c.Err != nil:
		// A store's error names the store's address and the failure, not
		// the key (the middleware adds the key when it wraps the error).
		span.SetStatus(codes.Error, c.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// OnBreakerChange sets the idemhook.breaker.open gauge.
func (h *Hooks) OnBreakerChange(open bool) {
	if open {
		h.breaker.Store(1)
	} else {
		h.breaker.Store(0)
	}
}

// KeyHash is the value of idemhook.key.hash for a store key such as
// "idem:stone:evt_1": the hex SHA-256 of its bytes.
func KeyHash(storeKey string) string {
	sum := sha256.Sum256([]byte(storeKey))
	return hex.EncodeToString(sum[:])
}

// route is the request's mux pattern without its method, or "" outside a
// ServeMux.
func route(r *http.Request) string {
	p := r.Pattern
	if _, path, ok := strings.Cut(p, " "); ok {
		return path
	}
	return p
}

// spanName follows the HTTP conventions: "POST /webhooks/stone", or the
// method alone when the route is unknown (a path could hold an id).
func spanName(r *http.Request) string {
	if rt := route(r); rt != "" {
		return r.Method + " " + rt
	}
	return r.Method
}
