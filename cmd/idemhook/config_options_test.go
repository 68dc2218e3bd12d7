package main

import (
	"strings"
	"testing"
)

// TestConfigProviderOptionsDuplicate: a provider option given twice is an
// error naming the second line, as for every other mapping of the file,
// instead of the last value silently winning (here the verify_token Meta's
// challenge is checked against).
func TestConfigProviderOptionsDuplicate(t *testing.T) {
	text := `routes:
  - path: /wa
    upstream: http://127.0.0.1:3000/wa
    source: wa
    provider: whatsapp-cloud
    secrets: [app-secret]
    provider_options:
      verify_token: first
      verify_token: second
`
	_, err := parseConfig("f.yaml", []byte(text), envOf())
	if err == nil {
		t.Fatal("parseConfig accepted provider_options with verify_token twice")
	}
	if want := "f.yaml:9: routes[0].provider_options.verify_token: field given twice (first at line 8)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
}

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
