package provider_test

import (
	"testing"

	"github.com/idemhook/idemhook/provider"
)

// TestWhatsAppGroupStatusKey: a message sent to a group gets one status
// update per recipient with the same wamid and status; only recipient_id
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
