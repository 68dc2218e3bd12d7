package provider_test

import (
	"errors"
	"math"
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

// TestSpecHandshakeJSONTypes: a JSON answer keeps its values' types, and
// only its strings are templates (Discord's PONG is {"type": 1}).
func TestSpecHandshakeJSONTypes(t *testing.T) {
	_, ctype, got := handshakeAnswer(t, `handshakes:
- match: {json: {type: 1}}
  answer:
    json:
      type: 1
      quoted: "1"
      ratio: 0.5
      ok: true
      none: null
      nested: {list: [1, "{json:at|upper}", {deep: false}], at: "{json:at}"}
`, `{"type":1,"at":"x"}`)
	want := `{"nested":{"at":"x","list":[1,"X",{"deep":false}]},"none":null,"ok":true,"quoted":"1","ratio":0.5,"type":1}`
	if got != want || ctype != "application/json" {
		t.Errorf("answered %s (%s), want %s", got, ctype, want)
	}
	// Go values too; a value JSON can't write is refused at its field.
	spec := provider.Spec{Signature: provider.Signature{Algorithm: "hmac-sha256", Header: "X-Sig"},
		Handshakes: []provider.Handshake{{Match: provider.Match{Method: "GET"},
			Answer: provider.Answer{JSON: map[string]any{"a": []any{1, math.Inf(1)}}}}}}
	var se *provider.SpecError
	if _, err := spec.Preset(provider.Config{Secrets: []string{"s"}}); !errors.As(err, &se) || se.Field != "handshakes[0].answer.json.a[1]" {
		t.Errorf("an infinity: %v", err)
	}
	spec.Handshakes[0].Answer.JSON = map[string]any{"a": map[string]any{"b": "{jsn:x}"}}
	if _, err := spec.Preset(provider.Config{Secrets: []string{"s"}}); !errors.As(err, &se) || se.Field != "handshakes[0].answer.json.a.b" {
		t.Errorf("a bad template: %v", err)
	}
}
