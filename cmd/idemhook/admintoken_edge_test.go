package main

import (
	"net/http"
	"testing"
)

// TestAdminTokenScheme: the auth scheme is case-insensitive (RFC 9110
// section 11.1), so "bearer" and "BEARER" work; a token that is a prefix or
// an extension of the configured one, an empty token and another scheme are
// refused.
func TestAdminTokenScheme(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	g := startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.srv.URL, ", token: \"${TOKEN}\"")),
		startOpts{getenv: envOf("TOKEN", "s3cret")})
	tests := []struct {
		auth string
		want int
	}{
		{"Bearer s3cret", http.StatusOK},
		{"bearer s3cret", http.StatusOK},
		{"BEARER s3cret", http.StatusOK},
		{"Bearer s3cre", http.StatusUnauthorized},
		{"Bearer s3cret2", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Basic s3cret", http.StatusUnauthorized},
		{"Bearers3cret", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		if r := do(t, "GET", g.adminURL("/admin/deliveries"), "", "Authorization", tt.auth); r.Status != tt.want {
			t.Errorf("Authorization %q = %d, want %d", tt.auth, r.Status, tt.want)
		}
	}
}
