package provider_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/provider"
)

func TestSlack(t *testing.T) {
	p := newPreset(t, "slack", provider.Config{Secrets: []string{"sec"}}, baseTime)
	body := `{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	w := httptest.NewRecorder()
	if !p.Handshake(w, post("/", body), []byte(body)) || w.Code != 200 || w.Body.String() != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Fatalf("url_verification answered %d %q", w.Code, w.Body)
	}
	ev := `{"type":"event_callback","event_id":"Ev1"}`
	if p.Handshake(httptest.NewRecorder(), post("/", ev), []byte(ev)) {
		t.Fatal("an event_callback is not a handshake")
	}
	if k, _ := p.Key(post("/", ev), []byte(ev)); k != "Ev1" {
		t.Fatalf("key without api_app_id = %q, want Ev1", k)
	}
	r := post("/", ev)
	r.Header.Set("X-Slack-Request-Timestamp", "17800000OO")
	r.Header.Set("X-Slack-Signature", "v0="+hmacHex("sec", "v0:17800000OO:"+ev))
	if err := verify(t, p, r); !errors.Is(err, provider.ErrMalformedHeader) || !strings.Contains(err.Error(), "X-Slack-Request-Timestamp") {
		t.Fatalf("non-numeric timestamp: %v", err)
	}
	r.Header.Del("X-Slack-Request-Timestamp")
	if err := verify(t, p, r); !errors.Is(err, provider.ErrMissingHeader) || !strings.Contains(err.Error(), "X-Slack-Request-Timestamp") {
		t.Fatalf("missing timestamp: %v", err)
	}
}
