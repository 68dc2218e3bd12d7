package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// TestForgedFirstClaimsNothing: forged deliveries carrying a real event's id
// (wrong secret, stale and future timestamps, a v0-only header) arrive
// before the real one. Each is refused 401 with a problem+json body and
// audited as signature_invalid; none claims the key, so the genuine
// delivery that follows is forwarded (not answered as a duplicate). The
// secret appears neither in the answers nor in the log.
func TestForgedFirstClaimsNothing(t *testing.T) {
	up := newUpstream(t)
	const secret = "whsec_gatewaySecretValue"
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
routes:
  - path: /webhooks/stripe
    upstream: %s/hook
    source: stripe
    provider: stripe
    secret_env: STRIPE_SECRET
`, filepath.Join(dir, "idemhook.db"), up.srv.URL)
	g := startGateway(t, writeConfig(t, dir, cfg), startOpts{getenv: envOf("STRIPE_SECRET", secret)})
	body := `{"id":"evt_real","type":"charge.succeeded"}`
	sign := func(key string, ts int64, scheme string) string {
		mac := hmac.New(sha256.New, []byte(key))
		fmt.Fprintf(mac, "%d.%s", ts, body)
		return fmt.Sprintf("t=%d,%s=%s", ts, scheme, hex.EncodeToString(mac.Sum(nil)))
	}
	now := time.Now().Unix()
	forged := []struct{ name, header string }{
		{"wrong secret", sign("whsec_attacker", now, "v1")},
		{"stale", sign(secret, now-int64(10*time.Minute/time.Second), "v1")},
		{"future", sign(secret, now+int64(10*time.Minute/time.Second), "v1")},
		{"v0 only", sign(secret, now, "v0")},
		{"garbage", "t=abc,v1=zz"},
	}
	for _, f := range forged {
		r := post(t, g.url("/webhooks/stripe"), body, "Stripe-Signature", f.header)
		if r.Status != http.StatusUnauthorized || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s, want 401 problem+json", f.name, r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		if strings.Contains(r.Body, secret) {
			t.Errorf("%s: the answer shows the secret: %s", f.name, r.Body)
		}
	}
	r := post(t, g.url("/webhooks/stripe"), body, "Stripe-Signature", sign(secret, now, "v1"))
	if r.Status != http.StatusOK || r.Header.Get(idemhook.ReplayedHeader) != "" {
		t.Fatalf("genuine delivery after forgeries = %d replayed=%q %s, want 200 forwarded", r.Status, r.Header.Get(idemhook.ReplayedHeader), r.Body)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
	deliveries(t, g, "outcome=signature_invalid", len(forged))
	deliveries(t, g, "outcome=processed", 1)
	if strings.Contains(g.stderr.String(), secret) {
		t.Errorf("the log shows the secret:\n%s", g.stderr)
	}
}
