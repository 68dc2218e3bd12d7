package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/idemhook/idemhook"
)

// Validate checks what the gateway needs of a Config built by hand, before
// it serves one: every route has a path of its own starting with '/', an
// http or https upstream with a host or, on a queued route, Destinations
// (each with a valid name of its own, an upstream and positive queue
// settings), and a source that no other route has unless all of them set
// ShareKeys, and its idemhook.Route passes idemhook.Route.Validate, and no
// filter (the route's or a destination's) meets Items in mode filter (its
// own or its preset's). Load and Parse only return Configs that pass,
// so gateway.New and Gateway.Reload call it for hand-built ones. Each
// problem is an Error naming the route's field (routes[1].upstream); its
// Line is the route's Line, 0 for a Config built by hand.
func (c *Config) Validate() error {
	var errs Errors
	add := func(rc *Route, i int, name, format string, args ...any) {
		errs = append(errs, Error{File: c.File, Line: rc.Line, Field: fmt.Sprintf("routes[%d].%s", i, name), Msg: fmt.Sprintf(format, args...)})
	}
	paths := map[string]int{}
	sources := map[string][]int{} // the routes of each source
	for i := range c.Routes {
		rc := &c.Routes[i]
		switch j, seen := paths[rc.Path]; {
		case !strings.HasPrefix(rc.Path, "/"):
			add(rc, i, "path", "%q: a route's path starts with /", rc.Path)
		case seen:
			add(rc, i, "path", "%s is also the path of routes[%d]: give each route its own", rc.Path, j)
		default:
			paths[rc.Path] = i
		}
		if len(rc.Destinations) > 0 {
			for _, e := range validateDestinations(rc) {
				add(rc, i, e[0], "%s", e[1])
			}
		} else if !validUpstream(rc.Upstream) {
			add(rc, i, "upstream", "missing or not an http(s) URL with a host: the URL deliveries are forwarded to, e.g. http://127.0.0.1:3000/webhook")
		}
		if rc.Route.Source == "" {
			add(rc, i, "source", "missing: the provider's label, e.g. stone")
		} else {
			sources[rc.Route.Source] = append(sources[rc.Route.Source], i)
		}
		switch rc.Deliver {
		case DeliverQueue:
			if rc.RespondWithin > 0 {
				add(rc, i, "respond_within", "is for deliver: proxy: deliver: queue answers at once")
			}
			fallthrough
		case "", DeliverProxy:
			if !rc.Queued() {
				break
			}
			if refusesQueue(c.Store.Driver) {
				add(rc, i, "deliver", "deliver: queue is refused on the redis store (asynchronous replication can lose an accepted event): use sqlite or postgres")
			}
			if !acceptSchema.field("status").allows(float64(rc.Accept.Status)) {
				add(rc, i, "accept.status", "%d: the accept answer must be a 2xx", rc.Accept.Status)
			}
			if rc.Queue.MaxAge <= 0 || rc.Queue.Concurrency <= 0 || rc.Queue.AttemptTimeout <= 0 || rc.Queue.MaxQueued <= 0 {
				add(rc, i, "queue", "MaxAge, Concurrency, AttemptTimeout and MaxQueued must be positive (Parse sets their defaults)")
			}
			if rc.Route.TTL > 0 && !keyOutlivesQueue(rc.Route.TTL, rc.LongestMaxAge(), 0) {
				add(rc, i, "ttl", "%s is shorter than queue.max_age %s: a re-send after the key expired would be delivered again", FormatDuration(rc.Route.TTL), FormatDuration(rc.LongestMaxAge()))
			}
		default:
			add(rc, i, "deliver", "%q: want proxy or queue", rc.Deliver)
		}
		if itemsTogether(&rc.Route) {
			if rc.Filter != nil {
				add(rc, i, "filter", "%s", filterWithItems)
			}
			for j, d := range rc.Destinations {
				if d.Filter != nil {
					add(rc, i, fmt.Sprintf("destinations[%d].filter", j), "%s", filterWithItems)
				}
			}
		}
		if err := rc.Route.Validate(); err != nil {
			var re *idemhook.RouteError
			name := "route"
			if errors.As(err, &re) {
				name = "route." + re.Field
			}
			add(rc, i, name, "%v", err)
		}
	}
	for i := range c.Routes {
		rc := &c.Routes[i]
		src := rc.Route.Source
		if rc.ShareKeys || len(sources[src]) < 2 {
			continue
		}
		var others []string
		for _, j := range sources[src] {
			if j != i {
				others = append(others, fmt.Sprintf("routes[%d], line %d", j, c.Routes[j].Line))
			}
		}
		add(rc, i, "source", "%s", sharedSource(src, others))
	}
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, byLine)
	return errs
}

// validUpstream reports whether u is an http or https URL with a host.
func validUpstream(u *url.URL) bool {
	return u != nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// validateDestinations checks a hand-built route's destinations: what
// destinations checks of the file's. Each problem is its field, relative
// to the route, and its message.
func validateDestinations(rc *Route) [][2]string {
	var out [][2]string
	add := func(field, msg string) { out = append(out, [2]string{field, msg}) }
	if rc.Upstream != nil {
		add("upstream", "can't be combined with destinations: a route delivers to its upstream or to its destinations")
	}
	if rc.Deliver != DeliverQueue || rc.RespondWithin > 0 {
		add("destinations", "need deliver: queue (and no respond_within)")
	}
	seen := map[string]int{}
	for j, d := range rc.Destinations {
		at := fmt.Sprintf("destinations[%d]", j)
		if err := checkDestinationName(d.Name); err != nil {
			add(at+".name", err.Error())
		} else if k, dup := seen[d.Name]; dup {
			add(at+".name", fmt.Sprintf("%q is also the name of destinations[%d]", d.Name, k))
		} else {
			seen[d.Name] = j
		}
		if !validUpstream(d.Upstream) {
			add(at+".upstream", "missing or not an http(s) URL with a host")
		}
		if q := d.Queue; q.MaxAge <= 0 || q.Concurrency <= 0 || q.AttemptTimeout <= 0 || q.MaxQueued <= 0 {
			add(at+".queue", "MaxAge, Concurrency, AttemptTimeout and MaxQueued must be positive (Parse sets them from the route's)")
		}
	}
	return out
}
