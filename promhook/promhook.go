// Package promhook exports the middleware's deliveries, store calls and
// circuit breaker as Prometheus metrics. They are the metric set of the
// idemhook gateway, for a Go service that uses the middleware directly.
//
// [New] registers the collectors and [Metrics.Instrument] wires them into
// the middleware's options:
//
//	m, err := promhook.New(promhook.Config{Registerer: reg})
//	mw, err := idemhook.New(store, m.Instrument(idemhook.Options{Logger: logger}))
//
// The metrics (every name is shared with the gateway, so its dashboard and
// alert rules in deploy/ work for a library user too):
//
//	idemhook_deliveries_total{source,outcome}              counter
//	idemhook_delivery_duration_seconds{source,outcome}     histogram
//	idemhook_body_omitted_total{source,outcome}            counter (answers over MaxStoredBodyBytes: stored, or replayed, without their body)
//	idemhook_store_operation_duration_seconds{op}          histogram (calls skipped by the breaker not observed)
//	idemhook_store_errors_total{op}                        counter (calls skipped by the breaker included)
//	idemhook_breaker_open                                  gauge, 1 while the breaker is open
//	idemhook_build_info{version,goversion}                 gauge, always 1
//
// and, after [Metrics.RegisterAudit], idemhook_audit_dropped_total and
// idemhook_audit_failed_total.
//
// The package lives in its own directory because it imports
// github.com/prometheus/client_golang. Package idemhook imports only the
// standard library.
package promhook

import (
	"errors"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/hookchain"
	"github.com/prometheus/client_golang/prometheus"
)

// modulePath is idemhook's module, looked up in the build information for
// idemhook_build_info's version.
const modulePath = "github.com/idemhook/idemhook"

// storeOps are the operations of idemhook.StoreCallInfo.Op.
var storeOps = []string{"claim", "complete", "release", "extend", "get"}

// Metrics holds the collectors of one middleware. Its methods are the hooks
// of idemhook.Options and are safe for concurrent use.
type Metrics struct {
	reg        prometheus.Registerer
	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	omitted    *prometheus.CounterVec
	items      *prometheus.CounterVec
	storeOps   *prometheus.HistogramVec
	storeErrs  *prometheus.CounterVec
	breaker    prometheus.Gauge

	// The children of the vectors for each set of labels seen, so that a
	// delivery doesn't hash its labels again. Sources and store operations
	// are few, and outcomes a fixed set.
	byDelivery sync.Map // deliveryLabels -> *deliveryMetrics
	byOp       sync.Map // op -> *opMetrics
}

type deliveryLabels struct {
	source  string
	outcome idemhook.Outcome
}

type deliveryMetrics struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

type opMetrics struct {
	latency prometheus.Observer
	errs    prometheus.Counter
}

// Config configures [New].
type Config struct {
	// Registerer receives the collectors. New fails if it already holds
	// metrics of the same names: a registry holds one middleware's set,
	// unless each middleware registers through
	// prometheus.WrapRegistererWith with the same label name and its own
	// value. Default: prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer

	// Version is idemhook_build_info's version label, for a binary that
	// knows its version better than its build information does (one built
	// with -ldflags "-X ..." outside a module version). Default: the
	// idemhook module's version in the build information, or "(devel)".
	Version string
}

