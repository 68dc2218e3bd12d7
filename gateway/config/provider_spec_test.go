package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// specRoute is a route whose provider: is a spec (Stripe's scheme under
// other names), with the spec's lines from line 5 of the file.
const specRoute = `routes:
  - path: /webhooks/acme
    upstream: http://127.0.0.1:3000/webhook
    source: acme
    provider:
      signature:
        algorithm: hmac-sha256
        header: Acme-Signature
        format: pairs
        timestamp_key: t
        signature_key: v1
        signed: "{timestamp}.{body}"
      key: "{json:id}"
      success: {status: 200}
      retry_window: 2d
    secret_env: ACME_SECRET
`

func TestConfigProviderSpec(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(specRoute), envOf("ACME_SECRET", "acme-secret"))
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Routes[0]
	p := rc.Route.Preset
	if p == nil || p.Name != "acme" || rc.Provider != "acme" || p.DuplicateStatus != 200 || p.RetryWindow != 48*time.Hour {
		t.Fatalf("preset %+v, provider %q", p, rc.Provider)
	}
	if rc.Route.TTL != 72*time.Hour {
		t.Errorf("TTL %v, want the retry window and a day", rc.Route.TTL)
	}
	body := `{"id":"evt_1"}`
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte("acme-secret"))
	m.Write([]byte(ts + "." + body))
	r := httptest.NewRequest(http.MethodPost, "/webhooks/acme", strings.NewReader(body))
	r.Header.Set("Acme-Signature", "t="+ts+",v1="+hex.EncodeToString(m.Sum(nil)))
	if err := p.Verify(r, []byte(body)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if k, _ := p.Key(r, []byte(body)); k != "evt_1" {
		t.Errorf("key %q", k)
	}
	if err := p.Verify(r, []byte(body+" ")); !errors.Is(err, provider.ErrNoMatchingSignature) {
		t.Errorf("tampered: %v", err)
	}
}

// A spec's problems are reported at the line of the field, with its path.
func TestConfigProviderSpecErrors(t *testing.T) {
	env := envOf("ACME_SECRET", "acme-secret")
	tests := []struct {
		name, old, new, want string
	}{
		{"unknown field", "        signature_key: v1\n", "        signature_key: v1\n        signed_by: x\n",
			`idemhook.yaml:12: routes[0].provider.signature.signed_by: unknown field "signed_by"`},
		{"misspelt field", "      key:", "      kye:", `idemhook.yaml:13: routes[0].provider.kye: unknown field "kye": did you mean "key"?`},
		{"unknown algorithm", "hmac-sha256", "hmac-md5", `idemhook.yaml:7: routes[0].provider.signature.algorithm: unknown algorithm "hmac-md5"`},
		{"bad placeholder", `"{timestamp}.{body}"`, `"{timestamp}.{bdy}"`, `idemhook.yaml:12: routes[0].provider.signature.signed: unknown placeholder {bdy}`},
		{"no timestamp signed", `"{timestamp}.{body}"`, `"{body}"`, `idemhook.yaml:12: routes[0].provider.signature.signed: "{body}" does not sign the timestamp`},
		{"bad key", `"{json:id}"`, `"{json:id"`, `idemhook.yaml:13: routes[0].provider.key: "{json:id": { at byte 0 is not closed`},
		{"status", "{status: 200}", "{status: 302}", `idemhook.yaml:14: routes[0].provider.success.status: 302 is not a success`},
		{"status not a number", "{status: 200}", "{status: ok}", `idemhook.yaml:14: routes[0].provider.success.status: want a whole number, got "ok"`},
		{"duration", "retry_window: 2d", "retry_window: 2 days", `idemhook.yaml:15: routes[0].provider.retry_window: invalid duration "2 days"`},
		{"missing header", "        header: Acme-Signature\n", "", `idemhook.yaml:6: routes[0].provider.signature.header: missing: the header that holds the signature`},
		{"list for a mapping", "      success: {status: 200}", "      success: [200]", `idemhook.yaml:14: routes[0].provider.success: expected a mapping`},
		{"unset variable", "signature_key: v1", "signature_key: ${NOPE}", `idemhook.yaml:11: routes[0].provider.signature.signature_key: environment variable NOPE is not set`},
		{"options", "    secret_env: ACME_SECRET\n", "    secret_env: ACME_SECRET\n    provider_options: {verify_token: x}\n",
			`idemhook.yaml:17: routes[0].provider_options: is for a preset named by provider:`},
		{"no secret", "    secret_env: ACME_SECRET\n", "", `idemhook.yaml:5: routes[0].provider: provider acme needs a secret`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(specRoute, tt.old) {
				t.Fatalf("the route has no %q", tt.old)
			}
			_, err := Parse("idemhook.yaml", []byte(strings.Replace(specRoute, tt.old, tt.new, 1)), env)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error:\n got %v\nwant %s...", err, tt.want)
			}
		})
	}
}

