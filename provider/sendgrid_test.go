package provider_test

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
)

// TestSendGridNodeVectors checks the requests signed in Node.js and
// verified by SendGrid's own library (@sendgrid/eventwebhook): the ones it
// accepts pass, the one signed with another key fails; a batch of several
// events has no key of its own (the body hash).
func TestSendGridNodeVectors(t *testing.T) {
	for _, v := range nodeVectors(t, "sendgrid") {
		t.Run(v.Name, func(t *testing.T) {
			p, ok := checkNodeVector(t, "sendgrid", v)
			if !ok {
				return // a forged vector, refused
			}
			if k, _ := p.Key(v.request(v.Body), []byte(v.Body)); k != v.Key {
				t.Fatalf("key %q, want %q", k, v.Key)
			}
			if err := verify(t, p, v.request(strings.Replace(v.Body, `"event":`, `"event": `, 1))); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("body with a space added: Verify = %v", err)
			}
			// The key given as the public_key option instead of a secret.
			q := newPreset(t, "sendgrid", provider.Config{SendGrid: provider.SendGridOptions{PublicKey: v.Secret}}, time.Unix(v.Now, 0))
			if err := verify(t, q, v.request(v.Body)); err != nil {
				t.Fatalf("key as public_key: %v", err)
			}
		})
	}
}

