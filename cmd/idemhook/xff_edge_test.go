package main

import (
	"net/http"
	"testing"
)

// TestForwardedHeadersReplaced: X-Forwarded-* and Forwarded sent by the
// caller are not trusted: the upstream gets the gateway's own values, as
// docs/gateway.md says.
func TestForwardedHeadersReplaced(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.srv.URL)), startOpts{})
	r := post(t, g.url("/webhooks/test"), `{"id":"xff"}`,
		"X-Forwarded-For", "203.0.113.9", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https",
		"Forwarded", "for=203.0.113.9")
	if r.Status != http.StatusOK {
		t.Fatalf("status = %d %s", r.Status, r.Body)
	}
	in := up.received()[0]
	checks := []struct{ name, got, want string }{
		{"X-Forwarded-For", in.Header.Get("X-Forwarded-For"), "127.0.0.1"},
		{"X-Forwarded-Host", in.Header.Get("X-Forwarded-Host"), g.Listen},
		{"X-Forwarded-Proto", in.Header.Get("X-Forwarded-Proto"), "http"},
		{"Forwarded", in.Header.Get("Forwarded"), ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("upstream %s = %q, want %q", c.name, c.got, c.want)
		}
	}
}
