package config

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/idemhook/idemhook/gateway/filter"
	"go.yaml.in/yaml/v3"
)

// Destination is one entry of a queued route's destinations: a backend the
// route's events go to, each on its own queue (docs/destinations.md).
type Destination struct {
	Line  int    // line of the entry in the file
	Field string // "routes[i].destinations[j]": where it is, for errors
	// Name names the destination's queue, in the admin API, the metrics
	// and the audit trail, and ends its Idempotency-Key
	// (<store key>#<name>). It matches destinationName.
	Name     string
	Upstream *url.URL
	// Filter, when not nil, is the destination's filter: the destination
	// gets only the events it matches.
	Filter *filter.Filter
	// Queue is how the destination's events are delivered: the route's
	// queue: settings, with the destination's own queue: fields in their
	// place.
	Queue Queue
}

// destinationName is what a destination's name may be: it ends the
// Idempotency-Key after a '#', which it can't hold, so the last '#' of the
// key splits it whatever the provider's key holds.
var destinationName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// checkDestinationName checks a destination's name.
func checkDestinationName(v string) error {
	if !destinationName.MatchString(v) {
		return fmt.Errorf("invalid name %q: lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 63, e.g. billing", v)
	}
	return nil
}

// destinationSchema is an entry of a route's destinations:.
var destinationSchema = table[Destination]{fields: []field[Destination]{
	{name: "name", to: func(d *Destination) any { return &d.Name }, check: checkDestinationName,
		missing: "the destination's name, e.g. billing: it names its queue and ends its Idempotency-Key"},
	{name: "upstream", to: func(d *Destination) any { return &d.Upstream },
		missing: "the URL the destination's events are delivered to, e.g. http://billing:3000/stripe"},
	{name: "filter"}, // read by destinations: a CEL expression
	{name: "queue", sub: queueSchema.layout()},
}}

// destinationQueueSchema reads a destination's queue: over a copy of its
// route's: the queue schema without its defaults, which the route's
// settings stand in for.
var destinationQueueSchema = func() table[Queue] {
	t := table[Queue]{fields: append([]field[Queue](nil), queueSchema.fields...)}
	for i := range t.fields {
		t.fields[i].def = nil
	}
	return t
}()

// destinations reads a queued route's destinations:, once delivery has read
// its queue: settings, which each destination's inherits.
func (c *checker) destinations(in *routeInputs, rc *Route) {
	l := in.f["destinations"]
	if l.Node == nil {
		return
	}
	at := join(in.at, "destinations")
	switch {
	case l.Kind != yaml.SequenceNode:
		return // reported by shape
	case len(l.Content) == 0:
		c.errorf(l.Node, at, "empty: list the backends the route's events go to, each with a name and an upstream; or remove destinations and set upstream")
		return
	case in.f["upstream"].Node != nil:
		c.errorf(in.own("upstream"), join(in.at, "upstream"), "can't be combined with destinations: a route delivers to its upstream or to its destinations; move it into destinations as {name: ..., upstream: ...}")
	}
	switch {
	case rc.Deliver != DeliverQueue:
		c.errorf(in.own("destinations"), at, "needs deliver: queue: each destination's events are delivered from a queue of their own, with the route answered once (a proxied delivery has one backend's answer to give back)")
		return
	}
	seen := map[string]string{}
	for j, n := range l.Content {
		if c.wrong[n] {
			continue // reported by shape
		}
		dat := fmt.Sprintf("%s[%d]", at, j)
		vals := valuesOf(n)
		d := Destination{Line: n.Line, Field: dat}
		destinationSchema.read(c, vals, n, dat, &d)
		if d.Name != "" {
			if prev, dup := seen[d.Name]; dup {
				c.errorf(vals["name"].Node, join(dat, "name"), "duplicate destination %q (also %s): each destination's name is its own", d.Name, prev)
			}
			seen[d.Name] = fmt.Sprintf("%s, line %d", dat, n.Line)
		}
		d.Filter = c.filterOf(vals["filter"], join(dat, "filter"))
		d.Queue = rc.Queue
		if q := vals["queue"].Node; q != nil {
			c.queueSettings(valuesOf(q), q, join(dat, "queue"), &d.Queue, destinationQueueSchema, 0)
		}
		rc.Destinations = append(rc.Destinations, d)
	}
}

// LongestMaxAge is the longest an event of the route may stay queued: its
// queue's max_age, or its destinations' longest. Its key must outlive it.
func (r *Route) LongestMaxAge() time.Duration {
	age := r.Queue.MaxAge
	for _, d := range r.Destinations {
		age = max(age, d.Queue.MaxAge)
	}
	return age
}

// Lanes returns the route's queues: one per destination, or the route's own
// when it has an upstream. Each lane's Name is what the queue's engine,
// the admin API's route and the metrics call it (the route's path, or
// <path>#<destination>).
func (r *Route) Lanes() []Lane {
	if len(r.Destinations) == 0 {
		return []Lane{{Name: r.Path, Upstream: r.Upstream, Queue: r.Queue}}
	}
	out := make([]Lane, len(r.Destinations))
	for i, d := range r.Destinations {
		out[i] = Lane{Name: LaneName(r.Path, d.Name), Destination: d.Name, Upstream: d.Upstream, Filter: d.Filter, Queue: d.Queue}
	}
	return out
}

// A Lane is one queue of a queued route: the route's own, or one of its
// destinations'.
type Lane struct {
	Name        string // the route's path, or <path>#<destination>
	Destination string // "" for the route's own
	Upstream    *url.URL
	Filter      *filter.Filter
	Queue       Queue
}

// LaneName is the queue name of a route's destination: <path>#<name>. A
// path can't hold '#' (it is a URL's fragment), so the name splits it.
func LaneName(path, destination string) string {
	if destination == "" {
		return path
	}
	return path + "#" + destination
}
