package gateway

import (
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook/queue"
	"github.com/prometheus/client_golang/prometheus"
)

// queueMetrics are the metrics of the queued routes: attempts by result and
// dead events as counters, and, read from the queue's counts at scrape
// time, its depth by state and the oldest event's age.
type queueMetrics struct {
	attempts *prometheus.CounterVec
	dead     *prometheus.CounterVec
}

func newQueueMetrics(reg *prometheus.Registry) *queueMetrics {
	qm := &queueMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_queue_attempts_total",
			Help: "Delivery attempts of queued events, by route, destination (empty on a route without destinations) and result: delivered, retried, dead, superseded (the attempt outlived its lease) or cut (by a shutdown).",
		}, []string{"route", "destination", "result", "status"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemhook_queue_dead_total",
			Help: "Queued events that became dead (attempts or maximum age ran out, or the backend refused them for good), by route and destination.",
		}, []string{"route", "destination"}),
	}
	reg.MustRegister(qm.attempts, qm.dead)
	return qm
}

// onAttempt counts one attempt.
func (m *metrics) onAttempt(o queue.Observation) {
	result := "retried"
	switch {
	case o.Superseded:
		result = "superseded"
	case o.Cut:
		result = "cut"
	case o.Verdict == queue.Delivered:
		result = "delivered"
	case o.Verdict == queue.Kill:
		result = "dead"
	}
	status := "none"
	switch {
	case o.Result.Status != 0:
		status = strconv.Itoa(o.Result.Status)
	case isTimeout(o.Result.Err):
		status = "timeout"
	case o.Result.Err != nil:
		status = "error"
	}
	route, dest, _ := strings.Cut(o.Route, "#") // a destination's queue: <path>#<name>
	m.queue.attempts.WithLabelValues(route, dest, result, status).Inc()
	if result == "dead" {
		m.queue.dead.WithLabelValues(route, dest).Inc()
	}
}

// queueCollector reports the queued routes' counts as the last read found
// them (every statsInterval).
type queueCollector struct {
	q     func() *queues
	depth *prometheus.Desc
	age   *prometheus.Desc
	next  *prometheus.Desc
	pause *prometheus.Desc
	open  *prometheus.Desc
	// The settlements the store failed to record: kept and retried
	// (pending), and the failures so far.
	settlePending  *prometheus.Desc
	settleFailures *prometheus.Desc
}

func newQueueCollector(q func() *queues) *queueCollector {
	return &queueCollector{
		q:     q,
		depth: prometheus.NewDesc("idemhook_queue_events", "Events in a queued route's queue, by state: queued (waiting for their first attempt), retrying, running, dead.", []string{"route", "destination", "state"}, nil),
		age:   prometheus.NewDesc("idemhook_queue_oldest_age_seconds", "Age of the oldest event of a queued route that is not yet delivered nor dead; 0 when none.", []string{"route", "destination"}, nil),
		next:  prometheus.NewDesc("idemhook_queue_next_attempt_seconds", "Seconds until the earliest queued event of a route is due (negative: overdue); absent when none is queued.", []string{"route", "destination"}, nil),
		pause: prometheus.NewDesc("idemhook_queue_paused", "1 while a queued route's deliveries are paused.", []string{"route", "destination"}, nil),
		open:  prometheus.NewDesc("idemhook_queue_backend_down", "1 while a queued route's backend is taken for down (its breaker is open: one probe a second, no attempts spent).", []string{"route", "destination"}, nil),
		settlePending: prometheus.NewDesc("idemhook_queue_settles_pending",
			"Attempts of a queued route whose outcome the store failed to record; the gateway keeps them and tries again at every poll.", []string{"route", "destination"}, nil),
		settleFailures: prometheus.NewDesc("idemhook_queue_settle_failures_total",
			"Times the store failed to record the outcome of an attempt of a queued route, retries of a kept one included.", []string{"route", "destination"}, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depth, c.age, c.next, c.pause, c.open, c.settlePending, c.settleFailures} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	q := c.q()
	if q == nil {
		return
	}
	now := time.Now()
	for _, qr := range q.list() {
		st := qr.stats.Load()
		for _, s := range []struct {
			state string
			n     int64
		}{{"queued", st.Queued}, {"retrying", st.Retrying}, {"running", st.Running}, {"dead", st.Dead}} {
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(s.n), qr.path, qr.destination, s.state)
		}
		age := 0.0
		if !st.Oldest.IsZero() {
			age = now.Sub(st.Oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age, qr.path, qr.destination)
		if !st.NextAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.next, prometheus.GaugeValue, st.NextAt.Sub(now).Seconds(), qr.path, qr.destination)
		}
		ch <- prometheus.MustNewConstMetric(c.pause, prometheus.GaugeValue, b2f(st.Paused), qr.path, qr.destination)
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, b2f(q.disp.BreakerOpen(qr.name)), qr.path, qr.destination)
		ch <- prometheus.MustNewConstMetric(c.settlePending, prometheus.GaugeValue, float64(q.disp.SettlesPending(qr.name)), qr.path, qr.destination)
		ch <- prometheus.MustNewConstMetric(c.settleFailures, prometheus.CounterValue, float64(q.disp.SettleFailures(qr.name)), qr.path, qr.destination)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
