package gateway_test

import (
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/provider"
)

// TestProviderSuccessStatus: the provider gets the status it counts as
// success whatever 2xx the backend chose (Asaas: exactly 200; iFood: 202;
// Adyen: 200 with the body [accepted] in place of the backend's JSON), on
// the first delivery, on its replay, on a respond_within answer and as a
// queued route's accept answer; a failure passes as it is.
func TestProviderSuccessStatus(t *testing.T) {
	var status, calls atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer backend.Close()
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /asaas
    upstream: %[1]s/hook
    source: asaas
    provider: asaas
    secrets: [tok]
  - path: /ifood
    upstream: %[1]s/hook
    source: ifood
    provider: ifood
    secrets: [ifood-secret]
  - path: /asaas-within
    upstream: %[1]s/hook
    source: asaas-within
    provider: asaas
    secrets: [tok]
    respond_within: 5s
  - path: /adyen
    upstream: %[1]s/hook
    source: adyen
    provider: adyen
    secrets: [%[2]s]
  - path: /adyen-queued
    upstream: %[1]s/hook
    source: adyen-queued
    provider: adyen
    secrets: [%[2]s]
    deliver: queue
`, backend.URL, adyenKey)))
	adyen := func(path, psp string) gatewaytest.Response {
		return gatewaytest.Post(t, url+path, adyenBody(t, psp))
	}
	asaas := func(path, id string) gatewaytest.Response {
		return gatewaytest.Post(t, url+path, `{"id":"`+id+`","event":"PAYMENT_RECEIVED"}`, provider.AsaasTokenHeader, "tok")
	}
	ifood := func(id string) gatewaytest.Response {
		body := `{"id":"` + id + `","code":"PLC"}`
		mac := hmac.New(sha256.New, []byte("ifood-secret"))
		mac.Write([]byte(body))
		return gatewaytest.Post(t, url+"/ifood", body, provider.IFoodSignatureHeader, hex.EncodeToString(mac.Sum(nil)))
	}
	tests := []struct {
		name     string
		backend  int
		send     func() gatewaytest.Response
		want     int
		replayed bool
		calls    int64
		body     string // "": not checked
	}{
		{"asaas: a 201 becomes 200", 201, func() gatewaytest.Response { return asaas("/asaas", "evt_1") }, 200, false, 1, ""},
		{"asaas: its replay", 201, func() gatewaytest.Response { return asaas("/asaas", "evt_1") }, 200, true, 1, ""},
		{"asaas: a 204 becomes 200", 204, func() gatewaytest.Response { return asaas("/asaas", "evt_2") }, 200, false, 2, ""},
		{"asaas: a failure passes", 500, func() gatewaytest.Response { return asaas("/asaas", "evt_3") }, 500, false, 3, ""},
		{"ifood: a 200 becomes 202", 200, func() gatewaytest.Response { return ifood("evt_4") }, 202, false, 4, ""},
		{"ifood: its replay", 200, func() gatewaytest.Response { return ifood("evt_4") }, 202, true, 4, ""},
		{"respond_within: a 201 within the budget becomes 200", 201, func() gatewaytest.Response { return asaas("/asaas-within", "evt_5") }, 200, false, 5, ""},
		{"respond_within: its replay", 201, func() gatewaytest.Response { return asaas("/asaas-within", "evt_5") }, 200, true, 5, ""},
		{"adyen: a 201 with a JSON body becomes 200 [accepted]", 201, func() gatewaytest.Response { return adyen("/adyen", "7914073381342284") }, 200, false, 6, "[accepted]"},
		{"adyen: its replay", 201, func() gatewaytest.Response { return adyen("/adyen", "7914073381342284") }, 200, true, 6, "[accepted]"},
		{"adyen: a failure passes", 500, func() gatewaytest.Response { return adyen("/adyen", "7914073381342285") }, 500, false, 7, `{"ok":true}`},
		{"adyen: an altered item is refused, nothing claimed", 201, func() gatewaytest.Response {
			return gatewaytest.Post(t, url+"/adyen", strings.Replace(adyenBody(t, "7914073381342287"), `"pspReference":"7914073381342287"`, `"pspReference":"7914073381342288"`, 1))
		}, 401, false, 7, ""},
		{"adyen, queued: the accept answer", 201, func() gatewaytest.Response { return adyen("/adyen-queued", "7914073381342286") }, 200, false, -1, "[accepted]"},
	}
	for _, tt := range tests {
		status.Store(int64(tt.backend))
		r := tt.send()
		if r.Status != tt.want || (r.Header.Get(idemhook.ReplayedHeader) == "true") != tt.replayed || tt.calls >= 0 && calls.Load() != tt.calls {
			t.Errorf("%s: %d replayed=%q, backend called %d times; want %d replayed=%v, %d calls",
				tt.name, r.Status, r.Header.Get(idemhook.ReplayedHeader), calls.Load(), tt.want, tt.replayed, tt.calls)
		}
		if tt.body != "" && r.Body != tt.body {
			t.Errorf("%s: body %q, want %q", tt.name, r.Body, tt.body)
		}
		if tt.body == "[accepted]" && r.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("%s: Content-Type %q, want text/plain; charset=utf-8", tt.name, r.Header.Get("Content-Type"))
		}
	}
}

// TestProviderSuccessBody: with a preset's SuccessBody, a success of the
// backend reaches the provider as SuccessStatus with that body (text/plain,
// its own length, the backend's gzip encoding, language and ETag dropped)
// in place of the backend's JSON, on the first delivery, its replay and a
// respond_within answer; a failure passes as it is, body and all.
func TestProviderSuccessBody(t *testing.T) {
	var status, calls atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		st := int(status.Load())
		w.Header().Set("Content-Type", "application/json")
		if st >= 300 {
			w.WriteHeader(st)
			fmt.Fprint(w, `{"error":"down"}`)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Language", "pt-BR")
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(st)
		zw := gzip.NewWriter(w)
		fmt.Fprint(zw, `{"ok":true}`)
		zw.Close()
	}))
	defer backend.Close()
	url := startGatewayWith(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /proxied
    upstream: %[1]s/hook
    source: proxied
    provider: asaas
    secrets: [tok]
  - path: /within
    upstream: %[1]s/hook
    source: within
    provider: asaas
    secrets: [tok]
    respond_within: 5s
`, backend.URL)), func(cfg *config.Config) {
		for i := range cfg.Routes {
			p := *cfg.Routes[i].Route.Preset
			p.SuccessBody = "[accepted]"
			cfg.Routes[i].Route.Preset = &p
		}
	})
	send := func(path, id string) gatewaytest.Response {
		return gatewaytest.Post(t, url+path, `{"id":"`+id+`","event":"PAYMENT_RECEIVED"}`, provider.AsaasTokenHeader, "tok")
	}
	tests := []struct {
		name     string
		backend  int
		path, id string
		want     int
		body     string
		replayed bool
		calls    int64
	}{
		{"a 201 with a JSON body", 201, "/proxied", "evt_1", 200, "[accepted]", false, 1},
		{"its replay", 201, "/proxied", "evt_1", 200, "[accepted]", true, 1},
		{"a failure passes", 500, "/proxied", "evt_2", 500, `{"error":"down"}`, false, 2},
		{"respond_within: a 201 within the budget", 201, "/within", "evt_3", 200, "[accepted]", false, 3},
		{"respond_within: its replay", 201, "/within", "evt_3", 200, "[accepted]", true, 3},
		{"respond_within: a failure passes", 500, "/within", "evt_4", 500, `{"error":"down"}`, false, 4},
	}
	for _, tt := range tests {
		status.Store(int64(tt.backend))
		r := send(tt.path, tt.id)
		if r.Status != tt.want || r.Body != tt.body || (r.Header.Get(idemhook.ReplayedHeader) == "true") != tt.replayed || calls.Load() != tt.calls {
			t.Errorf("%s: %d %q replayed=%q, backend called %d times; want %d %q replayed=%v, %d calls",
				tt.name, r.Status, r.Body, r.Header.Get(idemhook.ReplayedHeader), calls.Load(), tt.want, tt.body, tt.replayed, tt.calls)
		}
		wantType := "text/plain; charset=utf-8"
		if tt.want >= 300 {
			wantType = "application/json"
		}
		if got := r.Header.Get("Content-Type"); got != wantType {
			t.Errorf("%s: Content-Type %q, want %q", tt.name, got, wantType)
		}
		if tt.want < 300 && (r.Header.Get("Content-Language") != "" || r.Header.Get("ETag") != "") {
			t.Errorf("%s: Content-Language %q, ETag %q of the backend's body kept", tt.name, r.Header.Get("Content-Language"), r.Header.Get("ETag"))
		}
	}
}

