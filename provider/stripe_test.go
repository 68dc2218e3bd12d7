package provider_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/provider"
)

// Stripe retries for about 3 days in live mode, re-signing every attempt.
// With the preset's default TTL, attempts at 0h, 1h, 25h and 71h run the
// handler once (with the old 24h default, the one at 25h ran it again).
func TestStripeRetriesOnDayTwoAndThreeAreReplayed(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	const secret = "whsec_retention"
	h, runs := retentionRoute(t, "stripe", provider.Config{Secrets: []string{secret}}, clk)
	body := `{"id":"evt_retention","object":"event","type":"payment_intent.succeeded"}`
	start := clk.Now()
	for i, at := range []time.Duration{0, time.Hour, 25 * time.Hour, 71 * time.Hour} {
		clk.Advance(start.Add(at).Sub(clk.Now()))
		r := post("/stripe", body)
		ts := unix(clk.Now())
		r.Header.Set("Stripe-Signature", "t="+ts+",v1="+hmacHex(secret, ts, ".", body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		replayed := rec.Header().Get(idemhook.ReplayedHeader) == "true"
		if rec.Code != 200 || replayed != (i > 0) {
			t.Fatalf("attempt at +%v: status %d, replayed %v", at, rec.Code, replayed)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestStripeSignatureHeaderMissesRetries shows why the NestJS guard's Stripe route,
// keyed on the Stripe-Signature header, deduplicates nothing: Stripe signs
// every attempt with a new timestamp, so the retry has a new key and the
// handler runs twice. The stripe preset keys on the event id and runs it
// once.
func TestStripeSignatureHeaderMissesRetries(t *testing.T) {
	var stripe fixture
	for _, f := range fixtures(t) {
		if f.name == "stripe" {
			stripe = f
		}
	}
	attempt1 := stripe.build(t, "1NnfJm2eZvKYlo2C", baseTime.Add(-time.Minute), stripe.secret())
	attempt2 := stripe.build(t, "1NnfJm2eZvKYlo2C", baseTime, stripe.secret()) // Stripe's retry
	if attempt1.Header.Get("Stripe-Signature") == attempt2.Header.Get("Stripe-Signature") {
		t.Fatal("the two attempts must carry different Stripe-Signature values, as Stripe sends them")
	}
	clone := func(r *http.Request) *http.Request {
		b := readBody(t, r)
		c := post(r.URL.String(), string(b))
		c.Header = r.Header.Clone()
		return c
	}

	t.Run("the guard's Header stripe-signature", func(t *testing.T) {
		s := newServer(t, "stripe", "stripe-signature", nil)
		s.send(t, clone(attempt1))
		got := s.send(t, clone(attempt2))
		if s.runs.Load() != 2 || got.replayed {
			t.Fatalf("handler ran %d times (retry replayed: %v); the guard's key runs Stripe's retry again, want 2", s.runs.Load(), got.replayed)
		}
	})
	t.Run("preset stripe", func(t *testing.T) {
		s := newServer(t, "stripe", "", newPreset(t, "stripe", stripe.cfg, baseTime))
		s.send(t, clone(attempt1))
		got := s.send(t, clone(attempt2))
		if s.runs.Load() != 1 || !got.replayed {
			t.Fatalf("handler ran %d times (retry replayed: %v), want 1 and a replay", s.runs.Load(), got.replayed)
		}
	})
}
