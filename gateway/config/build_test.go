package config

import (
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
	_, err := Parse("f.yaml", []byte(text), envOf())
	if want := "f.yaml:7: routes[0].tolerance: provider github: tolerance 5m0s has no effect"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
}
