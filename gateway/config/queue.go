package config

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"go.yaml.in/yaml/v3"
)

// Accept is the accept: setting of a queued route: what the provider is
// answered once its event is kept, and on every re-delivery of it (with
// Idempotent-Replayed: true).
type Accept struct {
	Status int
	Header http.Header
	Body   []byte
}

// Queue is the queue: setting of a queued route.
type Queue struct {
	Concurrency    int           // attempts in flight at once
	Rate           float64       // attempts started per second; 0: no bound
	AttemptTimeout time.Duration // one attempt, until the answer's headers
	MaxAttempts    int           // 0: bounded by MaxAge only
	MaxAge         time.Duration // after acceptance (or a redrive), retries stop: the event is dead
	BackoffMin     time.Duration
	BackoffMax     time.Duration
	RetryStatuses  []int // failing 4xx statuses retried besides 408 and 429
	// OrderBy, when set, delivers the events with one value of it one at a
	// time, in the order received: "header:<name>" or "json:<field>"
	// (a dotted path into the body's JSON object).
	OrderBy   string
	MaxQueued int // events not yet delivered past which new ones get 503
}

// Queue defaults.
const (
	DefaultQueueConcurrency = 8
	DefaultQueueMaxAge      = 72 * time.Hour
	DefaultQueueMaxQueued   = 1_000_000
	DefaultQueueBackoffMin  = time.Second
	DefaultQueueBackoffMax  = 10 * time.Minute
	defaultAcceptStatus     = http.StatusAccepted
)

// DefaultAcceptBody is the body of the default accept answer.
const DefaultAcceptBody = `{"status":"accepted"}` + "\n"

// acceptFile is the accept: section as decoded: each field a leaf that the
// checker below reads.
type acceptFile struct {
	Status  leaf `yaml:"status"`
	Body    leaf `yaml:"body"`
	Headers leaf `yaml:"headers"`
}

// queueFile is the queue: section as decoded: each field a leaf that the
// checker below reads.
type queueFile struct {
	Concurrency    leaf `yaml:"concurrency"`
	Rate           leaf `yaml:"rate"`
	AttemptTimeout leaf `yaml:"attempt_timeout"`
	MaxAttempts    leaf `yaml:"max_attempts"`
	MaxAge         leaf `yaml:"max_age"`
	BackoffMin     leaf `yaml:"backoff_min"`
	BackoffMax     leaf `yaml:"backoff_max"`
	RetryStatuses  leaf `yaml:"retry_statuses"`
	OrderBy        leaf `yaml:"order_by"`
	MaxQueued      leaf `yaml:"max_queued"`
}