// A route's tolerance replaces the spec's; on a spec that signs no
// timestamp it is refused at its line.
func TestConfigProviderSpecTolerance(t *testing.T) {
	env := envOf("ACME_SECRET", "acme-secret")
	if _, err := Parse("idemhook.yaml", []byte(specRoute+"    tolerance: 1m\n"), env); err != nil {
		t.Fatal(err)
	}
	noTS := strings.Replace(strings.Replace(specRoute, `"{timestamp}.{body}"`, `"{body}"`, 1), "        timestamp_key: t\n", "", 1)
	_, err := Parse("idemhook.yaml", []byte(noTS+"    tolerance: 1m\n"), env)
	if want := "idemhook.yaml:16: routes[0].tolerance: provider acme: tolerance 1m0s has no effect"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error:\n got %v\nwant %s...", err, want)
	}
}

// The example of docs/gateway.md's "Any provider from YAML" is a working
// configuration.
func TestConfigProviderSpecDocsExample(t *testing.T) {
	data, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Any provider from YAML")
	if !ok {
		t.Fatal(`docs/gateway.md has no "## Any provider from YAML" section`)
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the section has no yaml block")
	}
	cfg, err := Parse("docs/gateway.md", []byte(block), envOf("ACME_WEBHOOK_SECRET", "acme", "ACME_VERIFY_TOKEN", "vt"))
	if err != nil {
		t.Fatalf("the docs' example: %v", err)
	}
	if p := cfg.Routes[0].Route.Preset; p == nil || p.Handshake == nil {
		t.Fatalf("the docs' example has no preset with a handshake: %+v", p)
	}
}

// A misspelt field hides none of the spec's other problems, each is
// reported at its line with the name it was meant to be, and a key given
// as one template is named as written.
func TestConfigProviderSpecEveryProblem(t *testing.T) {
	text := strings.NewReplacer("hmac-sha256", "hmac-sha521", "format: pairs", "encodng: base64\n        format: pairs",
		`"{json:id}"`, `"{jsn:event}"`).Replace(specRoute)
	text = strings.ReplaceAll(text, `\n`, "\n")
	_, err := Parse("idemhook.yaml", []byte(text), envOf("ACME_SECRET", "acme-secret"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("errors: %v; want 3", err)
	}
	for i, want := range []string{
		`idemhook.yaml:7: routes[0].provider.signature.algorithm: unknown algorithm "hmac-sha521": did you mean "hmac-sha512"?`,
		`idemhook.yaml:9: routes[0].provider.signature.encodng: unknown field "encodng": did you mean "encoding"?`,
		`idemhook.yaml:14: routes[0].provider.key: unknown placeholder {jsn:event} here: did you mean "json"?`,
	} {
		if !strings.HasPrefix(errs[i].Error(), want) {
			t.Errorf("error %d: %v, want %s...", i, errs[i], want)
		}
	}
	// A field of the wrong kind is reported once, not again as missing.
	text = strings.Replace(specRoute, "algorithm: hmac-sha256", "algorithm: [hmac-sha256]", 1)
	_, err = Parse("idemhook.yaml", []byte(text), envOf("ACME_SECRET", "acme-secret"))
	if !errors.As(err, &errs) || len(errs) != 1 || !strings.Contains(errs[0].Error(), "signature.algorithm: expected a single value") {
		t.Errorf("algorithm as a list: %v", err)
	}
}

// Several problems of a spec are reported at once, each at its line.
func TestConfigProviderSpecSeveralErrors(t *testing.T) {
	text := strings.NewReplacer("hmac-sha256", "hmac-sha265", `"{json:id}"`, `"{json:id"`, "{status: 200}", "{status: 302}").Replace(specRoute)
	_, err := Parse("idemhook.yaml", []byte(text), envOf("ACME_SECRET", "acme-secret"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("errors: %v; want 3", err)
	}
	for i, want := range []string{
		"idemhook.yaml:7: routes[0].provider.signature.algorithm: unknown algorithm",
		"idemhook.yaml:13: routes[0].provider.key: ",
		"idemhook.yaml:14: routes[0].provider.success.status: 302",
	} {
		if !strings.HasPrefix(errs[i].Error(), want) {
			t.Errorf("error %d: %v, want %s...", i, errs[i], want)
		}
	}
}
