package config

import "go.yaml.in/yaml/v3"

// Limits is the limits: section: bounds on what the gateway holds at once,
// so that a flood of deliveries is answered 503 instead of taking the
// process past its memory or its open files. A zero field means the default
// the gateway derives when it starts (see the fields), not "no bound".
type Limits struct {
	// BodyMemory bounds the request-body bytes held at once, across the
	// routes (idemhook.Options.MaxHeldBodyBytes). 0: a quarter of the
	// process's memory limit (GOMEMLIMIT, which idemhook serve sets from
	// the container's cgroup limit when it is not set) when there is one,
	// else 256MiB; raised to twice the largest route max_body if that is
	// more. Set here, it must be above every route's max_body.
	BodyMemory int64
	// MaxConnections bounds the open connections of the public listener;
	// beyond it a connection is answered 503 and closed. 0: half the
	// open-file limit less 128 (each delivery takes a connection to the
	// upstream too), at most 8192.
	MaxConnections int
	// MaxDeliveries bounds the requests inside the routes at once; beyond
	// it a request is answered 503 with Retry-After. 0: MaxConnections.
	MaxDeliveries int
}

// limitsSchema is the limits: section.
var limitsSchema = table[Limits]{fields: []field[Limits]{
	{name: "body_memory", to: func(l *Limits) any { return &l.BodyMemory },
		min: 1 << 20, bad: "%s is under 1MiB: a few ordinary deliveries would be refused with 503"},
	{name: "max_connections", to: func(l *Limits) any { return &l.MaxConnections }, min: 1, max: maxCount},
	{name: "max_deliveries", to: func(l *Limits) any { return &l.MaxDeliveries }, min: 1, max: maxCount},
}}

// limits checks the limits: section, n. A route whose
// max_body is not under an explicit body_memory is refused at its max_body:
// its bodies could never be held.
func (c *checker) limits(n *yaml.Node, routes []Route) Limits {
	var lim Limits
	vals := valuesOf(n)
	got := limitsSchema.read(c, vals, n, "limits", &lim)
	if v, ok := got["body_memory"]; ok {
		for _, rc := range routes {
			if rc.Route.MaxBodyBytes >= lim.BodyMemory {
				c.errorf(vals["body_memory"].Node, "limits.body_memory", "%s is not above %s.max_body (%d bytes): a body of that size could never be held, and its deliveries would be refused with 503 for good",
					v, rc.Field, rc.Route.MaxBodyBytes)
			}
		}
	}
	if lim.MaxConnections > 0 && lim.MaxDeliveries > lim.MaxConnections {
		c.warnf(c.key(vals["max_deliveries"]), "limits.max_deliveries", "%d is above max_connections %d: one connection carries one delivery at a time over HTTP/1.1, so the bound is max_connections", lim.MaxDeliveries, lim.MaxConnections)
	}
	return lim
}
