package config

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigToleranceWithoutTimestamp: tolerance on a route whose provider
// signs no timestamp is an error at the tolerance line.
func TestConfigToleranceWithoutTimestamp(t *testing.T) {
	text := `routes:
  - path: /gh
    upstream: http://127.0.0.1:3000/gh
    source: gh
    provider: github
    secrets: [s]
    tolerance: 5m
`
	_, err := Parse("f.yaml", []byte(text), envOf())
	if want := "f.yaml:7: routes[0].tolerance: provider github: tolerance 5m0s has no effect"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
}

// TestConfigProviderPresets: the presets of providers that send one event
// per request are configured like the others, with their secrets given in
// any of the three ways, their tolerance where they sign a timestamp, and
// their options; a mistake is reported at its line.
func TestConfigProviderPresets(t *testing.T) {
	route := "routes:\n  - path: /hook\n    upstream: http://127.0.0.1:3000/hook\n    source: hook\n    provider: PROVIDER\n"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secrets"), []byte("new-secret\nold-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		provider string
		give     string // appended to the route
		wantTTL  time.Duration
		wantErr  string
		// signedFor, for twilio: the URL a request to /hook must be signed
		// for to pass, i.e. the public_url the route took.
		signedFor string
	}{
		{provider: "twitch", give: "    secret_env: TWITCH_SECRET\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "twitch", give: "    secrets: [s]\n    tolerance: 2m\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "twitch", give: "    secret_file: DIR/secrets\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "twitch", give: "    secrets: [s]\n    provider_options: {verify_token: x}\n",
			wantErr: "f.yaml:7: routes[0].provider_options.verify_token: provider twitch: option verify_token: unknown option (this provider takes no options)"},
		{provider: "twitch", give: "",
			wantErr: "f.yaml:5: routes[0].provider: provider twitch needs a secret"},
		{provider: "twilio", give: "    secret_env: TWILIO_AUTH_TOKEN\n    provider_options: {public_url: https://hooks.example.com}\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "twilio", give: "    secrets: [s]\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "twilio", give: "    secret_file: DIR/secrets\n    provider_options:\n      public_url: ${PUBLIC_URL}\n", wantTTL: 2 * 24 * time.Hour,
			signedFor: "https://hooks.example.com/base/hook"},
		{provider: "twilio", give: "    secrets: [s]\n    provider_options:\n      public_url: hooks.example.com\n",
			wantErr: "f.yaml:8: routes[0].provider_options.public_url: provider twilio: option public_url: is not an http or https URL"},
		{provider: "twilio", give: "    secrets: [s]\n    tolerance: 5m\n",
			wantErr: "f.yaml:7: routes[0].tolerance: provider twilio: tolerance 5m0s has no effect: twilio signs no timestamp"},
		{provider: "zoom", give: "    secrets: [s]\n    provider_options: {public_url: https://hooks.example.com}\n",
			wantErr: "f.yaml:7: routes[0].provider_options.public_url: provider zoom: option public_url: unknown option (this provider takes no options)"},
		{provider: "zoom", give: "    secret_env: ZOOM_SECRET\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "mailgun", give: "    secret_env: MAILGUN_SIGNING_KEY\n", wantTTL: 2 * 24 * time.Hour},
		// sendgrid's key is public: given as public_key, no secret is needed.
		{provider: "sendgrid", give: "    provider_options: {public_key: MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEYP7UuiVanTHJYet0xjVtaMBJuJI7Yfps5mliLmDyn7Z5A/4QCLi8maQa6elWKLxk8vGyDC1+n1F3o8KU1EYimQ==}\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "sendgrid", give: "    secrets: [MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEYP7UuiVanTHJYet0xjVtaMBJuJI7Yfps5mliLmDyn7Z5A/4QCLi8maQa6elWKLxk8vGyDC1+n1F3o8KU1EYimQ==]\n    tolerance: 10m\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "sendgrid", give: "    provider_options: {public_key: \"\"}\n", wantErr: "f.yaml:5: routes[0].provider: provider sendgrid needs a secret"},
		{provider: "hubspot", give: "    secret_env: HUBSPOT_CLIENT_SECRET\n    provider_options: {public_url: https://hooks.example.com}\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "hubspot", give: "    secrets: [s]\n    provider_options: {public_key: MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEYP7UuiVanTHJYet0xjVtaMBJuJI7Yfps5mliLmDyn7Z5A/4QCLi8maQa6elWKLxk8vGyDC1+n1F3o8KU1EYimQ==}\n",
			wantErr: "f.yaml:7: routes[0].provider_options.public_key: provider hubspot: option public_key: unknown option (known: public_url)"},
		{provider: "mailgun", give: "    secrets: [s]\n    tolerance: 10m\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "mailgun", give: "    secret_file: DIR/secrets\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "mailgun", give: "    secrets: [s]\n    provider_options: {header: x}\n",
			wantErr: "f.yaml:7: routes[0].provider_options.header: provider mailgun: option header: unknown option (this provider takes no options)"},
		{provider: "zoom", give: "    secrets: [s]\n    tolerance: 5m\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "zoom", give: "    secret_file: DIR/secrets\n", wantTTL: 2 * 24 * time.Hour},
		{provider: "zoom", give: "    secrets: [s]\n    tolerance: -1s\n",
			wantErr: "f.yaml:7: routes[0].tolerance:"},
	}
	for _, tt := range tests {
		t.Run(tt.provider+"/"+tt.give, func(t *testing.T) {
			text := strings.ReplaceAll(route, "PROVIDER", tt.provider) + strings.ReplaceAll(tt.give, "DIR", dir)
			cfg, err := Parse("f.yaml", []byte(text), envOf("TWITCH_SECRET", "s", "ZOOM_SECRET", "s", "TWILIO_AUTH_TOKEN", "s", "PUBLIC_URL", "https://hooks.example.com/base", "MAILGUN_SIGNING_KEY", "s", "HUBSPOT_CLIENT_SECRET", "s"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := cfg.Routes[0].Route
			if r.Preset == nil || r.Preset.Name != tt.provider || r.TTL != tt.wantTTL {
				t.Fatalf("preset %v, TTL %v; want %s, %v", r.Preset, r.TTL, tt.provider, tt.wantTTL)
			}
			if tt.signedFor != "" {
				// Signed with the file's second secret, for the public URL.
				m := hmac.New(sha1.New, []byte("old-secret"))
				m.Write([]byte(tt.signedFor + "MessageSidSM1"))
				req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("MessageSid=SM1"))
				req.Header.Set("X-Twilio-Signature", base64.StdEncoding.EncodeToString(m.Sum(nil)))
				if err := r.Preset.Verify(req, []byte("MessageSid=SM1")); err != nil {
					t.Fatalf("a request signed for %s: %v", tt.signedFor, err)
				}
			}
		})
	}
}