// startGatewayWith is startGateway with a change to the parsed
// configuration, for what a file cannot say (a preset of the test's own).
func startGatewayWith(t *testing.T, text string, change func(*config.Config)) string {
	t.Helper()
	cfg, err := config.Parse("idemhook.yaml", []byte(text), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	change(cfg)
	url, _, _ := serveConfig(t, cfg)
	return url
}

// adyenKey is the Adyen routes' HMAC key in the tests, hex.
const adyenKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// adyenBody is an Adyen Standard webhook of one AUTHORISATION item for
// pspReference psp, signed with adyenKey as Adyen documents.
func adyenBody(t *testing.T, psp string) string {
	key, err := hex.DecodeString(adyenKey)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(psp + "::TestMerchant:order-1:1130:EUR:AUTHORISATION:true"))
	return `{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"` +
		base64.StdEncoding.EncodeToString(mac.Sum(nil)) + `"},"amount":{"currency":"EUR","value":1130},"eventCode":"AUTHORISATION",` +
		`"merchantAccountCode":"TestMerchant","merchantReference":"order-1","pspReference":"` + psp + `","success":"true"}}]}`
}

// forwardSecret is a route's forward_secret in the tests: a 24-byte key.
const forwardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestForwardSignature: with forward_secret, what the gateway sends the
// backend carries a Standard Webhooks signature, on the proxy path and on
// queued attempts, with the event's store key as webhook-id, replacing any
// webhook-* headers the provider sent. The backend checks it with
// provider.StandardWebhooks (the Go helper) and, where Node.js and the
// standardwebhooks package are installed (.ci/run installs them), with
// that reference library too.
func TestForwardSignature(t *testing.T) {
	check, err := provider.StandardWebhooks(provider.Config{Secrets: []string{forwardSecret}})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		id     string
		header http.Header
		body   string
		err    error
	}
	got := make(chan seen, 16)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := check.Verify(r, body)
		got <- seen{r.Header.Get(provider.WebhookIDHeader), r.Header.Clone(), string(body), err}
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer backend.Close()
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /proxied
    upstream: %[1]s/hook
    source: proxied
    header: X-Event-Id
    forward_secret: %[2]s
  - path: /queued
    upstream: %[1]s/hook
    source: queued
    header: X-Event-Id
    deliver: queue
    forward_secret: %[2]s
