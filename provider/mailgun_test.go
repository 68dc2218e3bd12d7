package provider_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// mailgunBody is a Mailgun JSON webhook whose signature object is sig.
func mailgunBody(sig string) string {
	return `{"signature":` + sig + `,"event-data":{"event":"delivered","id":"ev-1"}}`
}

// mailgunSig is a signature object signed with key at ts.
func mailgunSig(key string, ts time.Time, token string) string {
	return `{"timestamp":"` + unix(ts) + `","token":"` + token + `","signature":"` + hmacHex(key, unix(ts)+token) + `"}`
}

// TestMailgun covers what the shared fixture cases don't: the 9-hour
// default tolerance, the signature object's shapes, and what the signature
// does not cover.
func TestMailgun(t *testing.T) {
	p := newPreset(t, "mailgun", provider.Config{Secrets: []string{"key-1"}}, baseTime)
	tests := []struct {
		name string
		body string
		want error
	}{
		{"signed", mailgunBody(mailgunSig("key-1", baseTime, "tok")), nil},
		{"8h59m old: inside the default 9h", mailgunBody(mailgunSig("key-1", baseTime.Add(-539*time.Minute), "tok")), nil},
		{"9h1m old", mailgunBody(mailgunSig("key-1", baseTime.Add(-541*time.Minute), "tok")), provider.ErrTimestampOutOfTolerance},
		{"a numeric timestamp", mailgunBody(`{"timestamp":` + unix(baseTime) + `,"token":"tok","signature":"` + hmacHex("key-1", unix(baseTime)+"tok") + `"}`), nil},
		{"another token than the one signed", mailgunBody(strings.Replace(mailgunSig("key-1", baseTime, "tok"), `"token":"tok"`, `"token":"tok2"`, 1)), provider.ErrNoMatchingSignature},
		{"a wrong parent-signature beside a right signature", mailgunBody(strings.TrimSuffix(mailgunSig("key-1", baseTime, "tok"), "}") + `,"parent-signature":"` + hmacHex("other", unix(baseTime)+"tok") + `"}`), nil},
		{"no signature object", `{"event-data":{"id":"ev-1"}}`, provider.ErrMalformedBody},
		{"a legacy form webhook", "timestamp=1780000000&token=tok&signature=00&event=delivered", provider.ErrMalformedBody},
		{"signature not hex", mailgunBody(`{"timestamp":"` + unix(baseTime) + `","token":"tok","signature":"zz"}`), provider.ErrMalformedBody},
		{"no token", mailgunBody(`{"timestamp":"` + unix(baseTime) + `","signature":"` + hmacHex("key-1", unix(baseTime)) + `"}`), provider.ErrMalformedBody},
		{"timestamp not seconds", mailgunBody(`{"timestamp":"soon","token":"tok","signature":"` + hmacHex("key-1", "soontok") + `"}`), provider.ErrMalformedBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := verify(t, p, post("/", tt.body)); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
	if k, _ := p.Key(post("/", `{"event-data":{"event":"opened"}}`), []byte(`{"event-data":{"event":"opened"}}`)); k != "" {
		t.Fatalf("key without event-data.id = %q, want the body hash", k)
	}
}

// TestMailgunNodeVectors: the webhooks Node.js signed as Mailgun documents
// pass (a subaccount's through its parent-signature), one signed with
// another key doesn't, a changed token doesn't, and (the documented limit)
// a changed event-data still does: Mailgun signs no part of the event.
func TestMailgunNodeVectors(t *testing.T) {
	for _, v := range nodeVectors(t, "mailgun") {
		t.Run(v.Name, func(t *testing.T) {
			p, ok := checkNodeVector(t, "mailgun", v)
			if !ok {
				return // a forged vector, refused
			}
			token := strings.Replace(v.Body, `"token":"`, `"token":"x`, 1)
			if err := verify(t, p, v.request(token)); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("token changed: Verify = %v", err)
			}
			other := strings.Replace(v.Body, `"id":"`, `"id":"forged-`, 1)
			if err := verify(t, p, v.request(other)); err != nil {
				t.Fatalf("event-data changed: Verify = %v; Mailgun's signature does not cover it, and the docs say so", err)
			}
		})
	}
}
