package gateway

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/gatewaytest"
	"github.com/idemhook/idemhook/sqlitestore"
)

// TestStoreCallTimeout: the bound of the gateway's store calls (the
// middleware's, which /readyz probes with) is store.timeout when set, and
// otherwise the store's own: SQLite's busy timeout, since a call that gives
// up early on a loaded machine fails its delivery open; the library's 250ms
// for the others.
func TestStoreCallTimeout(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		store string
		want  time.Duration
	}{
		{fmt.Sprintf("store: {driver: sqlite, path: %q}", filepath.Join(dir, "a.db")), sqlitestore.BusyTimeout},
		{fmt.Sprintf("store: {driver: sqlite, path: %q, timeout: 2s}", filepath.Join(dir, "b.db")), 2 * time.Second},
		{"store: {driver: memory}", idemhook.DefaultStoreTimeout},
		// go-redis connects at the first command: no server needed.
		{"store: {driver: redis, url: \"redis://127.0.0.1:1/0\"}", idemhook.DefaultStoreTimeout},
		{"store: {driver: redis, url: \"redis://127.0.0.1:1/0\", timeout: 1s}", time.Second},
	} {
		cfg, err := config.Parse("f.yaml", []byte(strings.Replace(gatewaytest.RouteConfig("http://127.0.0.1:1"), "store: {driver: memory}", tt.store, 1)), gatewaytest.EnvOf())
		if err != nil {
			t.Fatalf("%s: %v", tt.store, err)
		}
		g, err := New(t.Context(), cfg, Options{Now: time.Now})
		if err != nil {
			t.Fatalf("%s: %v", tt.store, err)
		}
		if got := g.mw.StoreTimeout(); got != tt.want {
			t.Errorf("%s: store call timeout %v, want %v", tt.store, got, tt.want)
		}
		if err := g.res.close(); err != nil {
			t.Errorf("%s: close: %v", tt.store, err)
		}
	}
}
