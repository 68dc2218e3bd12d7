package provider_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
)

// TestWhatsAppCloudUnsignedGET: Meta's subscription challenge is the only
// request Meta sends unsigned. Any other GET or HEAD on the route (no
// hub.mode) is refused like an unsigned POST, so that an unauthenticated
// request never reaches the handler; through the middleware it gets 401
// and the outcome signature_invalid, and the handler does not run. The
// challenge itself is still answered.
func TestWhatsAppCloudUnsignedGET(t *testing.T) {
	cfg := provider.Config{Secrets: []string{"meta-app-secret"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt-123"}}
	p := newPreset(t, "whatsapp-cloud", cfg, baseTime)
	s := newServer(t, "whatsapp", "", p)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		r := s.send(t, httptest.NewRequest(method, "/wa?foo=bar", nil))
		if r.status != http.StatusUnauthorized || s.runs.Load() != 0 || s.lastOutcome() != idemhook.OutcomeSignatureInvalid {
			t.Errorf("%s without hub.mode = %d, outcome %q, handler runs %d; want 401, signature_invalid, 0",
				method, r.status, s.lastOutcome(), s.runs.Load())
		}
	}
	r := s.send(t, httptest.NewRequest(http.MethodGet, "/wa?hub.mode=subscribe&hub.verify_token=vt-123&hub.challenge=42", nil))
	if r.status != http.StatusOK || r.body != "42" || s.runs.Load() != 0 {
		t.Errorf("challenge = %d %q, handler runs %d; want 200 \"42\", 0", r.status, r.body, s.runs.Load())
	}
}
