package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/gatewaytest"
)

// A queue whose disk falls under the free-space floor answers new events
// 503 with Retry-After before claiming them, and accepts again once space
// returns. The floor is raised above the disk's free space to stand for a
// full disk.
func TestQueueRefusesWhenTheDiskIsAlmostFull(t *testing.T) {
	if _, ok := freeBytes(t.TempDir()); !ok {
		t.Skip("no statfs here")
	}
	up := gatewaytest.NewUpstream(t)
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /hook
    upstream: %s/hook
    source: test
    header: x-event-id
    deliver: queue
`, filepath.Join(t.TempDir(), "idemhook.db"), up.Srv.URL)
	cfg, err := config.Parse("f.yaml", []byte(text), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	old := minFreeDisk.Load()
	t.Cleanup(func() { minFreeDisk.Store(old) })
	minFreeDisk.Store(1 << 62)
	g, err := New(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(t.Context())
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	r := gatewaytest.Post(t, srv.URL+"/hook", "{}", "X-Event-Id", "a")
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("with the disk almost full: %d %v; want 503 with Retry-After", r.Status, r.Header)
	}
	if rec, err := g.store.Get(t.Context(), "idem:test:a"); err != nil || rec != nil {
		t.Fatalf("the refused event's key holds %+v, %v; want nothing claimed", rec, err)
	}
	minFreeDisk.Store(0)
	gatewaytest.Eventually(t, "accepted once space is back", func() bool {
		return gatewaytest.Post(t, srv.URL+"/hook", "{}", "X-Event-Id", "a").Status == http.StatusAccepted
	})
	gatewaytest.Eventually(t, "delivered", func() bool { return up.Calls.Load() == 1 })
}