// delivery checks deliver, accept and queue.
func (c *checker) delivery(in *routeInputs, rc *Route) {
	f, at := in.f, in.at
	field := func(name string) string { return join(at, name) }
	rc.Deliver = c.oneOf(f.Deliver, field("deliver"), DeliverProxy, DeliverProxy, DeliverQueue)
	rc.RespondWithin = c.duration(f.RespondWithin, field("respond_within"), 0)
	if rc.RespondWithin > 0 && rc.Deliver == DeliverQueue {
		c.warnf(c.key(f.RespondWithin), field("respond_within"), "does nothing with deliver: queue, which answers at once (respond_within is for deliver: proxy)")
		rc.RespondWithin = 0
	}
	if !rc.Queued() {
		for name, n := range map[string]*yaml.Node{"accept": valueOf(in.node, "accept"), "queue": valueOf(in.node, "queue")} {
			if n != nil {
				c.warnf(n, field(name), "does nothing with deliver: proxy without respond_within (set deliver: queue, or respond_within)")
			}
		}
		return
	}
	a := &rc.Accept
	a.Status = defaultAcceptStatus
	if v, ok := c.str(f.Accept.Status, field("accept.status")); ok {
		st, err := strconv.Atoi(v)
		if err != nil || st < 200 || st > 299 {
			c.errorf(f.Accept.Status.Node, field("accept.status"), "invalid status %q: the accept answer must be a 2xx, or the provider sends the event again", v)
		} else {
			a.Status = st
		}
	}
	a.Body = []byte(DefaultAcceptBody)
	a.Header = http.Header{"Content-Type": {"application/json"}}
	if v, ok := c.str(f.Accept.Body, field("accept.body")); ok {
		a.Body = []byte(v)
		a.Header = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
		if strings.HasPrefix(strings.TrimSpace(v), "{") || strings.HasPrefix(strings.TrimSpace(v), "[") {
			a.Header.Set("Content-Type", "application/json")
		}
	}
	if n := f.Accept.Headers.Node; n != nil {
		if n.Kind != yaml.MappingNode {
			c.errorf(n, field("accept.headers"), "expected a mapping of header names to values, got %s", describe(n))
		}
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
			name := field("accept.headers." + k.Value)
			if !validHeaderName(k.Value) {
				c.errorf(k, name, "invalid header name %q", k.Value)
				continue
			}
			val, ok := c.str(leaf{v}, name)
			if !ok {
				continue
			}
			a.Header.Set(k.Value, val)
			// The accept answer is stored and replayed: its headers too.
			if !slices.ContainsFunc(append(idemhook.RepresentationHeaders(), rc.Route.ReplayHeaders...), func(h string) bool { return strings.EqualFold(h, k.Value) }) {
				rc.Route.ReplayHeaders = append(rc.Route.ReplayHeaders, http.CanonicalHeaderKey(k.Value))
			}
		}
	}

	q := &rc.Queue
	qf := &f.Queue
	qfield := func(name string) string { return field("queue." + name) }
	q.Concurrency = c.count(qf.Concurrency, qfield("concurrency"), DefaultQueueConcurrency)
	if v, ok := c.str(qf.Rate, qfield("rate")); ok {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 1e6 {
			c.errorf(qf.Rate.Node, qfield("rate"), "invalid rate %q: attempts per second, a positive number such as 50 or 0.5", v)
		} else {
			q.Rate = r
		}
	}
	q.AttemptTimeout = c.duration(qf.AttemptTimeout, qfield("attempt_timeout"), rc.UpstreamTimeout)
	if qf.MaxAttempts.Node != nil {
		q.MaxAttempts = c.count(qf.MaxAttempts, qfield("max_attempts"), 0)
	}
	q.MaxAge = c.duration(qf.MaxAge, qfield("max_age"), DefaultQueueMaxAge)
	q.BackoffMin = c.duration(qf.BackoffMin, qfield("backoff_min"), DefaultQueueBackoffMin)
	q.BackoffMax = c.duration(qf.BackoffMax, qfield("backoff_max"), DefaultQueueBackoffMax)
	if q.BackoffMax < q.BackoffMin {
		c.errorf(c.key(qf.BackoffMax), qfield("backoff_max"), "%s is below backoff_min %s", FormatDuration(q.BackoffMax), FormatDuration(q.BackoffMin))
	}
	if vs, ok := c.strList(qf.RetryStatuses, qfield("retry_statuses")); ok {
		for i, v := range vs {
			st, err := strconv.Atoi(v)
			if err != nil || st < 400 || st > 499 {
				c.errorf(qf.RetryStatuses.Content[i], fmt.Sprintf("%s[%d]", qfield("retry_statuses"), i),
					"invalid status %q: want a 4xx to retry (5xx, 408 and 429 always are)", v)
				continue
			}
			q.RetryStatuses = append(q.RetryStatuses, st)
		}
	}
	if v, ok := c.str(qf.OrderBy, qfield("order_by")); ok {
		if rc.RespondWithin > 0 {
			c.errorf(qf.OrderBy.Node, qfield("order_by"), "can't be kept with respond_within: the proxy sends each delivery at once, out of any group's order; use deliver: queue to deliver in order")
		} else if err := checkOrderBy(v); err != nil {
			c.errorf(qf.OrderBy.Node, qfield("order_by"), "%v", err)
		} else {
			q.OrderBy = v
		}
	}
	q.MaxQueued = c.count(qf.MaxQueued, qfield("max_queued"), DefaultQueueMaxQueued)
	if rc.RespondWithin > 0 && rc.RespondWithin >= q.AttemptTimeout {
		c.warnf(c.key(f.RespondWithin), field("respond_within"), "%s is not below the attempt's timeout (%s: queue.attempt_timeout, default upstream_timeout): the backend's attempt ends first, so the budget never runs out",
			FormatDuration(rc.RespondWithin), FormatDuration(q.AttemptTimeout))
	}
}

