package provider_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
)

func TestWhatsAppCloud(t *testing.T) {
	cfg := provider.Config{Secrets: []string{"meta-app-secret"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt-123"}}
	p := newPreset(t, "whatsapp-cloud", cfg, baseTime)

	t.Run("handshake", func(t *testing.T) {
		tests := []struct {
			name       string
			query      string
			wantDone   bool
			wantStatus int
			wantBody   string
		}{
			{"subscribe", "hub.mode=subscribe&hub.verify_token=vt-123&hub.challenge=1158201444", true, 200, "1158201444"},
			{"wrong token", "hub.mode=subscribe&hub.verify_token=vt-12&hub.challenge=1158201444", true, 403, ""},
			{"no token", "hub.mode=subscribe&hub.challenge=1158201444", true, 403, ""},
			{"other mode", "hub.mode=unsubscribe&hub.verify_token=vt-123&hub.challenge=1", true, 403, ""},
			{"not a handshake", "foo=bar", false, 0, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := httptest.NewRequest(http.MethodGet, "/wa?"+tt.query, nil)
				// A challenge passes Verify so that it reaches Handshake. Any
				// other unsigned GET is refused.
				if err := p.Verify(r, nil); (err == nil) != tt.wantDone {
					t.Fatalf("Verify(GET) = %v, want nil only for a challenge (hub.mode)", err)
				}
				w := httptest.NewRecorder()
				if done := p.Handshake(w, r, nil); done != tt.wantDone {
					t.Fatalf("Handshake = %v, want %v", done, tt.wantDone)
				}
				if !tt.wantDone {
					return
				}
				if w.Code != tt.wantStatus {
					t.Fatalf("status %d, want %d", w.Code, tt.wantStatus)
				}
				if tt.wantStatus == 200 && (w.Body.String() != tt.wantBody || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain")) {
					t.Fatalf("body %q (%s), want %q text/plain", w.Body, w.Header().Get("Content-Type"), tt.wantBody)
				}
				if strings.Contains(w.Body.String(), "vt-123") {
					t.Fatalf("refusal leaks the verify token: %q", w.Body)
				}
			})
		}
		noToken := newPreset(t, "whatsapp-cloud", provider.Config{Secrets: []string{"s"}}, baseTime)
		w := httptest.NewRecorder()
		noToken.Handshake(w, httptest.NewRequest(http.MethodGet, "/wa?hub.mode=subscribe&hub.verify_token=&hub.challenge=1", nil), nil)
		if w.Code != 403 {
			t.Fatalf("without a configured verify_token, an empty token got %d, want 403", w.Code)
		}
		w = httptest.NewRecorder()
		if p.Handshake(w, post("/wa", `{}`), []byte(`{}`)) {
			t.Fatal("a POST is not a handshake")
		}
	})

	t.Run("key", func(t *testing.T) {
		value := func(items string) string {
			return `{"object":"whatsapp_business_account","entry":[{"id":"WABA","changes":[{"field":"messages","value":{` + items + `}}]}]}`
		}
		tests := []struct {
			name, give, want string
		}{
			{"one message", value(`"messages":[{"id":"wamid.A"}]`), "wamid.A"},
			{"one status", value(`"statuses":[{"id":"wamid.A","status":"delivered"}]`), "wamid.A:delivered"},
			{"two messages", value(`"messages":[{"id":"wamid.A"},{"id":"wamid.B"}]`), ""},
			{"message and status", value(`"messages":[{"id":"wamid.A"}],"statuses":[{"id":"wamid.B","status":"read"}]`), ""},
			{"two entries", `{"entry":[{"changes":[{"value":{"messages":[{"id":"wamid.A"}]}}]},{"changes":[{"value":{"messages":[{"id":"wamid.B"}]}}]}]}`, ""},
			{"no items", value(`"contacts":[]`), ""},
			// keyed as the item flow keys it: by its canonical JSON's hash
			{"status without status", value(`"statuses":[{"id":"wamid.A"}]`), canonicalKey(`{"id":"wamid.A"}`)},
			{"not json", `entry=1`, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got, err := p.Key(post("/", tt.give), []byte(tt.give)); got != tt.want || err != nil {
					t.Fatalf("Key = %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	})
}

// TestWhatsAppCloudUnsignedGET: Meta's subscription challenge is the only
// request Meta sends unsigned. Any other GET or HEAD on the route (no
// hub.mode) is refused like an unsigned POST, so that an unauthenticated
// request never reaches the handler. Through the middleware it gets 401
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

// TestWhatsAppGroupStatusKey: a message sent to a group gets one status
// update per recipient with the same wamid and status. Only recipient_id
// tells them apart (reference: "use wamid|status, plus recipient_id for
// groups"). Keyed on wamid and status alone, the second recipient's "read"
// would be dropped as a duplicate of the first. A retry (the same body) must
// still get the same key.
func TestWhatsAppGroupStatusKey(t *testing.T) {
	p := newPreset(t, "whatsapp-cloud", provider.Config{Secrets: []string{"meta-app-secret"}}, baseTime)
	status := func(recipient string) string {
		return `{"object":"whatsapp_business_account","entry":[{"id":"WABA","changes":[{"field":"messages","value":{"statuses":[{"id":"wamid.G","status":"read","recipient_id":"` + recipient + `"}]}}]}]}`
	}
	key := func(body string) string {
		t.Helper()
		k, err := p.Key(post("/", body), []byte(body))
		if err != nil || k == "" {
			t.Fatalf("Key(%s) = %q, %v; want a key", body, k, err)
		}
		return k
	}
	a, b := key(status("5511999990001")), key(status("5511999990002"))
	if a == b {
		t.Fatalf("two recipients' read statuses of one group message share the key %q", a)
	}
	if again := key(status("5511999990001")); again != a {
		t.Fatalf("a retry of the same status got key %q, first %q", again, a)
	}
}
