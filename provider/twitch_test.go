package provider_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// TestTwitch covers what the shared fixture cases don't: the 10-minute
// default tolerance, the headers besides the signature, and the key.
func TestTwitch(t *testing.T) {
	p := newPreset(t, "twitch", provider.Config{Secrets: []string{"s3cre7"}}, baseTime)
	body := `{"subscription":{"type":"channel.follow"},"event":{"user_id":"1"}}`
	tests := []struct {
		name   string
		give   func() *http.Request
		want   error
		header string // the header the error must name
	}{
		{name: "9 minutes old: inside the default 10", give: func() *http.Request {
			return twitchRequest("/", "m-1", "notification", baseTime.Add(-9*time.Minute), "s3cre7", body)
		}},
		{name: "11 minutes old", want: provider.ErrTimestampOutOfTolerance, header: "Twitch-Eventsub-Message-Timestamp", give: func() *http.Request {
			return twitchRequest("/", "m-1", "notification", baseTime.Add(-11*time.Minute), "s3cre7", body)
		}},
		{name: "11 minutes ahead", want: provider.ErrTimestampOutOfTolerance, header: "Twitch-Eventsub-Message-Timestamp", give: func() *http.Request {
			return twitchRequest("/", "m-1", "notification", baseTime.Add(11*time.Minute), "s3cre7", body)
		}},
		{name: "timestamp not RFC 3339", want: provider.ErrMalformedHeader, header: "Twitch-Eventsub-Message-Timestamp", give: func() *http.Request {
			r := twitchRequest("/", "m-1", "notification", baseTime, "s3cre7", body)
			r.Header.Set("Twitch-Eventsub-Message-Timestamp", unix(baseTime))
			return r
		}},
		{name: "no timestamp", want: provider.ErrMissingHeader, header: "Twitch-Eventsub-Message-Timestamp", give: func() *http.Request {
			r := twitchRequest("/", "m-1", "notification", baseTime, "s3cre7", body)
			r.Header.Del("Twitch-Eventsub-Message-Timestamp")
			return r
		}},
		{name: "no message id", want: provider.ErrMissingHeader, header: "Twitch-Eventsub-Message-Id", give: func() *http.Request {
			r := twitchRequest("/", "m-1", "notification", baseTime, "s3cre7", body)
			r.Header.Del("Twitch-Eventsub-Message-Id")
			return r
		}},
		{name: "another message id than the one signed", want: provider.ErrNoMatchingSignature, header: "Twitch-Eventsub-Message-Signature", give: func() *http.Request {
			r := twitchRequest("/", "m-1", "notification", baseTime, "s3cre7", body)
			r.Header.Set("Twitch-Eventsub-Message-Id", "m-2")
			return r
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verify(t, p, tt.give())
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.header) {
				t.Fatalf("error %q does not name %s", err, tt.header)
			}
		})
	}
	r := twitchRequest("/", "m-1", "revocation", baseTime, "s3cre7", body)
	if k, _ := p.Key(r, readBody(t, r)); k != "m-1" {
		t.Fatalf("revocation key = %q, want its message id", k)
	}
	if p.Handshake(httptest.NewRecorder(), r, []byte(body)) {
		t.Fatal("a revocation is not a handshake: it must reach the backend")
	}
}

// TestTwitchHandshake: through the real middleware, a signed
// webhook_callback_verification is answered with its challenge and never
// reaches the handler nor claims its message id; an unsigned one is
// refused; a revocation is forwarded once.
func TestTwitchHandshake(t *testing.T) {
	s := newServer(t, "twitch", "", newPreset(t, "twitch", provider.Config{Secrets: []string{"s3cre7"}}, baseTime))
	challenge := `{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387","status":"webhook_callback_verification_pending","type":"channel.follow"}}`
	for i := range 2 {
		got := s.send(t, twitchRequest("/twitch", "verify-1", "webhook_callback_verification", baseTime, "s3cre7", challenge))
		if got.status != 200 || got.body != "pogchamp-kappa-360noscope-vohiyo" || got.replayed || !strings.HasPrefix(got.contentType, "text/plain") || s.runs.Load() != 0 {
			t.Fatalf("challenge %d: %d %q %q replayed %v runs %d", i, got.status, got.contentType, got.body, got.replayed, s.runs.Load())
		}
	}
	got := s.send(t, twitchRequest("/twitch", "verify-2", "webhook_callback_verification", baseTime, "not-the-secret", challenge))
	if got.status != 401 || s.runs.Load() != 0 {
		t.Fatalf("forged challenge: %d %q runs %d", got.status, got.body, s.runs.Load())
	}
	revocation := `{"subscription":{"id":"f1c2a387","status":"authorization_revoked","type":"channel.follow"}}`
	for i := range 2 {
		got = s.send(t, twitchRequest("/twitch", "revoke-1", "revocation", baseTime, "s3cre7", revocation))
		if got.status != 201 || got.replayed != (i == 1) || s.runs.Load() != 1 {
			t.Fatalf("revocation %d: %d replayed %v runs %d", i, got.status, got.replayed, s.runs.Load())
		}
	}
}

// TestTwitchNodeVectors: the messages Node.js signed following Twitch's
// sample code pass, those signed with another secret don't, and changing
// the body or the timestamp breaks the signature.
func TestTwitchNodeVectors(t *testing.T) {
	for _, v := range nodeVectors(t, "twitch") {
		t.Run(v.Name, func(t *testing.T) {
			p, ok := checkNodeVector(t, "twitch", v)
			if !ok {
				return // a forged vector, refused
			}
			if err := verify(t, p, v.request(v.Body+" ")); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("body with a space added: Verify = %v", err)
			}
			r := v.request(v.Body)
			ts, _ := time.Parse(time.RFC3339Nano, r.Header.Get("Twitch-Eventsub-Message-Timestamp"))
			r.Header.Set("Twitch-Eventsub-Message-Timestamp", ts.Add(time.Second).Format(time.RFC3339Nano))
			if err := verify(t, p, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("timestamp a second later: Verify = %v", err)
			}
		})
	}
}
