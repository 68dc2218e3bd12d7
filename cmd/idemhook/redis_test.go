package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/redistest"
)

// TestRedisTopologies runs two gateways sharing a private Redis Cluster, and
// one behind a Sentinel, configured with addrs (and master_name).
func TestRedisTopologies(t *testing.T) {
	tests := []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"cluster", func(t *testing.T) string {
			addrs := redistest.StartCluster(t, 3)
			return fmt.Sprintf("store: {driver: redis, addrs: [%s]}", strings.Join(addrs, ", "))
		}},
		{"sentinel", func(t *testing.T) string {
			master := redistest.StartServer(t)
			sentinel := redistest.StartSentinel(t, "gwmaster", master.Addr())
			return fmt.Sprintf("store: {driver: redis, addrs: [%s], master_name: gwmaster}", sentinel.Addr())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t)
			cfg := strings.Replace(routeConfig(up.srv.URL), "store: {driver: memory}", tt.store(t), 1)
			path := writeConfig(t, t.TempDir(), cfg)
			g1 := startGateway(t, path, startOpts{})
			g2 := startGateway(t, path, startOpts{})
			for i := range 6 { // several events, so that a cluster spreads them over its nodes
				body := fmt.Sprintf(`{"id":"evt_%s_%d"}`, tt.name, i)
				first := post(t, g1.url("/webhooks/test"), body)
				again := post(t, g2.url("/webhooks/test"), body)
				if first.Status != 200 || again.Header.Get(idemhook.ReplayedHeader) != "true" || again.Body != first.Body {
					t.Errorf("event %d on the second gateway: %d replayed=%q, want a replay of %q", i, again.Status, again.Header.Get(idemhook.ReplayedHeader), first.Body)
				}
			}
			if n := up.calls.Load(); n != 6 {
				t.Errorf("upstream calls = %d, want 6", n)
			}
			if r := do(t, "GET", g1.adminURL("/readyz"), ""); r.Status != 200 {
				t.Errorf("readyz = %d %s", r.Status, r.Body)
			}
		})
	}
}
