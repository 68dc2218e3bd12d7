package main

import (
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus collectors, on a registry of its own
// (nothing global).
type metrics struct {
	reg        *prometheus.Registry
	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	storeOps   *prometheus.HistogramVec
	storeErrs  *prometheus.CounterVec
	breaker    prometheus.Gauge
	upstream   *prometheus.HistogramVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_deliveries_total",
			Help: "Deliveries by source and outcome (processed, replayed, in_flight_*, mismatch, failed_released, store_error_*, key_error, signature_invalid, too_large).",
		}, []string{"source", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemhook_delivery_duration_seconds",
			Help:    "Time from a delivery's arrival to its answer, by source and outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source", "outcome"}),
		storeOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemhook_store_operation_duration_seconds",
			Help:    "Latency of store calls by operation (claim, complete, release, extend, get); calls skipped by the open breaker are not observed.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5},
		}, []string{"op"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_store_errors_total",
			Help: "Failed store calls by operation, including calls skipped while the breaker was open.",
		}, []string{"op"}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemhook_breaker_open",
			Help: "1 while the store's circuit breaker is open (store calls skipped, deliveries fail open or closed per route), else 0.",
		}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemhook_upstream_duration_seconds",
			Help:    "Time the upstream took to answer with its headers, by route path (errors included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
	}
	m.reg.MustRegister(m.deliveries, m.duration, m.storeOps, m.storeErrs, m.breaker, m.upstream,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// onDelivery counts one finished delivery.
func (m *metrics) onDelivery(d idemhook.DeliveryInfo) {
	m.deliveries.WithLabelValues(d.Source, string(d.Outcome)).Inc()
	m.duration.WithLabelValues(d.Source, string(d.Outcome)).Observe(d.Duration.Seconds())
}

// onStoreCall observes one store call.
func (m *metrics) onStoreCall(c idemhook.StoreCallInfo) {
	if !c.Skipped {
		m.storeOps.WithLabelValues(c.Op).Observe(c.Duration.Seconds())
	}
	if c.Err != nil || c.Skipped {
		m.storeErrs.WithLabelValues(c.Op).Inc()
	}
}

func (m *metrics) onBreakerChange(open bool) {
	if open {
		m.breaker.Set(1)
	} else {
		m.breaker.Set(0)
	}
}

// upstreamObserver returns the function timing one route's upstream calls.
func (m *metrics) upstreamObserver(route string) func(time.Duration) {
	h := m.upstream.WithLabelValues(route)
	return func(d time.Duration) { h.Observe(d.Seconds()) }
}

// counterFunc registers a counter read from f at scrape time.
func (m *metrics) counterFunc(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
