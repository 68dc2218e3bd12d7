package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// trusted_proxies: from a listed peer (here the test, on 127.0.0.1) the
// incoming X-Forwarded-For is kept and the peer appended, and -Host and
// -Proto are kept; from a peer not listed they are replaced, as without
// the setting.
func TestTrustedProxies(t *testing.T) {
	tests := []struct {
		name, proxies        string
		wantFor, wantProto   string
		wantHostFromIncoming bool
	}{
		{"peer trusted", "trusted_proxies: [127.0.0.0/8]\n", "203.0.113.9, 127.0.0.1", "https", true},
		{"peer trusted by address", "trusted_proxies: [127.0.0.1]\n", "203.0.113.9, 127.0.0.1", "https", true},
		{"peer not trusted", "trusted_proxies: [10.0.0.0/8]\n", "127.0.0.1", "http", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t)
			g := startGateway(t, writeConfig(t, t.TempDir(), tt.proxies+routeConfig(up.srv.URL)), startOpts{})
			if r := post(t, g.url("/webhooks/test"), `{"id":"xff"}`,
				"X-Forwarded-For", "203.0.113.9", "X-Forwarded-Host", "hooks.example", "X-Forwarded-Proto", "https"); r.Status != 200 {
				t.Fatalf("status %d", r.Status)
			}
			in := up.received()[0]
			wantHost := g.Listen
			if tt.wantHostFromIncoming {
				wantHost = "hooks.example"
			}
			if got := in.Header.Get("X-Forwarded-For"); got != tt.wantFor {
				t.Errorf("X-Forwarded-For = %q, want %q", got, tt.wantFor)
			}
			if got := in.Header.Get("X-Forwarded-Proto"); got != tt.wantProto {
				t.Errorf("X-Forwarded-Proto = %q, want %q", got, tt.wantProto)
			}
			if got := in.Header.Get("X-Forwarded-Host"); got != wantHost {
				t.Errorf("X-Forwarded-Host = %q, want %q", got, wantHost)
			}
		})
	}
}

// lease, max_stored_body and retry_after per route reach the middleware.
func TestRouteSettings(t *testing.T) {
	t.Run("max_stored_body", func(t *testing.T) {
		up := newUpstream(t)
		up.handle = func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("a", 100))
		}
		g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.srv.URL, "max_stored_body: 10B")), startOpts{})
		first := post(t, g.url("/webhooks/test"), `{"id":1}`)
		replay := post(t, g.url("/webhooks/test"), `{"id":1}`)
		if len(first.Body) != 100 || replay.Status != 200 || replay.Body != "" || replay.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("first %d bytes; replay %d %q replayed=%q; want 100 bytes, then 200 with an empty body",
				len(first.Body), replay.Status, replay.Body, replay.Header.Get("Idempotent-Replayed"))
		}
		if n := up.calls.Load(); n != 1 {
			t.Errorf("upstream ran %d times", n)
		}
	})
	hold := func(t *testing.T, extra ...string) (*gw, chan struct{}) {
		up, arrived, release := blockingUpstream(t)
		g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.srv.URL, extra...)), startOpts{})
		go post(t, g.url("/webhooks/test"), `{"id":"held"}`)
		<-arrived
		return g, release
	}
	t.Run("retry_after", func(t *testing.T) {
		g, release := hold(t, "in_flight: reject", "retry_after: 9s")
		defer close(release)
		if r := post(t, g.url("/webhooks/test"), `{"id":"held"}`); r.Status != http.StatusConflict || r.Header.Get("Retry-After") != "9" {
			t.Errorf("duplicate: %d Retry-After %q, want 409 and 9", r.Status, r.Header.Get("Retry-After"))
		}
	})
	t.Run("lease", func(t *testing.T) {
		g, release := hold(t, "in_flight: wait", "wait_timeout: 50ms", "lease: 7s")
		defer close(release)
		if r := post(t, g.url("/webhooks/test"), `{"id":"held"}`); r.Status != http.StatusConflict || r.Header.Get("Retry-After") != "7" {
			t.Errorf("duplicate after wait_timeout: %d Retry-After %q, want 409 and 7 (the route's lease)", r.Status, r.Header.Get("Retry-After"))
		}
	})
}
