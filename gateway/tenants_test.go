package gateway_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// stripePost sends a Stripe event to url, signed now with secret.
func stripePost(t *testing.T, url, event, secret string) gatewaytest.Response {
	t.Helper()
	body := `{"id":"` + event + `","object":"event","type":"invoice.paid"}`
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(stamp + "." + body))
	return gatewaytest.Post(t, url, body, "Stripe-Signature", "t="+stamp+",v1="+hex.EncodeToString(m.Sum(nil)))
}

// One route for two tenants, acme (secret_env) and globex (secret_file),
// over real HTTP: each tenant's deliveries pass with its own secret only
// and reach the backend with the tenant in the path; a re-delivery is
// replayed; a delivery forged with the other tenant's secret, or for an
// unknown tenant, is answered 401 and claims nothing; the keys are
// idem:stripe@<tenant>:<event>. A reload after globex's secret file
// changed rotates globex's secret and leaves acme's alone.
func TestTenantsRoute(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	dir := t.TempDir()
	globexFile := filepath.Join(dir, "globex.secret")
	if err := os.WriteFile(globexFile, []byte("whsec_globex_1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: memory}
admin: {listen: off}
audit: {sink: memory}
routes:
  - path: /webhooks/stripe/{tenant}
    upstream: %s/stripe
    source: stripe
    provider: stripe
    tenants:
      acme: {secret_env: STRIPE_SECRET_ACME}
      globex: {secret_file: %s}
`, up.Srv.URL, globexFile)
	env := gatewaytest.EnvOf("STRIPE_SECRET_ACME", "whsec_acme")
	cfg, err := config.Parse("idemhook.yaml", []byte(text), env)
	if err != nil {
		t.Fatal(err)
	}
	url, g, _ := serveConfig(t, cfg)
	base := url + "/webhooks/stripe/"
	admin := func(target string) *httptest.ResponseRecorder {
		t.Helper()
		rec := httptest.NewRecorder()
		g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		return rec
	}
	key := func(tenant, event string) int {
		t.Helper()
		return admin("/admin/keys/stripe/" + event + "?scope=" + tenant).Code
	}
	expect := func(what string, r gatewaytest.Response, status int, replayed bool, calls int64) {
		t.Helper()
		if got := r.Header.Get("Idempotent-Replayed") == "true"; r.Status != status || got != replayed || up.Calls.Load() != calls {
			t.Fatalf("%s: %d %q replayed %v, backend calls %d; want %d replayed %v, %d calls", what, r.Status, r.Body, got, up.Calls.Load(), status, replayed, calls)
		}
	}

	expect("acme evt_1", stripePost(t, base+"acme", "evt_1", "whsec_acme"), 200, false, 1)
	expect("acme evt_1 again", stripePost(t, base+"acme", "evt_1", "whsec_acme"), 200, true, 1)
	expect("globex evt_1", stripePost(t, base+"globex", "evt_1", "whsec_globex_1"), 200, false, 2)
	if got := up.Received(); got[0].Path != "/stripe/acme" || got[1].Path != "/stripe/globex" {
		t.Fatalf("the backend got paths %q and %q, want /stripe/acme and /stripe/globex", got[0].Path, got[1].Path)
	}
	if key("acme", "evt_1") != 200 || key("globex", "evt_1") != 200 {
		t.Fatal("no record under idem:stripe@acme:evt_1 or idem:stripe@globex:evt_1")
	}
	// The admin API names the route's tenants, and each delivery's.
	var stats adminapi.Stats
	if err := json.Unmarshal(admin("/admin/stats").Body.Bytes(), &stats); err != nil || len(stats.Routes) != 1 || fmt.Sprint(stats.Routes[0].Tenants) != "[acme globex]" {
		t.Fatalf("/admin/stats routes %+v (%v), want the tenants acme and globex", stats.Routes, err)
	}
	testutil.Eventually(t, "three deliveries in the audit trail", func() bool {
		var page adminapi.Deliveries
		return json.Unmarshal(admin("/admin/deliveries").Body.Bytes(), &page) == nil && len(page.Deliveries) == 3 &&
			page.Deliveries[0].Scope == "globex" && page.Deliveries[2].Scope == "acme"
	})
	// A lookup without the tenant says how to give it, and which tenants
	// hold the key.
	if rec := admin("/admin/keys/stripe/evt_1"); rec.Code != 404 || !strings.Contains(rec.Body.String(), `whose keys are scoped by the tenant: add ?scope=<tenant>, e.g. /admin/keys/stripe/evt_1?scope=`) ||
		!strings.Contains(rec.Body.String(), `"scopes":["globex","acme"]`) {
		t.Fatalf("GET /admin/keys/stripe/evt_1: %d %s", rec.Code, rec.Body)
	}

	expect("globex evt_2 signed with acme's secret", stripePost(t, base+"globex", "evt_2", "whsec_acme"), 401, false, 2)
	expect("initech evt_2", stripePost(t, base+"initech", "evt_2", "whsec_acme"), 401, false, 2)
	for _, tenant := range []string{"globex", "acme", "initech"} {
		if code := key(tenant, "evt_2"); code != 404 {
			t.Fatalf("GET the key evt_2 of %s after a refused delivery: %d, want 404 (nothing claimed)", tenant, code)
		}
	}
	expect("globex evt_2", stripePost(t, base+"globex", "evt_2", "whsec_globex_1"), 200, false, 3)

	// Rotate globex's secret: the file holds the new one only, and reload.
	if err := os.WriteFile(globexFile, []byte("whsec_globex_2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = config.Parse("idemhook.yaml", []byte(text), env)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	expect("globex evt_3 with the old secret", stripePost(t, base+"globex", "evt_3", "whsec_globex_1"), 401, false, 3)
	expect("globex evt_3 with the new secret", stripePost(t, base+"globex", "evt_3", "whsec_globex_2"), 200, false, 4)
	expect("globex evt_2 again, after the reload", stripePost(t, base+"globex", "evt_2", "whsec_globex_2"), 200, true, 4)
	expect("acme evt_3, unchanged", stripePost(t, base+"acme", "evt_3", "whsec_acme"), 200, false, 5)
}

// On a queued route for many tenants, each event is accepted at once and
// then delivered to the upstream's path plus its tenant, once.
func TestTenantsQueuedRoute(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/stripe/{tenant}
    upstream: %s/stripe
    source: stripe
    provider: stripe
    deliver: queue
    tenants:
      acme: {secrets: [whsec_acme]}
      globex: {secrets: [whsec_globex]}
`, filepath.Join(t.TempDir(), "idemhook.db"), up.Srv.URL)
	url, _, _ := startGateway(t, text)
	for _, d := range []struct{ tenant, secret string }{{"acme", "whsec_acme"}, {"globex", "whsec_globex"}, {"acme", "whsec_acme"}} {
		if r := stripePost(t, url+"/webhooks/stripe/"+d.tenant, "evt_q", d.secret); r.Status/100 != 2 {
			t.Fatalf("%s: %d %q, want accepted", d.tenant, r.Status, r.Body)
		}
	}
	if r := stripePost(t, url+"/webhooks/stripe/globex", "evt_r", "whsec_acme"); r.Status != http.StatusUnauthorized {
		t.Fatalf("globex signed with acme's secret: %d, want 401", r.Status)
	}
	testutil.Eventually(t, "two queued events delivered", func() bool { return up.Calls.Load() >= 2 })
	paths := map[string]bool{}
	for _, r := range up.Received() {
		paths[r.Path] = true
	}
	if up.Calls.Load() != 2 || !paths["/stripe/acme"] || !paths["/stripe/globex"] {
		t.Fatalf("the backend got %d calls on %v, want one on /stripe/acme and one on /stripe/globex", up.Calls.Load(), paths)
	}
}