`, backend.URL, forwardSecret)))
	for _, tt := range []struct{ path, wantID string }{
		{"/proxied", "idem:proxied:evt_1"},
		{"/queued", "idem:queued:evt_1"},
	} {
		r := gatewaytest.Post(t, url+tt.path, `{"id":"evt_1","amount":100}`, "X-Event-Id", "evt_1",
			provider.WebhookIDHeader, "forged", provider.WebhookSignatureHeader, "v1,Zm9yZ2Vk")
		if r.Status/100 != 2 {
			t.Fatalf("%s: %d %s", tt.path, r.Status, r.Body)
		}
		var s seen
		select {
		case s = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the backend got nothing", tt.path)
		}
		if s.err != nil || s.id != tt.wantID {
			t.Fatalf("%s: webhook-id %q, check: %v; want %q signed", tt.path, s.id, s.err, tt.wantID)
		}
		verifyWithNode(t, s.header, s.body, true)
		verifyWithNode(t, s.header, s.body+" ", false) // a body changed on the way
	}
	// The check can fail: another secret refuses the same request.
	other, _ := provider.StandardWebhooks(provider.Config{Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of 24 bytes!"))}})
	signed := `{"id":"evt_2"}`
	if r := gatewaytest.Post(t, url+"/proxied", signed, "X-Event-Id", "evt_2"); r.Status != http.StatusOK {
		t.Fatalf("evt_2: %d", r.Status)
	}
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header = (<-got).header
	if err := other.Verify(req, []byte(signed)); err == nil {
		t.Fatal("a signature checked with another secret passed")
	}
}

// verifyWithNode checks a forwarded request with the Standard Webhooks
// reference library for Node.js (gateway/testdata/forward-signature), and
// fails t unless it passes exactly when want says. Skipped where node or
// the package is missing, unless CI is set (.ci/run installs the package);
// TestFreshClone's run in a new clone, which has no node_modules, skips.
func verifyWithNode(t *testing.T, header http.Header, body string, want bool) {
	t.Helper()
	dir := filepath.Join("testdata", "forward-signature")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks"))
	}
	if err != nil {
		if os.Getenv("CI") != "" && os.Getenv("IDEMHOOK_IN_FRESH_CLONE") == "" {
			t.Fatalf("CI is set but the Node.js check can't run (%v): .ci/run installs node's package with npm ci --prefix %s", err, dir)
		}
		t.Logf("skipping the Node.js check: %v (npm ci --prefix %s installs it)", err, dir)
		return
	}
	headers := map[string]string{}
	for _, name := range []string{provider.WebhookIDHeader, provider.WebhookTimestampHeader, provider.WebhookSignatureHeader} {
		headers[name] = header.Get(name)
	}
	in, _ := json.Marshal(map[string]any{"secret": forwardSecret, "headers": headers, "body": body})
	file := filepath.Join(t.TempDir(), "request.json")
	if err := os.WriteFile(file, in, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, filepath.Join(dir, "verify.js"), file).CombinedOutput()
	if (err == nil) != want {
		t.Fatalf("node verify.js: %v %s; want passed=%v", err, out, want)
	}
}

// sqliteRoutes is a gateway configuration on a SQLite file of the test's
// own, admin listener and audit trail off, with routes (the entries of
// routes:, YAML indented two spaces).
func sqliteRoutes(t *testing.T, routes string) string {
	return fmt.Sprintf("listen: 127.0.0.1:0\nstore: {driver: sqlite, path: %q}\nadmin: {listen: off}\naudit: {sink: none}\nroutes:\n%s",
		filepath.Join(t.TempDir(), "idemhook.db"), routes)
}
