package main

import (
	"strings"
	"testing"
	"time"
)

// TestConfigMergeKeys: YAML merge keys ("<<: *anchor", "<<: [*a, *b]") are
// the usual way to share settings between routes. The merged fields apply
// unless the route sets them itself, merged fields are checked like written
// ones (an unknown one names the line where it is written), and a merge of
// something other than a mapping is an error naming its line.
func TestConfigMergeKeys(t *testing.T) {
	text := `routes:
  - &stripe
    path: /a
    upstream: http://127.0.0.1:3000/a
    source: a
    ttl: 48h
    in_flight: wait
  - <<: *stripe
    path: /b
    source: b
    ttl: 1h
  - <<: [*stripe]
    path: /c
    source: c
`
	cfg, err := parseConfig("f.yaml", []byte(text), envOf())
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"b upstream (merged)", cfg.Routes[1].Upstream.String(), "http://127.0.0.1:3000/a"},
		{"b ttl (own)", cfg.Routes[1].Route.TTL, time.Hour},
		{"b in_flight (merged)", string(cfg.Routes[1].Route.InFlight), "wait"},
		{"b path (own)", cfg.Routes[1].Path, "/b"},
		{"c ttl (merged)", cfg.Routes[2].Route.TTL, 48 * time.Hour},
		{"c source (own)", cfg.Routes[2].Route.Source, "c"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	bad := []struct{ name, text, want string }{
		{"unknown merged field", `routes:
  - &r
    path: /a
    upstream: http://127.0.0.1:3000/a
    source: a
  - <<: {retries: 3}
    path: /b
    upstream: http://127.0.0.1:3000/a
    source: b
`, `f.yaml:6: routes[1].retries: unknown field "retries"`},
		{"merge of a scalar", `routes:
  - <<: nope
    path: /b
    upstream: http://127.0.0.1:3000/a
    source: b
`, `f.yaml:2: routes[0].<<: can only merge a mapping`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig("f.yaml", []byte(tt.text), envOf())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
