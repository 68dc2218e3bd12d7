package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestConfigToleranceWithoutTimestamp: tolerance on a route whose provider
// signs no timestamp is an error at the tolerance line.
func TestConfigToleranceWithoutTimestamp(t *testing.T) {
	text := `routes:
  - path: /gh
    upstream: http://127.0.0.1:3000/gh
    source: gh
    provider: github
    secrets: [s]
    tolerance: 5m
`
	_, err := parseConfig("f.yaml", []byte(text), envOf())
	if want := "f.yaml:7: routes[0].tolerance: provider github: tolerance 5m0s has no effect"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
}

// A route with a preset keeps its answers for the provider's retry window
// plus a day; check prints the effective TTL of every route and warns (a
// warning, not an error) about a configured TTL shorter than the window.
func TestCheckPrintsEffectiveTTLsAndWarnsAboutShortOnes(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, `routes:
  - path: /stripe
    upstream: http://127.0.0.1:3000/
    source: stripe
    provider: stripe
    secret_env: STRIPE_SECRET
  - path: /stripe-short
    upstream: http://127.0.0.1:3000/
    source: stripe-short
    provider: stripe
    secret_env: STRIPE_SECRET
    ttl: 24h
  - path: /plain
    upstream: http://127.0.0.1:3000/
    source: plain
`)
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"check", "--config", path}, envOf("STRIPE_SECRET", "whsec_x"), &stdout, &stderr); err != nil {
		t.Fatalf("check: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"/stripe -> http://127.0.0.1:3000/ source=stripe ttl=4d in_flight=wait on_store_error=open provider=stripe retry_window=3d",
		"/stripe-short -> http://127.0.0.1:3000/ source=stripe-short ttl=24h in_flight=wait",
		"/plain -> http://127.0.0.1:3000/ source=plain ttl=24h in_flight=wait",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout.String())
		}
	}
	wantWarn := "warning: " + path + ":12: routes[1].ttl: 24h is shorter than stripe's retry window (3d): a retry after the TTL runs the event again; the preset's default is 4d\n"
	if stderr.String() != wantWarn {
		t.Errorf("check warnings:\n%s\nwant:\n%s", stderr.String(), wantWarn)
	}
}
