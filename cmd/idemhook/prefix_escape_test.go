package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestPrefixRouteKeepsEscapes: on a prefix route the rest of the path is
// forwarded as the sender escaped it. An escaped "/" (%2F) inside a segment
// is data, e.g. an id; decoding it would forward another path than the one
// received.
func TestPrefixRouteKeepsEscapes(t *testing.T) {
	up := newUpstream(t)
	raw := recordEscapedPaths(up)
	cfg := strings.Replace(routeConfig(up.srv.URL), "path: /webhooks/test", "path: /hooks/", 1)
	cfg = strings.Replace(cfg, "/hook\n", "/in/\n", 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	tests := []pathCase{
		{"/hooks/orders/a%2Fb", "/in/orders/a%2Fb"},
		{"/hooks/plain/path", "/in/plain/path"},
		{"/hooks/sp%20ace", "/in/sp%20ace"},
	}
	wantForwardedPaths(t, g, up, raw, tests)
}

// TestUpstreamPathKeepsEscapes: an upstream URL whose path holds an escaped
// "/" is called with that path, on an exact and on a prefix route.
func TestUpstreamPathKeepsEscapes(t *testing.T) {
	up := newUpstream(t)
	raw := recordEscapedPaths(up)
	cfg := strings.Replace(routeConfig(up.srv.URL), "/hook\n", "/tenants/a%2Fb/hook\n", 1) +
		"  - path: /p/\n    upstream: " + up.srv.URL + "/tenants/a%2Fb/\n    source: p\n"
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	tests := []pathCase{
		{"/webhooks/test", "/tenants/a%2Fb/hook"},
		{"/p/x", "/tenants/a%2Fb/x"},
		{"/p/", "/tenants/a%2Fb/"},
	}
	wantForwardedPaths(t, g, up, raw, tests)
}

// pathCase is a path sent to the gateway and the escaped path the upstream
// must receive.
type pathCase struct{ give, want string }

// recordEscapedPaths makes up record the escaped path of every request.
func recordEscapedPaths(up *upstream) *[]string {
	raw := new([]string)
	up.handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		up.mu.Lock()
		*raw = append(*raw, r.URL.EscapedPath())
		up.mu.Unlock()
	}
	return raw
}

// wantForwardedPaths posts each case (a new event each) and checks the path
// the upstream received.
func wantForwardedPaths(t *testing.T, g *gw, up *upstream, raw *[]string, tests []pathCase) {
	t.Helper()
	for i, tt := range tests {
		if r := post(t, g.url(tt.give), fmt.Sprintf(`{"n":%d}`, i)); r.Status != 200 {
			t.Fatalf("POST %s = %d %s", tt.give, r.Status, r.Body)
		}
		up.mu.Lock()
		got := (*raw)[i]
		up.mu.Unlock()
		if got != tt.want {
			t.Errorf("POST %s reached %s, want %s", tt.give, got, tt.want)
		}
	}
}
