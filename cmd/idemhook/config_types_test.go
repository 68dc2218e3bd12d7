package main

import (
	"strings"
	"testing"
)

// TestConfigWrongTypeOneError: a required field of the wrong type (a list
// or a mapping where a single value belongs) is reported once, as a wrong
// type, and not also as missing, which would send the user looking for a
// field that is there.
func TestConfigWrongTypeOneError(t *testing.T) {
	text := `routes:
  - path: [/a]
    upstream: {url: http://127.0.0.1:3000/a}
    source: [a, b]
`
	_, err := parseConfig("f.yaml", []byte(text), envOf())
	if err == nil {
		t.Fatal("parseConfig accepted wrong types")
	}
	msg := err.Error()
	for _, want := range []string{
		"f.yaml:2: routes[0].path: expected a single value, got a list",
		"f.yaml:3: routes[0].upstream: expected a single value, got a mapping",
		"f.yaml:4: routes[0].source: expected a single value, got a list",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "missing") {
		t.Errorf("a field given with the wrong type is also reported missing:\n%s", msg)
	}
}
