package provider_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/provider"
)

func TestStandardWebhooksHeaders(t *testing.T) {
	p := newPreset(t, "standardwebhooks", provider.Config{Secrets: []string{stdWebhooksSecret}}, baseTime)
	body := `{}`
	for _, tt := range []struct {
		name, drop string
		want       error
	}{
		{"no id", "webhook-id", provider.ErrMissingHeader},
		{"no timestamp", "webhook-timestamp", provider.ErrMissingHeader},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := post("/", body)
			r.Header.Set("webhook-id", "msg_1")
			r.Header.Set("webhook-timestamp", unix(baseTime))
			r.Header.Set("webhook-signature", "v1,"+hmacB64(swKey(t, stdWebhooksSecret), "msg_1."+unix(baseTime)+"."+body))
			r.Header.Del(tt.drop)
			err := verify(t, p, r)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.drop) {
				t.Fatalf("Verify = %v, want %v naming %s", err, tt.want, tt.drop)
			}
		})
	}
	// Only asymmetric signatures: nothing to check with a symmetric secret.
	r := post("/", body)
	r.Header.Set("webhook-id", "msg_1")
	r.Header.Set("webhook-timestamp", unix(baseTime))
	r.Header.Set("webhook-signature", "v1a,c2ln")
	if err := verify(t, p, r); !errors.Is(err, provider.ErrMalformedHeader) {
		t.Fatalf("v1a only: %v", err)
	}
}

// TestStandardWebhooksSignatureList: the secret works with and without its
// whsec_ prefix. webhook-signature may hold several space-separated entries
// (a rotation, other versions) and passes when any v1 entry matches. An
// entry that is not "version,signature" or a v1 that isn't base64 makes the
// header malformed. Only other versions, or only wrong v1s, never pass.
func TestStandardWebhooksSignatureList(t *testing.T) {
	const body = `{"type":"user.created"}`
	ts := unix(baseTime)
	good := hmacB64(swKey(t, stdWebhooksSecret), "msg_1."+ts+"."+body)
	other := hmacB64(swKey(t, otherSWSecret), "msg_1."+ts+"."+body)
	tests := []struct {
		name, secret, header string
		want                 error
	}{
		{"prefixed secret", stdWebhooksSecret, "v1," + good, nil},
		{"bare secret", strings.TrimPrefix(stdWebhooksSecret, "whsec_"), "v1," + good, nil},
		{"match second of two", stdWebhooksSecret, "v1," + other + " v1," + good, nil},
		{"extra spaces", stdWebhooksSecret, "  v1a,c2ln   v1," + good + "  ", nil},
		{"only wrong v1s", stdWebhooksSecret, "v1," + other + " v1," + other, provider.ErrNoMatchingSignature},
		{"only other versions", stdWebhooksSecret, "v2," + good + " v1a," + good, provider.ErrMalformedHeader},
		{"entry without comma", stdWebhooksSecret, "v1" + good, provider.ErrMalformedHeader},
		{"v1 not base64", stdWebhooksSecret, "v1,***", provider.ErrMalformedHeader},
		{"empty", stdWebhooksSecret, "   ", provider.ErrMissingHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPreset(t, "standardwebhooks", provider.Config{Secrets: []string{tt.secret}}, baseTime)
			r := post("/", body)
			r.Header.Set("webhook-id", "msg_1")
			r.Header.Set("webhook-timestamp", ts)
			r.Header.Set("webhook-signature", tt.header)
			err := verify(t, p, r)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), tt.secret) {
				t.Fatalf("error shows the secret: %v", err)
			}
		})
	}
}