// New creates the collectors and registers them on cfg.Registerer.
// [Metrics.Instrument] wires them into a middleware's options.
func New(cfg Config) (*Metrics, error) {
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &Metrics{
		reg: reg,
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_deliveries_total",
			Help: "Deliveries by source and outcome (processed, replayed, in_flight_*, mismatch, failed_released, store_error_*, key_error, signature_invalid, too_large, overloaded).",
		}, []string{"source", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemhook_delivery_duration_seconds",
			Help:    "Time from a delivery's arrival to its answer, by source and outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source", "outcome"}),
		omitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_body_omitted_total",
			Help: "Deliveries whose answer was over the route's MaxStoredBodyBytes, by source and outcome: processed (sent in full, stored without its body), replayed (an empty body replayed).",
		}, []string{"source", "outcome"}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_items_total",
			Help: "Items of batched deliveries (Route.Items) by source and state: processed (run and stored), replayed (done before), failed (released for the provider's retry), in_flight (left to another delivery).",
		}, []string{"source", "state"}),
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
	}
	// Every operation's error counter exists from the start, at 0. The
	// first failure is then an increase that rate() and the alert rules
	// see, not the series' first sample.
	for _, op := range storeOps {
		m.storeErrs.WithLabelValues(op)
	}
	version, goVersion := buildVersion()
	if cfg.Version != "" {
		version = cfg.Version
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idemhook_build_info",
		Help: "Always 1; the labels name the idemhook version and the Go release it was built with.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, goVersion).Set(1)
	for _, c := range []prometheus.Collector{m.deliveries, m.duration, m.omitted, m.items, m.storeOps, m.storeErrs, m.breaker, build} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Instrument returns opts with the hooks set to feed m. Hooks already set
// in opts are kept and called first.
func (m *Metrics) Instrument(opts idemhook.Options) idemhook.Options {
	return hookchain.Instrument(opts, hookchain.Hooks{OnDelivery: m.OnDelivery, OnStoreCall: m.OnStoreCall, OnBreakerChange: m.OnBreakerChange})
}

// OnDelivery counts one finished delivery and observes its duration.
func (m *Metrics) OnDelivery(d idemhook.DeliveryInfo) {
	l := deliveryLabels{d.Source, d.Outcome}
	v, ok := m.byDelivery.Load(l)
	if !ok {
		v, _ = m.byDelivery.LoadOrStore(l, &deliveryMetrics{
			count:    m.deliveries.WithLabelValues(d.Source, string(d.Outcome)),
			duration: m.duration.WithLabelValues(d.Source, string(d.Outcome)),
		})
	}
	dm := v.(*deliveryMetrics)
	dm.count.Inc()
	dm.duration.Observe(d.Duration.Seconds())
	if d.BodyOmitted {
		m.omitted.WithLabelValues(d.Source, string(d.Outcome)).Inc()
	}
	if it := d.Items; it != nil {
		for _, c := range []struct {
			state string
			n     int
		}{{"processed", it.Processed}, {"replayed", it.Replayed}, {"failed", it.Failed}, {"in_flight", it.InFlight}} {
			if c.n > 0 {
				m.items.WithLabelValues(d.Source, c.state).Add(float64(c.n))
			}
		}
	}
}

// OnStoreCall observes one store call's latency and counts it when it
// failed or was skipped by the open breaker.
func (m *Metrics) OnStoreCall(c idemhook.StoreCallInfo) {
	v, ok := m.byOp.Load(c.Op)
	if !ok {
		v, _ = m.byOp.LoadOrStore(c.Op, &opMetrics{
			latency: m.storeOps.WithLabelValues(c.Op),
			errs:    m.storeErrs.WithLabelValues(c.Op),
		})
	}
	om := v.(*opMetrics)
	if !c.Skipped {
		om.latency.Observe(c.Duration.Seconds())
	}
	if c.Err != nil || c.Skipped {
		om.errs.Inc()
	}
}

// OnBreakerChange sets idemhook_breaker_open.
func (m *Metrics) OnBreakerChange(open bool) {
	if open {
		m.breaker.Set(1)
	} else {
		m.breaker.Set(0)
	}
}

// AuditCounts is what [Metrics.RegisterAudit] reads: *audit.Recorder has
// both methods.
type AuditCounts interface {
	Dropped() uint64 // entries dropped because the queue was full
	Failed() uint64  // entries lost because the sink's write failed
}

// RegisterAudit registers idemhook_audit_dropped_total and
// idemhook_audit_failed_total, read from rec at scrape time, on the
// registerer m was created with.
func (m *Metrics) RegisterAudit(rec AuditCounts) error {
	if rec == nil {
		return errors.New("promhook: RegisterAudit: nil recorder")
	}
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "idemhook_audit_dropped_total",
		Help: "Audit entries dropped because the recorder's buffer was full (the sink is down or too slow; waiting entries are retried).",
	}, func() float64 { return float64(rec.Dropped()) })
	failed := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "idemhook_audit_failed_total",
		Help: "Audit entries never written: the sink still refused them when the recorder closed.",
	}, func() float64 { return float64(rec.Failed()) })
	if err := m.reg.Register(dropped); err != nil {
		return err
	}
	if err := m.reg.Register(failed); err != nil {
		m.reg.Unregister(dropped)
		return err
	}
	return nil
}

// buildVersion is the idemhook module's version as the binary records it:
// the main module's for the gateway, the dependency's for a service, and
// "(devel)" for a build without module information.
func buildVersion() (version, goVersion string) {
	version, goVersion = "(devel)", runtime.Version()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, goVersion
	}
	mod := &bi.Main
	if mod.Path != modulePath {
		mod = nil
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				mod = d
				if d.Replace != nil && d.Replace.Version != "" {
					mod = d.Replace
				}
				break
			}
		}
	}
	if mod != nil && mod.Version != "" {
		version = mod.Version
	}
	return version, goVersion
}
