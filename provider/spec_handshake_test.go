package provider_test

import (
	"net/http/httptest"
	"testing"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/provider"
)

// handshakeAnswer builds the spec of yaml (an HMAC-SHA256 signature of
// the body in X-Sig, secret "s") as the gateway reads it, and returns its
// answer to a signed POST of body.
func handshakeAnswer(t *testing.T, yaml, body string) (status int, ctype, answer string) {
	t.Helper()
	spec, err := config.ParseProviderSpec("h.yaml", []byte("signature: {algorithm: hmac-sha256, header: X-Sig}\n"+yaml), specEnv)
	if err != nil {
		t.Fatal(err)
	}
	p := specPreset(t, spec, provider.Config{Secrets: []string{"s"}}, baseTime)
	r := post("/", body)
	r.Header.Set("X-Sig", hmacHex("s", body))
	if err := verify(t, p, r); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	w := httptest.NewRecorder()
	if !p.Handshake(w, r, []byte(body)) {
		t.Fatalf("%s: not answered as a handshake", body)
	}
	return w.Code, w.Header().Get("Content-Type"), w.Body.String()
}

// TestSpecHandshakeBodyEscapes: every character a template gives a meaning
// to can be written in a handshake's body with a backslash, in YAML
// written plain, single-quoted or double-quoted (where the backslash is
// itself doubled).
func TestSpecHandshakeBodyEscapes(t *testing.T) {
	for _, body := range []string{
		`body: \{"type":1\}`,
		`body: '\{"type":1,"at":{json:at}\}'`,
		`body: "\\{\"type\":1\\}"`,
		`body: '\{"list":\[1\],"slash":"\\\\"\}'`,
	} {
		_, _, got := handshakeAnswer(t, "handshakes:\n- match: {json: {type: 1}}\n  answer:\n    "+body+"\n", `{"type":1,"at":"x"}`)
		want := map[string]string{
			`body: '\{"type":1,"at":{json:at}\}'`:     `{"type":1,"at":x}`,
			`body: '\{"list":\[1\],"slash":"\\\\"\}'`: `{"list":[1],"slash":"\\"}`,
		}[body]
		if want == "" {
			want = `{"type":1}`
		}
		if got != want {
			t.Errorf("%s: answered %s, want %s", body, got, want)
		}
	}
}
