package provider_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// TestZoom covers what the shared fixture cases don't: the 2-hour default
// tolerance, the key's fallbacks, and which secret answers a validation.
func TestZoom(t *testing.T) {
	p := newPreset(t, "zoom", provider.Config{Secrets: []string{"tok"}}, baseTime)
	body := `{"event":"meeting.ended","event_ts":1780000000000,"payload":{"object":{"id":"1"}}}`
	tests := []struct {
		name string
		give func() *http.Request
		want error
	}{
		{"1h59m old: inside the default 2h", func() *http.Request { return zoomRequest("/", baseTime.Add(-119*time.Minute), "tok", body) }, nil},
		{"2h1m old", func() *http.Request { return zoomRequest("/", baseTime.Add(-121*time.Minute), "tok", body) }, provider.ErrTimestampOutOfTolerance},
		{"2h1m ahead", func() *http.Request { return zoomRequest("/", baseTime.Add(121*time.Minute), "tok", body) }, provider.ErrTimestampOutOfTolerance},
		{"timestamp in milliseconds", func() *http.Request {
			r := zoomRequest("/", baseTime, "tok", body)
			ms := unix(baseTime) + "000"
			r.Header.Set("x-zm-request-timestamp", ms)
			r.Header.Set("x-zm-signature", "v0="+hmacHex("tok", "v0:"+ms+":"+body))
			return r
		}, provider.ErrTimestampOutOfTolerance},
		{"no timestamp", func() *http.Request {
			r := zoomRequest("/", baseTime, "tok", body)
			r.Header.Del("x-zm-request-timestamp")
			return r
		}, provider.ErrMissingHeader},
		{"another timestamp than the one signed", func() *http.Request {
			r := zoomRequest("/", baseTime, "tok", body)
			r.Header.Set("x-zm-request-timestamp", unix(baseTime.Add(time.Second)))
			return r
		}, provider.ErrNoMatchingSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := verify(t, p, tt.give()); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
	for _, tt := range []struct{ body, want string }{
		{`{"event":"meeting.ended","payload":{}}`, ""},                                     // no event_ts: body hash
		{`{"event_ts":1,"payload":{}}`, ""},                                                // no event: body hash
		{`{"event":"a","event_ts":1}`, "a:1:" + digest16("")},                              // no payload: the digest of nothing
		{`{"event":"a","event_ts":1,"payload":{ "x" : 1 }}`, "a:1:" + digest16(`{"x":1}`)}, // compact
		{`[1]`, ""},
	} {
		if got, _ := p.Key(post("/", tt.body), []byte(tt.body)); got != tt.want {
			t.Errorf("Key(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
	// Two participants joining one meeting in one millisecond are two events.
	a := `{"event":"meeting.participant_joined","event_ts":5,"payload":{"object":{"id":"1","participant":{"id":"A"}}}}`
	b := `{"event":"meeting.participant_joined","event_ts":5,"payload":{"object":{"id":"1","participant":{"id":"B"}}}}`
	ka, _ := p.Key(post("/", a), []byte(a))
	kb, _ := p.Key(post("/", b), []byte(b))
	if ka == kb {
		t.Fatalf("two participants' joins share the key %q", ka)
	}

	// During a rotation, the validation is answered with the secret that
	// signed it: the one Zoom holds.
	rotated := newPreset(t, "zoom", provider.Config{Secrets: []string{"old", "new"}}, baseTime)
	validation := `{"payload":{"plainToken":"pt-1"},"event_ts":1780000000000,"event":"endpoint.url_validation"}`
	r := zoomRequest("/", baseTime, "new", validation)
	if err := verify(t, rotated, r); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	if !rotated.Handshake(w, r, []byte(validation)) {
		t.Fatal("endpoint.url_validation not answered")
	}
	var got map[string]string
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got["plainToken"] != "pt-1" || got["encryptedToken"] != hmacHex("new", "pt-1") {
		t.Fatalf("answer %s (%v), want the token hashed with the secret that signed", w.Body, err)
	}
	if p.Handshake(httptest.NewRecorder(), post("/", body), []byte(body)) {
		t.Fatal("an event is not a handshake")
	}
}

// TestZoomNodeVectors: the requests Node.js signed as Zoom documents, each
// first checked by Zoom's own library (Rivet), pass; one signed with
// another secret token doesn't; a changed body doesn't; and through the
// real middleware the url_validation is answered exactly as Rivet answers
// it, without reaching the handler.
func TestZoomNodeVectors(t *testing.T) {
	for _, v := range nodeVectors(t, "zoom") {
		t.Run(v.Name, func(t *testing.T) {
			p, ok := checkNodeVector(t, "zoom", v)
			if !ok {
				return // a forged vector, refused
			}
			if err := verify(t, p, v.request(strings.Replace(v.Body, `"event_ts":`, `"event_ts": `, 1))); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("body with a space added: Verify = %v", err)
			}
			s := newServer(t, "zoom", "", p)
			got := s.send(t, v.request(v.Body))
			if v.Answer == "" {
				if k, _ := p.Key(v.request(v.Body), []byte(v.Body)); k != v.Key {
					t.Fatalf("key %q, want %q", k, v.Key)
				}
				if got.status != 201 || s.runs.Load() != 1 {
					t.Fatalf("event: %d %q runs %d", got.status, got.body, s.runs.Load())
				}
				return
			}
			var want, answer map[string]string
			if err := json.Unmarshal([]byte(v.Answer), &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(got.body), &answer); err != nil || got.status != 200 || got.contentType != "application/json" || !maps.Equal(answer, want) {
				t.Fatalf("url_validation answered %d %q %s (%v), want Rivet's %s", got.status, got.contentType, got.body, err, v.Answer)
			}
			if again := s.send(t, v.request(v.Body)); again.replayed || again.body != got.body || s.runs.Load() != 0 {
				t.Fatalf("second url_validation: replayed %v body %s runs %d: a handshake is never claimed nor forwarded", again.replayed, again.body, s.runs.Load())
			}
		})
	}
}

// digest16 is the hex of the first 16 bytes of SHA-256(s).
func digest16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}
