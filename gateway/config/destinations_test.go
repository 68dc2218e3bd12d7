package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// fanout is a queued route with three destinations, each line numbered as
// the file is: the route's entry starts at line 2.
const fanout = `routes:
  - path: /webhooks/stripe
    source: stripe
    deliver: queue
    queue: {max_attempts: 5, backoff_max: 1m}
    destinations:
      - {name: billing, upstream: "http://127.0.0.1:3001/stripe", filter: 'body.type.startsWith("payment_intent.")'}
      - name: crm
        upstream: http://127.0.0.1:3002/hooks
        filter: 'body.type.startsWith("customer.")'
        queue: {max_attempts: 9, order_by: "json:data.object.customer", max_age: 100h}
      - {name: analytics, upstream: "http://127.0.0.1:3003/ingest"}
`

func TestDestinations(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(fanout), envOf())
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Routes[0]
	if rc.Upstream != nil || len(rc.Destinations) != 3 {
		t.Fatalf("upstream %v, %d destinations", rc.Upstream, len(rc.Destinations))
	}
	billing, crm, analytics := rc.Destinations[0], rc.Destinations[1], rc.Destinations[2]
	if billing.Name != "billing" || billing.Upstream.String() != "http://127.0.0.1:3001/stripe" || billing.Filter == nil || billing.Line != 7 || billing.Field != "routes[0].destinations[0]" {
		t.Errorf("billing = %+v", billing)
	}
	// A destination's queue is the route's, its own fields in their place.
	if !reflect.DeepEqual(billing.Queue, rc.Queue) {
		t.Errorf("billing's queue %+v, want the route's %+v", billing.Queue, rc.Queue)
	}
	if q := crm.Queue; q.MaxAttempts != 9 || q.OrderBy != "json:data.object.customer" || q.MaxAge != 100*time.Hour || q.BackoffMax != time.Minute || q.Concurrency != DefaultQueueConcurrency {
		t.Errorf("crm's queue = %+v", q)
	}
	if analytics.Filter != nil || analytics.Queue.MaxAttempts != 5 {
		t.Errorf("analytics = %+v", analytics)
	}
	// The key outlives the longest max_age of the route's queues.
	if rc.LongestMaxAge() != 100*time.Hour || rc.Route.TTL < 100*time.Hour {
		t.Errorf("longest max_age %s, ttl %s", rc.LongestMaxAge(), rc.Route.TTL)
	}
	lanes := rc.Lanes()
	if len(lanes) != 3 || lanes[1].Name != "/webhooks/stripe#crm" || lanes[1].Destination != "crm" || !reflect.DeepEqual(lanes[1].Queue, crm.Queue) {
		t.Errorf("lanes = %+v", lanes)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestDestinationsErrors(t *testing.T) {
	base := "routes:\n  - path: /a\n    source: a\n    deliver: queue\n"
	tests := []struct {
		name, give, want string
	}{
		{"upstream too", base + "    upstream: http://h/x\n    destinations: [{name: a, upstream: http://h/a}]\n",
			"idemhook.yaml:5: routes[0].upstream: can't be combined with destinations"},
		{"a proxy route", strings.Replace(base, "deliver: queue", "deliver: proxy", 1) + "    destinations: [{name: a, upstream: http://h/a}]\n",
			"idemhook.yaml:5: routes[0].destinations: needs deliver: queue"},
		{"none", base + "    destinations: []\n", "idemhook.yaml:5: routes[0].destinations: empty"},
		{"neither", base, "idemhook.yaml:2: routes[0].upstream: missing: the URL deliveries are forwarded to"},
		{"duplicate", base + "    destinations:\n      - {name: a, upstream: http://h/a}\n      - {name: a, upstream: http://h/b}\n",
			`idemhook.yaml:7: routes[0].destinations[1].name: duplicate destination "a" (also routes[0].destinations[0], line 6)`},
		{"bad name", base + "    destinations: [{name: Billing#1, upstream: http://h/a}]\n",
			`idemhook.yaml:5: routes[0].destinations[0].name: invalid name "Billing#1"`},
		{"no name", base + "    destinations: [{upstream: http://h/a}]\n",
			"idemhook.yaml:5: routes[0].destinations[0].name: missing: the destination's name"},
		{"no upstream", base + "    destinations: [{name: a}]\n",
			"idemhook.yaml:5: routes[0].destinations[0].upstream: missing"},
		{"bad upstream", base + "    destinations: [{name: a, upstream: ftp://h/a}]\n",
			"idemhook.yaml:5: routes[0].destinations[0].upstream:"},
		{"unknown field", base + "    destinations: [{name: a, upstream: http://h/a, filtre: x}]\n",
			`idemhook.yaml:5: routes[0].destinations[0].filtre: unknown field "filtre": did you mean "filter"?`},
		{"bad filter", base + "    destinations:\n      - name: a\n        upstream: http://h/a\n        filter: body.type ==\n",
			"idemhook.yaml:8: routes[0].destinations[0].filter: column"},
		{"bad queue field", base + "    destinations: [{name: a, upstream: http://h/a, queue: {concurrency: 0}}]\n",
			"idemhook.yaml:5: routes[0].destinations[0].queue.concurrency:"},
		{"backoff below the route's", base + "    queue: {backoff_max: 1m}\n    destinations: [{name: a, upstream: http://h/a, queue: {backoff_min: 2m}}]\n",
			"idemhook.yaml:6: routes[0].destinations[0].queue.backoff_max: 1m is below backoff_min 2m"},
		{"bad order_by", base + "    destinations: [{name: a, upstream: http://h/a, queue: {order_by: x}}]\n",
			`idemhook.yaml:5: routes[0].destinations[0].queue.order_by: invalid order_by "x"`},
		{"ttl below a destination's max_age", base + "    ttl: 80h\n    destinations: [{name: a, upstream: http://h/a, queue: {max_age: 100h}}]\n",
			"idemhook.yaml:5: routes[0].ttl: 80h is shorter than queue.max_age (100h)"},
		{"on redis", "store: {driver: redis, addrs: [127.0.0.1:6379]}\n" + base + "    destinations: [{name: a, upstream: http://h/a}]\n",
			"routes[0].deliver: deliver: queue and respond_within are refused on the redis store"},
		{"a filter with items together", base + "    items: {mode: filter, paths: [{path: \"[*]\", key: id}]}\n    destinations: [{name: a, upstream: http://h/a, filter: json}]\n",
			"idemhook.yaml:6: routes[0].destinations[0].filter: can't be combined with items in mode filter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("idemhook.yaml", []byte(tt.give), envOf())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v,\nwant an error containing %s", err, tt.want)
			}
		})
	}
	// Without a filter, items in mode filter go to every destination
	// together, as to an upstream.
	ok := base + "    items: {mode: filter, paths: [{path: \"[*]\", key: id}]}\n    destinations: [{name: a, upstream: http://h/a}]\n"
	if _, err := Parse("idemhook.yaml", []byte(ok), envOf()); err != nil {
		t.Errorf("destinations without filters and items in mode filter: %v", err)
	}
}

func TestValidateDestinations(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(fanout), envOf())
	if err != nil {
		t.Fatal(err)
	}
	rc := &cfg.Routes[0]
	rc.Upstream = rc.Destinations[0].Upstream
	rc.Destinations[1].Name = "billing"
	rc.Destinations[2].Upstream = nil
	rc.Destinations[2].Queue.MaxQueued = 0
	err = cfg.Validate()
	for _, want := range []string{
		"routes[0].upstream: can't be combined with destinations",
		`routes[0].destinations[1].name: "billing" is also the name of destinations[0]`,
		"routes[0].destinations[2].upstream: missing or not an http(s) URL",
		"routes[0].destinations[2].queue: MaxAge, Concurrency, AttemptTimeout and MaxQueued must be positive",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
}
