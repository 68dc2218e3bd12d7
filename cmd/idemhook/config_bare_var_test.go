package main

import (
	"strings"
	"testing"
)

// TestExpandBareVariable: "$NAME" without braces is not expanded; taken
// literally it would make, e.g., the admin token the public string
// "$IDEMHOOK_ADMIN_TOKEN". It is an error that says how to write it, and
// the message does not repeat the value (which may be a literal secret).
func TestExpandBareVariable(t *testing.T) {
	env := envOf("TOKEN", "s3cret")
	for _, give := range []string{"$TOKEN", "Bearer-$_X", "abc$Token"} {
		got, err := expand(give, env)
		if err == nil {
			t.Errorf("expand(%q) = %q, want an error", give, got)
			continue
		}
		if !strings.Contains(err.Error(), "${NAME}") || strings.Contains(err.Error(), give) {
			t.Errorf("expand(%q) error = %q, want advice on ${NAME} without the value", give, err)
		}
	}
	// Still literal: $$, a $ before a digit, a space or the end.
	for give, want := range map[string]string{"$$TOKEN": "$TOKEN", "costs $5": "costs $5", "a $ b": "a $ b", "end$": "end$"} {
		if got, err := expand(give, env); err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", give, got, err, want)
		}
	}
	// Through the parser: the error names the file, line and field.
	text := "admin: {listen: \"0.0.0.0:9090\", token: $TOKEN}\n" + minimal
	_, err := parseConfig("f.yaml", []byte(text), env)
	if err == nil || !strings.Contains(err.Error(), "f.yaml:1: admin.token:") {
		t.Fatalf("parseConfig error = %v, want f.yaml:1: admin.token: ...", err)
	}
}
