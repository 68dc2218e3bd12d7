package config

import (
	"fmt"
	"math"
	"net/http"
	"slices"
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

// acceptSchema is the accept: section of a route.
var acceptSchema = table[Accept]{fields: []field[Accept]{
	{name: "status", to: func(a *Accept) any { return &a.Status }, def: defaultAcceptStatus, min: 200, max: 299,
		bad: "invalid status %q: the accept answer must be a 2xx, or the provider sends the event again"},
	{name: "body"},    // read by delivery, with its Content-Type
	{name: "headers"}, // read by delivery: header names to values
}}

// queueSchema is the queue: section of a route. attempt_timeout's default
// is the route's upstream_timeout.
var queueSchema = table[Queue]{fields: []field[Queue]{
	{name: "concurrency", to: func(q *Queue) any { return &q.Concurrency }, def: DefaultQueueConcurrency, min: 1, max: maxCount},
	{name: "rate", to: func(q *Queue) any { return &q.Rate }, min: math.SmallestNonzeroFloat64, max: 1e6, // 0: no bound
		bad: "invalid rate %q: attempts per second, a positive number such as 50 or 0.5"},
	{name: "attempt_timeout", to: func(q *Queue) any { return &q.AttemptTimeout }},
	{name: "max_attempts", to: func(q *Queue) any { return &q.MaxAttempts }, min: 1, max: maxCount}, // 0: bounded by max_age only
	{name: "max_age", to: func(q *Queue) any { return &q.MaxAge }, def: DefaultQueueMaxAge},
	{name: "backoff_min", to: func(q *Queue) any { return &q.BackoffMin }, def: DefaultQueueBackoffMin},
	{name: "backoff_max", to: func(q *Queue) any { return &q.BackoffMax }, def: DefaultQueueBackoffMax},
	{name: "retry_statuses", to: func(q *Queue) any { return &q.RetryStatuses }, min: 400, max: 499,
		bad: "invalid status %q: want a 4xx to retry (5xx, 408 and 429 always are)"},
	{name: "order_by"}, // read by delivery: refused with respond_within
	{name: "max_queued", to: func(q *Queue) any { return &q.MaxQueued }, def: DefaultQueueMaxQueued, min: 1, max: maxCount},
}}

// delivery checks what deliver and respond_within ask of the route, and
// accept and queue.
func (c *checker) delivery(in *routeInputs, rc *Route) {
	f, at := in.f, in.at
	field := func(name string) string { return join(at, name) }
	if rc.RespondWithin > 0 && rc.Deliver == DeliverQueue {
		c.warnf(c.key(f["respond_within"]), field("respond_within"), "does nothing with deliver: queue, which answers at once (respond_within is for deliver: proxy)")
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
	acc := in.accept()
	acceptSchema.read(c, acc, f["accept"].Node, field("accept"), a)
	a.Body = []byte(DefaultAcceptBody)
	a.Header = http.Header{"Content-Type": {"application/json"}}
	if v, ok := c.str(acc["body"], field("accept.body")); ok {
		a.Body = []byte(v)
		a.Header = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
		if strings.HasPrefix(strings.TrimSpace(v), "{") || strings.HasPrefix(strings.TrimSpace(v), "[") {
			a.Header.Set("Content-Type", "application/json")
		}
	}
	if n := acc["headers"].Node; n != nil {
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
	q.AttemptTimeout = rc.UpstreamTimeout
	c.queueSettings(valuesOf(f["queue"].Node), f["queue"].Node, field("queue"), q, queueSchema, rc.RespondWithin)
	if rc.RespondWithin > 0 && rc.RespondWithin >= q.AttemptTimeout {
		c.warnf(c.key(f["respond_within"]), field("respond_within"), "%s is not below the attempt's timeout (%s: queue.attempt_timeout, default upstream_timeout): the backend's attempt ends first, so the budget never runs out",
			FormatDuration(rc.RespondWithin), FormatDuration(q.AttemptTimeout))
	}
}

// queueSettings reads the queue: mapping n, whose fields are qf, at at into
// q by schema: a route's (queueSchema, over its defaults) or a
// destination's (over its route's settings). respondWithin is the route's.
func (c *checker) queueSettings(qf values, n *yaml.Node, at string, q *Queue, schema table[Queue], respondWithin time.Duration) {
	qfield := func(name string) string { return join(at, name) }
	schema.read(c, qf, n, at, q)
	if q.BackoffMax < q.BackoffMin {
		at := c.key(qf["backoff_max"])
		if at == nil { // a destination's backoff_min over its route's backoff_max
			at = c.key(qf["backoff_min"])
		}
		c.errorf(at, qfield("backoff_max"), "%s is below backoff_min %s", FormatDuration(q.BackoffMax), FormatDuration(q.BackoffMin))
	}
	if v, ok := c.str(qf["order_by"], qfield("order_by")); ok {
		if respondWithin > 0 {
			c.errorf(qf["order_by"].Node, qfield("order_by"), "can't be kept with respond_within: the proxy sends each delivery at once, out of any group's order; use deliver: queue to deliver in order")
		} else if err := checkOrderBy(v); err != nil {
			c.errorf(qf["order_by"].Node, qfield("order_by"), "%v", err)
		} else {
			q.OrderBy = v
		}
	}
}

// respondWithinTimeout warns when a route's respond_within budget is not
// below its provider's response timeout: the provider gives up first.
func (c *checker) respondWithinTimeout(in *routeInputs, rc *Route) {
	p := rc.Route.Preset
	if rc.RespondWithin == 0 || p == nil {
		return
	}
	timeout := in.responseTimeout(rc.Provider)
	if timeout == 0 || rc.RespondWithin < timeout {
		return
	}
	c.warnf(c.key(in.f["respond_within"]), join(in.at, "respond_within"), "%s is not below %s's response timeout (%s): the provider counts the delivery as failed before the gateway answers; set it a second or more below, e.g. %s",
		FormatDuration(rc.RespondWithin), p.Name, FormatDuration(timeout), FormatDuration(max(timeout-time.Second, timeout/2)))
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
		switch {
		case refusesQueue(cfg.Store.Driver):
			c.errorf(n, join(in.at, field), "deliver: queue and respond_within are refused on the redis store: Redis replicates asynchronously, so a failover can lose an event the provider was told was accepted. Use store driver sqlite (one gateway) or postgres (several gateways share one queue)")
		case cfg.Store.Driver == "memory":
			c.warnf(n, join(in.at, field), "the memory store queues in memory: a restart loses every event not yet delivered; use store driver sqlite or postgres to keep them")
		}
	}
}

// refusesQueue reports whether the store driver refuses queued routes:
// Redis replicates asynchronously, so a failover can lose an event the
// provider was told was accepted. Parse and Validate refuse them by it.
func refusesQueue(driver string) bool { return driver == "redis" }

// keyOutlivesQueue reports whether a key that lives ttl outlives a queued
// event, which may stay queued maxAge and be sent again by the provider
// for its retry window: a re-send after the key expired would be accepted
// and delivered again. Parse and Validate refuse a ttl that does not.
func keyOutlivesQueue(ttl, maxAge, window time.Duration) bool { return ttl >= maxAge+window }

// queueTTL makes a queued route's key outlive its event: a provider's
// re-send after the key expired would be accepted and delivered again.
func (c *checker) queueTTL(in *routeInputs, rc *Route) {
	r := &rc.Route
	var window time.Duration
	if r.Preset != nil {
		window = r.Preset.RetryWindow
	}
	need := rc.LongestMaxAge() + window
	switch {
	case r.TTL == 0:
		const day = 24 * time.Hour
		r.TTL = max(r.Preset.DefaultTTL(), (need+day+day-1)/day*day)
	case !keyOutlivesQueue(r.TTL, rc.LongestMaxAge(), window):
		c.errorf(in.own("ttl"), join(in.at, "ttl"), "%s is shorter than queue.max_age (%s)%s: an event may stay queued longer than its key, and a re-send after the key expired would be delivered again; set ttl to at least %s or lower queue.max_age",
			FormatDuration(r.TTL), FormatDuration(rc.LongestMaxAge()), windowText(r.Preset), FormatDuration(need))
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
