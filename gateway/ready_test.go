package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// TestReady: Ready is what GET /readyz checks, a claim and a release on
// the store: nil on a store that takes them, the failing step's error on
// one that is down.
func TestReady(t *testing.T) {
	for _, tt := range []struct {
		store   string
		wantErr string
	}{
		{"store: {driver: memory}", ""},
		// go-redis connects at the first command: nothing listens on port 1.
		{"store: {driver: redis, url: \"redis://127.0.0.1:1/0\", timeout: 1s}", "claim of a probe key"},
	} {
		text := strings.Replace(gatewaytest.RouteConfig("http://127.0.0.1:1"), "store: {driver: memory}", tt.store, 1)
		cfg, err := config.Parse("f.yaml", []byte(text), gatewaytest.EnvOf())
		if err != nil {
			t.Fatalf("%s: %v", tt.store, err)
		}
		g, err := New(t.Context(), cfg, Options{})
		if err != nil {
			t.Fatalf("%s: %v", tt.store, err)
		}
		err = g.Ready(t.Context())
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: Ready = %v, want nil", tt.store, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: Ready = %v, want an error saying %q", tt.store, err, tt.wantErr)
		}
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("%s: Close: %v", tt.store, err)
		}
	}
}
