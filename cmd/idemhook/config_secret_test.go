package main

import (
	"strings"
	"testing"
)

// TestConfigErrorsHideURLPasswords: a URL whose password comes from the
// environment (${PW}) and that is wrong in some other way must be reported
// without the password, whether or not the URL parses: configuration errors
// are printed to terminals and CI logs.
func TestConfigErrorsHideURLPasswords(t *testing.T) {
	const pw = "hunter2-Secret"
	route := func(upstream string) string {
		return "routes:\n  - path: /a\n    upstream: " + upstream + "\n    source: a\n"
	}
	tests := []struct {
		name, yaml, field string
	}{
		{"upstream with user info", route("http://user:${PW}@127.0.0.1/x"), "routes[0].upstream"},
		{"upstream bad port", route("http://user:${PW}@127.0.0.1:nope/x"), "routes[0].upstream"},
		{"upstream bad scheme", route("ftp://user:${PW}@127.0.0.1/x"), "routes[0].upstream"},
		{"redis bad port", "store: {driver: redis, url: \"redis://:${PW}@127.0.0.1:nope/0\"}\n" + route("http://127.0.0.1/x"), "store.url"},
		{"postgres bad port", "audit: {sink: postgres, url: \"postgres://u:${PW}@127.0.0.1:nope/db\"}\n" + route("http://127.0.0.1/x"), "audit.url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig("f.yaml", []byte(tt.yaml), envOf("PW", pw))
			if err == nil {
				t.Fatal("parseConfig accepted the file")
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name %s", err, tt.field)
			}
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}
