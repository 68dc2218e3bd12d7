package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// A syntax error is reported at the line of the mistake, not at the line
// before the list or mapping it is in, as the YAML parser says.
func TestConfigLimits(t *testing.T) {
	tests := []struct {
		name  string
		give  string
		want  Limits
		errs  []string
		warns []string
	}{
		{name: "absent: derived at start", give: minimal, want: Limits{}},
		{name: "all set", give: "limits: {body_memory: 64MiB, max_connections: 500, max_deliveries: 200}\n" + minimal,
			want: Limits{BodyMemory: 64 << 20, MaxConnections: 500, MaxDeliveries: 200}},
		{name: "bad size", give: "limits: {body_memory: lots}\n" + minimal,
			errs: []string{`idemhook.yaml:1: limits.body_memory: invalid size "lots" (examples: 5MiB, 512KiB, 1048576)`}},
		{name: "too small", give: "limits: {body_memory: 100KiB}\n" + minimal,
			errs: []string{`idemhook.yaml:1: limits.body_memory: 100KiB is under 1MiB: a few ordinary deliveries would be refused with 503`}},
		{name: "a route's max_body can't be held", give: "limits:\n  body_memory: 4MiB\n" + minimal,
			errs: []string{`idemhook.yaml:2: limits.body_memory: 4MiB is not above routes[0].max_body (5242880 bytes): a body of that size could never be held, and its deliveries would be refused with 503 for good`}},
		{name: "not a count", give: "limits: {max_connections: 0, max_deliveries: many}\n" + minimal,
			errs: []string{
				`idemhook.yaml:1: limits.max_connections: want a whole number from 1 to 100000000, got "0"`,
				`idemhook.yaml:1: limits.max_deliveries: want a whole number from 1 to 100000000, got "many"`,
			}},
		{name: "deliveries above connections", give: "limits: {max_connections: 10, max_deliveries: 20}\n" + minimal,
			want:  Limits{MaxConnections: 10, MaxDeliveries: 20},
			warns: []string{`idemhook.yaml:1: limits.max_deliveries: 20 is above max_connections 10: one connection carries one delivery at a time over HTTP/1.1, so the bound is max_connections`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("idemhook.yaml", []byte(tt.give), envOf())
			if tt.errs != nil {
				var errs Errors
				if !errors.As(err, &errs) {
					t.Fatalf("want errors %q, got %v", tt.errs, err)
				}
				var got []string
				for _, e := range errs {
					got = append(got, e.Error())
				}
				if !slices.Equal(got, tt.errs) {
					t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.errs, "\n"))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Limits != tt.want {
				t.Errorf("limits %+v, want %+v", cfg.Limits, tt.want)
			}
			var warns []string
			for _, w := range cfg.Warnings {
				warns = append(warns, w.Error())
			}
			if !slices.Equal(warns, tt.warns) {
				t.Errorf("warnings %q, want %q", warns, tt.warns)
			}
		})
	}
}
