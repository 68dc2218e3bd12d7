package provider_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

func TestStone(t *testing.T) {
	keys := stoneKeys(t)
	f := fixtures(t)
	stone := f[slices.IndexFunc(f, func(f fixture) bool { return f.name == "stone" })]

	t.Run("public_key option", func(t *testing.T) {
		p := newPreset(t, "stone", provider.Config{Secrets: []string{keys.ourPEM}, Stone: provider.StoneOptions{PublicKey: keys.stonePEM}}, baseTime)
		if err := verify(t, p, stone.build(t, "1", baseTime, stone.secret())); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("not encrypted to us", func(t *testing.T) {
		p := newPreset(t, "stone", provider.Config{Secrets: []string{keys.otherPEM}, Stone: stone.cfg.Stone}, baseTime)
		err := verify(t, p, stone.build(t, "1", baseTime, stone.secret()))
		if !errors.Is(err, provider.ErrNoMatchingSignature) || !strings.Contains(err.Error(), "does not decrypt") {
			t.Fatalf("Verify = %v", err)
		}
	})
	t.Run("malformed body", func(t *testing.T) {
		p := newPreset(t, "stone", stone.cfg, baseTime)
		for _, body := range []string{`{}`, `not json`, `{"encrypted_body":"a.b.c"}`, `{"encrypted_body":"e30.e30.e30.e30.e30"}`} {
			if err := verify(t, p, post("/", body)); !errors.Is(err, provider.ErrMalformedBody) {
				t.Fatalf("body %s: Verify = %v, want ErrMalformedBody", body, err)
			}
		}
	})
	t.Run("iat tolerance when set", func(t *testing.T) {
		cfg := stone.cfg
		cfg.Tolerance = time.Hour
		p := newPreset(t, "stone", cfg, baseTime)
		if err := verify(t, p, stone.build(t, "1", baseTime.Add(-2*time.Hour), stone.secret())); !errors.Is(err, provider.ErrTimestampOutOfTolerance) {
			t.Fatalf("2h-old iat: %v", err)
		}
		if err := verify(t, newPreset(t, "stone", stone.cfg, baseTime), stone.build(t, "1", baseTime.Add(-2*time.Hour), stone.secret())); err != nil {
			t.Fatalf("2h-old iat without tolerance: %v", err)
		}
	})
	t.Run("key without header", func(t *testing.T) {
		p := newPreset(t, "stone", stone.cfg, baseTime)
		r := stone.build(t, "1", baseTime, stone.secret())
		r.Header.Del("x-stone-webhook-event-id")
		if k, err := p.Key(r, readBody(t, r)); k != "" || err != nil {
			t.Fatalf("Key = %q, %v; want \"\" (body hash)", k, err)
		}
	})
}
