package provider_test

import (
	"errors"
	"testing"

	"github.com/idemhook/idemhook/provider"
)

func TestEvolution(t *testing.T) {
	p := newPreset(t, "evolution", provider.Config{Secrets: []string{"k1"}}, baseTime)
	tests := []struct {
		name, give, want string
	}{
		{"upsert", `{"event":"messages.upsert","data":{"key":{"id":"3EB0A"}}}`, "messages.upsert:3EB0A"},
		{"update", `{"event":"messages.update","data":{"keyId":"3EB0A","status":"READ"}}`, "messages.update:3EB0A:READ"},
		{"update without status", `{"event":"messages.update","data":{"keyId":"3EB0A"}}`, ""},
		{"connection", `{"event":"connection.update","data":{"state":"open"}}`, ""},
		{"no event", `{"data":{"key":{"id":"3EB0A"}}}`, ""},
		{"data is a list", `{"event":"contacts.upsert","data":[{"id":"1"}]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := p.Key(post("/", tt.give), []byte(tt.give)); got != tt.want || err != nil {
				t.Fatalf("Key = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	bearer := newPreset(t, "evolution", provider.Config{Secrets: []string{"k1"}, Evolution: provider.EvolutionOptions{Header: "Authorization"}}, baseTime)
	r := post("/", `{}`)
	r.Header.Set("Authorization", "Bearer k1")
	if err := verify(t, bearer, r); err != nil {
		t.Fatalf("Authorization: Bearer: %v", err)
	}
	r.Header.Set("apikey", "k1")
	r.Header.Set("Authorization", "Bearer k2")
	if err := verify(t, bearer, r); !errors.Is(err, provider.ErrTokenMismatch) {
		t.Fatalf("wrong bearer with the right apikey header: %v", err)
	}
}