// respondWithinTimeout warns when a route's respond_within budget is not
// below its provider's response timeout: the provider gives up first.
func (c *checker) respondWithinTimeout(in *routeInputs, rc *Route) {
	p := rc.Route.Preset
	if rc.RespondWithin == 0 || p == nil || p.ResponseTimeout == 0 || rc.RespondWithin < p.ResponseTimeout {
		return
	}
	c.warnf(c.key(in.f.RespondWithin), join(in.at, "respond_within"), "%s is not below %s's response timeout (%s): the provider counts the delivery as failed before the gateway answers; set it a second or more below, e.g. %s",
		FormatDuration(rc.RespondWithin), p.Name, FormatDuration(p.ResponseTimeout), FormatDuration(max(p.ResponseTimeout-time.Second, p.ResponseTimeout/2)))
}

// checkOrderBy checks an order_by value: header:<name> or json:<field>.
func checkOrderBy(v string) error {
	kind, name, ok := strings.Cut(v, ":")
	switch {
	case !ok || name == "":
	case kind == "header" && validHeaderName(name):
		return nil
	case kind == "json" && !strings.Contains(name, "..") && !strings.HasPrefix(name, ".") && !strings.HasSuffix(name, "."):
		return nil
	}
	return fmt.Errorf("invalid order_by %q: want header:<name> (header:X-Shop-Domain) or json:<field> (json:data.customer.id)", v)
}

// queueStore checks, once the store and the routes are known, what a
// queued route needs of them: a store that keeps the queue durably, and a
// key that outlives its queued event.
func (c *checker) queueStore(cfg *Config) {
	for _, in := range c.routes {
		rc := &cfg.Routes[in.i]
		if !rc.Queued() {
			continue
		}
		field := fieldOf(rc)
		n := in.own(field)
		switch cfg.Store.Driver {
		case "redis":
			c.errorf(n, join(in.at, field), "deliver: queue and respond_within are refused on the redis store: Redis replicates asynchronously, so a failover can lose an event the provider was told was accepted. Use store driver sqlite (one gateway) or postgres (several gateways share one queue)")
		case "memory":
			c.warnf(n, join(in.at, field), "the memory store queues in memory: a restart loses every event not yet delivered; use store driver sqlite or postgres to keep them")
		}
	}
}

// queueTTL makes a queued route's key outlive its event: a provider's
// re-send after the key expired would be accepted and delivered again.
func (c *checker) queueTTL(in *routeInputs, rc *Route) {
	r := &rc.Route
	var window time.Duration
	if r.Preset != nil {
		window = r.Preset.RetryWindow
	}
	need := rc.Queue.MaxAge + window
	switch {
	case r.TTL == 0:
		const day = 24 * time.Hour
		r.TTL = max(r.Preset.DefaultTTL(), (need+day+day-1)/day*day)
	case r.TTL < need:
		c.errorf(in.own("ttl"), join(in.at, "ttl"), "%s is shorter than queue.max_age (%s)%s: an event may stay queued longer than its key, and a re-send after the key expired would be delivered again; set ttl to at least %s or lower queue.max_age",
			FormatDuration(r.TTL), FormatDuration(rc.Queue.MaxAge), windowText(r.Preset), FormatDuration(need))
	}
}

func windowText(p *idemhook.Preset) string {
	if p == nil || p.RetryWindow == 0 {
		return ""
	}
	return fmt.Sprintf(" plus %s's retry window (%s)", p.Name, FormatDuration(p.RetryWindow))
}

// fieldOf names the setting that makes a route queue.
func fieldOf(rc *Route) string {
	if rc.Deliver == DeliverQueue {
		return "deliver"
	}
	return "respond_within"
}
