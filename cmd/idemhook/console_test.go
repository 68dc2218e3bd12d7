package main

import (
	"strings"
	"testing"

	"github.com/idemhook/idemhook/gateway/adminapi"
)

// TestConsoleFiles: the console is served at /admin/ without the token,
// because a browser can't send one when navigating and the files hold no
// data. It comes with a Content-Security-Policy that forbids other
// origins, inline code and framing. Its data endpoint needs the token.
func TestConsoleFiles(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	g := startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.Srv.URL, ", token: \"${TOKEN}\"")),
		startOpts{getenv: envOf("TOKEN", "s3cret")})
	tests := []struct {
		path, wantType, wantBody string
	}{
		{"/admin/", "text/html; charset=utf-8", `<script src="console.js" defer></script>`},
		{"/admin", "text/html; charset=utf-8", `<script src="console.js" defer></script>`}, // redirected to /admin/
		{"/admin/console.js", "text/javascript; charset=utf-8", "'Bearer ' + t"},
		{"/admin/console.css", "text/css; charset=utf-8", ".badge.refused"},
		{"/admin/favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tt := range tests {
		r := do(t, "GET", g.adminURL(tt.path), "")
		if r.Status != 200 || r.Header.Get("Content-Type") != tt.wantType || !strings.Contains(r.Body, tt.wantBody) {
			t.Errorf("GET %s = %d %q, body has %q: %v", tt.path, r.Status, r.Header.Get("Content-Type"), tt.wantBody, strings.Contains(r.Body, tt.wantBody))
		}
		for name, want := range map[string]string{
			"Content-Security-Policy": adminapi.ConsoleCSP,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Referrer-Policy":         "no-referrer",
		} {
			if got := r.Header.Get(name); got != want {
				t.Errorf("GET %s: %s = %q, want %q", tt.path, name, got, want)
			}
		}
	}
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(adminapi.ConsoleCSP, d) {
			t.Errorf("the CSP lacks %q", d)
		}
	}
	if strings.Contains(adminapi.ConsoleCSP, "unsafe") || strings.Contains(adminapi.ConsoleCSP, "http") {
		t.Errorf("the CSP allows inline code or another origin: %s", adminapi.ConsoleCSP)
	}
	for _, p := range []string{"/admin/index.html", "/admin/nothing.js", "/admin/console"} {
		if r := do(t, "GET", g.adminURL(p), "", "Authorization", "Bearer s3cret"); r.Status != 404 {
			t.Errorf("GET %s = %d, want 404", p, r.Status)
		}
	}
	if r := do(t, "GET", g.adminURL("/admin/stats"), ""); r.Status != 401 {
		t.Errorf("GET /admin/stats without the token = %d, want 401", r.Status)
	}
	if r := do(t, "GET", g.adminURL("/admin/stats"), "", "Authorization", "Bearer s3cret"); r.Status != 200 {
		t.Errorf("GET /admin/stats with the token = %d, want 200", r.Status)
	}
}