// TestSendGrid covers what the shared fixture cases don't: the keys'
// forms and errors, the 25-hour default tolerance, the timestamp header,
// the key of a batch and the preset's Items.
func TestSendGrid(t *testing.T) {
	keys := sendGridTestKeys(t)
	body := `[{"email":"a@example.com","timestamp":1779999990,"event":"open","sg_event_id":"sg_1"}]`
	sent := baseTime.Add(-10 * time.Second)

	t.Run("PEM key", func(t *testing.T) {
		der, _ := base64.StdEncoding.DecodeString(keys.public(0))
		pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
		p := newPreset(t, "sendgrid", provider.Config{Secrets: []string{pemKey}}, baseTime)
		if err := verify(t, p, sendGridRequest(t, "/sg", sent, keys.keys[0], body)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bad keys", func(t *testing.T) {
		rsaDER, _ := x509.MarshalPKIXPublicKey(&stoneKeys(t).stonePriv.PublicKey)
		for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString([]byte("short")), base64.StdEncoding.EncodeToString(rsaDER)} {
			_, err := provider.New("sendgrid", provider.Config{Secrets: []string{keys.public(0), bad}})
			var se *provider.SecretError
			if !errors.As(err, &se) || se.Index != 1 || strings.Contains(err.Error(), bad) {
				t.Errorf("secret %q: %v, want a SecretError for #2 that does not repeat it", bad, err)
			}
			_, err = provider.New("sendgrid", provider.Config{SendGrid: provider.SendGridOptions{PublicKey: bad}})
			var oe *provider.OptionError
			if !errors.As(err, &oe) || oe.Option != "public_key" {
				t.Errorf("public_key %q: %v, want an OptionError for public_key", bad, err)
			}
		}
		_, err := provider.New("sendgrid", provider.Config{})
		if err == nil || !strings.Contains(err.Error(), "public_key") {
			t.Errorf("no key: %v, want an error naming the public_key option", err)
		}
	})
	t.Run("public_key beside the secrets", func(t *testing.T) {
		var cfg provider.Config
		if err := cfg.SetOption("sendgrid", "public_key", keys.public(1)); err != nil || cfg.SendGrid.PublicKey != keys.public(1) {
			t.Fatalf("SetOption: %v %+v", err, cfg.SendGrid)
		}
		cfg.Secrets = []string{keys.public(0)}
		p := newPreset(t, "sendgrid", cfg, baseTime)
		for i := range 2 {
			if err := verify(t, p, sendGridRequest(t, "/sg", sent, keys.keys[i], body)); err != nil {
				t.Fatalf("signed with key %d: %v", i, err)
			}
		}
		if err := verify(t, p, sendGridRequest(t, "/sg", sent, keys.keys[2], body)); !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("signed with a third key: %v", err)
		}
		// public_key is sendgrid's: set for another preset it is refused
		// like any option of another preset.
		if _, err := provider.New("github", provider.Config{Secrets: []string{"s"}, SendGrid: cfg.SendGrid}); err == nil {
			t.Fatal("github with sendgrid's public_key: no error")
		}
	})
	t.Run("default tolerance 25h", func(t *testing.T) {
		p := newPreset(t, "sendgrid", provider.Config{Secrets: []string{keys.public(0)}}, baseTime)
		if err := verify(t, p, sendGridRequest(t, "/sg", baseTime.Add(-24*time.Hour), keys.keys[0], body)); err != nil {
			t.Fatalf("signed 24h ago (the retry window): %v", err)
		}
		if err := verify(t, p, sendGridRequest(t, "/sg", baseTime.Add(-26*time.Hour), keys.keys[0], body)); !errors.Is(err, provider.ErrTimestampOutOfTolerance) {
			t.Fatalf("signed 26h ago: %v", err)
		}
	})
	t.Run("timestamp header", func(t *testing.T) {
		p := newPreset(t, "sendgrid", provider.Config{Secrets: []string{keys.public(0)}}, baseTime)
		r := sendGridRequest(t, "/sg", sent, keys.keys[0], body)
		r.Header.Del(provider.SendGridTimestampHeader)
		if err := verify(t, p, r); !errors.Is(err, provider.ErrMissingHeader) {
			t.Fatalf("no timestamp: %v", err)
		}
		r = sendGridRequest(t, "/sg", sent, keys.keys[0], body)
		r.Header.Set(provider.SendGridTimestampHeader, "2026-11-30T10:00:00Z")
		if err := verify(t, p, r); !errors.Is(err, provider.ErrMalformedHeader) {
			t.Fatalf("timestamp not unix seconds: %v", err)
		}
		// The timestamp is signed: another one fails.
		r = sendGridRequest(t, "/sg", sent, keys.keys[0], body)
		r.Header.Set(provider.SendGridTimestampHeader, unix(sent.Add(time.Second)))
		if err := verify(t, p, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("timestamp changed: %v", err)
		}
		// A signature that is base64 but not a DER signature fails to
		// verify; one that is not base64 is malformed.
		r = sendGridRequest(t, "/sg", sent, keys.keys[0], body)
		r.Header.Set(provider.SendGridSignatureHeader, base64.StdEncoding.EncodeToString(make([]byte, 64)))
		if err := verify(t, p, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("64 zero bytes: %v", err)
		}
		r.Header.Set(provider.SendGridSignatureHeader, "not base64!")
		if err := verify(t, p, r); !errors.Is(err, provider.ErrMalformedHeader) {
			t.Fatalf("not base64: %v", err)
		}
	})
	t.Run("key and items", func(t *testing.T) {
		p := newPreset(t, "sendgrid", provider.Config{Secrets: []string{keys.public(0)}}, baseTime)
		for _, tt := range []struct{ body, want string }{
			{body, "sg_1"},
			{`[{"event":"open","sg_event_id":"a"},{"event":"click","sg_event_id":"b"}]`, ""},
			{`[]`, ""},
			// without a usable sg_event_id: the item's canonical hash, as Items keys it
			{`[{"event":"open"}]`, canonicalKey(`{"event":"open"}`)},
			{`[{"sg_event_id":{"x":1}}]`, canonicalKey(`{"sg_event_id":{"x":1}}`)},
			{`{"sg_event_id":"a"}`, ""},
			{`not json`, ""},
		} {
			if got, err := p.Key(nil, []byte(tt.body)); err != nil || got != tt.want {
				t.Errorf("Key(%s) = %q, %v; want %q", tt.body, got, err, tt.want)
			}
		}
		want := idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "sg_event_id"}}}
		if p.Items == nil || len(p.Items.Paths) != 1 || p.Items.Paths[0] != want.Paths[0] || p.Items.Mode != "" {
			t.Fatalf("Items = %+v, want %+v", p.Items, want)
		}
	})
}
