package gateway

import (
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/promhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the gateway's Prometheus collectors, on a registry of its own
// (nothing global). They are the middleware's set from package promhook,
// which library users register the same way, plus what only a proxy has.
type metrics struct {
	reg      *prometheus.Registry
	hooks    *promhook.Metrics
	upstream *prometheus.HistogramVec
	queue    *queueMetrics
	reload   reloadMetrics
}

// reloadMetrics count the configuration's reloads, so that a refused one
// (SIGHUP with a bad file) is more than a log line: the running
// configuration keeps serving, but the file on disk no longer starts.
type reloadMetrics struct {
	total       *prometheus.CounterVec
	successful  prometheus.Gauge
	lastSuccess prometheus.Gauge
}

// Values of idemhook_config_reloads_total's result label.
const (
	reloadSuccess = "success"
	reloadFailure = "failure"
)

func newReloadMetrics(reg prometheus.Registerer) reloadMetrics {
	m := reloadMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_config_reloads_total",
			Help: "Reloads of the configuration (SIGHUP), by result: success, or failure (the file was refused and the running configuration kept serving).",
		}, []string{"result"}),
		successful: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemhook_config_last_reload_successful",
			Help: "1 when the last load of the configuration (the start, or the last reload) succeeded, 0 when the last reload was refused.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idemhook_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful load of the configuration: the start, or the last reload that succeeded.",
		}),
	}
	m.total.WithLabelValues(reloadSuccess) // both series exist from the start, at 0
	m.total.WithLabelValues(reloadFailure)
	reg.MustRegister(m.total, m.successful, m.lastSuccess)
	return m
}

// loaded records a load of the configuration: at the start (reload
// false, nothing counted) or a reload.
func (m reloadMetrics) loaded(now time.Time, reload bool, err error) {
	if err != nil {
		m.total.WithLabelValues(reloadFailure).Inc()
		m.successful.Set(0)
		return
	}
	if reload {
		m.total.WithLabelValues(reloadSuccess).Inc()
	}
	m.successful.Set(1)
	m.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
}

func newMetrics(version string) *metrics {
	reg := prometheus.NewRegistry()
	hooks, err := promhook.New(promhook.Config{Registerer: reg, Version: version})
	if err != nil {
		panic(err) // a fresh registry holds no metric of the same name
	}
	m := &metrics{
		reg:   reg,
		hooks: hooks,
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemhook_upstream_duration_seconds",
			Help:    "Time the upstream took to answer with its headers, by route path (errors included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
	}
	m.queue = newQueueMetrics(reg)
	m.reload = newReloadMetrics(reg)
	m.reload.loaded(time.Now(), false, nil)
	m.reg.MustRegister(m.upstream,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) onDelivery(d idemhook.DeliveryInfo)           { m.hooks.OnDelivery(d) }
func (m *metrics) onStoreCall(c idemhook.StoreCallInfo)         { m.hooks.OnStoreCall(c) }
func (m *metrics) onBreakerChange(open bool)                    { m.hooks.OnBreakerChange(open) }
func (m *metrics) registerAudit(rec promhook.AuditCounts) error { return m.hooks.RegisterAudit(rec) }

// upstreamObserver returns the function timing one route's upstream calls.
func (m *metrics) upstreamObserver(route string) func(time.Duration) {
	h := m.upstream.WithLabelValues(route)
	return func(d time.Duration) { h.Observe(d.Seconds()) }
}

// gaugeFunc registers a gauge read from f at scrape time.
func (m *metrics) gaugeFunc(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
