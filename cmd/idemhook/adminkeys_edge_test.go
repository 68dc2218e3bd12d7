package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestAdminKeysOddKeys stores deliveries under header keys an operator will
// then look up through /admin/keys/{source}/{key}: a GitHub-style
// "hookid:guid", keys holding "/" and "//" (sent percent-encoded), a key
// longer than the middleware keeps as is (stored under its SHA-256), and a
// quoted structured-field key (stored unquoted). GET must find each one and
// DELETE must remove it, so the retry is forwarded again.
func TestAdminKeysOddKeys(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.srv.URL, "header: x-key")), startOpts{})
	long := strings.Repeat("k", 200)
	tests := []struct {
		name, key, path string
	}{
		{"colon", "12345:72d3162e-cc78-11e3-81ab-4c9367dc0958", "12345:72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		{"slash", "order/42", "order%2F42"},
		{"slash raw", "order/43", "order/43"},
		{"double slash", "a//b", "a%2F%2Fb"},
		{"long", long, long},
		{"quoted", `"sf-key"`, url.PathEscape(`"sf-key"`)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"n":` + string(rune('0'+i)) + `}`
			if r := post(t, g.url("/webhooks/test"), body, "x-key", tt.key); r.Status != http.StatusOK {
				t.Fatalf("POST = %d %s", r.Status, r.Body)
			}
			if r := do(t, "GET", g.adminURL("/admin/keys/test/"+tt.path), ""); r.Status != http.StatusOK {
				t.Fatalf("GET /admin/keys/test/%s = %d %s", tt.path, r.Status, r.Body)
			}
			if r := do(t, "DELETE", g.adminURL("/admin/keys/test/"+tt.path), ""); r.Status != http.StatusNoContent {
				t.Fatalf("DELETE /admin/keys/test/%s = %d %s", tt.path, r.Status, r.Body)
			}
			before := len(up.received())
			if r := post(t, g.url("/webhooks/test"), body, "x-key", tt.key); r.Status != http.StatusOK {
				t.Fatalf("retry POST = %d %s", r.Status, r.Body)
			}
			if got := len(up.received()); got != before+1 {
				t.Fatalf("after DELETE the retry was not forwarded (upstream calls %d, want %d)", got, before+1)
			}
		})
	}
}
