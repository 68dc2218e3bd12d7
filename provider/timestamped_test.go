package provider_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

func TestToleranceOption(t *testing.T) {
	f := fixtures(t)
	stripe := f[slices.IndexFunc(f, func(f fixture) bool { return f.name == "stripe" })]
	cfg := stripe.cfg
	cfg.Tolerance = time.Minute
	p := newPreset(t, "stripe", cfg, baseTime)
	err := verify(t, p, stripe.build(t, "1", baseTime.Add(-2*time.Minute), stripe.secret()))
	if !errors.Is(err, provider.ErrTimestampOutOfTolerance) || !strings.Contains(err.Error(), "signed 2m0s ago, tolerance 1m0s") {
		t.Fatalf("Verify = %v, want a 2m-old timestamp refused with tolerance 1m", err)
	}
	err = verify(t, p, stripe.build(t, "1", baseTime.Add(90*time.Second), stripe.secret()))
	if !errors.Is(err, provider.ErrTimestampOutOfTolerance) || !strings.Contains(err.Error(), "in the future") {
		t.Fatalf("Verify = %v, want a future timestamp refused", err)
	}

	// Mercado Pago has no tolerance unless one is set. Its ts may be in
	// seconds or milliseconds.
	mp := f[slices.IndexFunc(f, func(f fixture) bool { return f.name == "mercadopago" })]
	old := baseTime.Add(-time.Hour)
	if err := verify(t, newPreset(t, "mercadopago", mp.cfg, baseTime), mp.build(t, "1", old, mp.secret())); err != nil {
		t.Fatalf("mercadopago without tolerance: %v", err)
	}
	cfg = mp.cfg
	cfg.Tolerance = 10 * time.Minute
	if err := verify(t, newPreset(t, "mercadopago", cfg, baseTime), mp.build(t, "1", old, mp.secret())); !errors.Is(err, provider.ErrTimestampOutOfTolerance) {
		t.Fatalf("mercadopago 1h old with tolerance 10m: %v", err)
	}
	ms := "1780000000000" // baseTime in milliseconds
	r := post("/mp", `{"id":1}`)
	r.Header.Set("x-signature", "ts="+ms+",v1="+hmacHex(mp.secret(), "ts:"+ms+";"))
	if err := verify(t, newPreset(t, "mercadopago", cfg, baseTime), r); err != nil {
		t.Fatalf("mercadopago ts in milliseconds: %v", err)
	}
}

// TestFarFutureTimestampRefused signs deliveries with a timestamp so far in
// the future that the distance to now does not fit in a time.Duration:
// time.Time.Sub saturates at the minimum Duration, whose negation overflows
// back to a negative value, so a check written as "-age > tolerance" lets
// such a delivery through forever. Each timestamped scheme must refuse it.
func TestFarFutureTimestampRefused(t *testing.T) {
	const body = `{"id":"evt_1","event_id":"evt_1","api_app_id":"A","event_id":"Ev1"}`
	const ts = "999999999999999999" // 18 digits, the most parseUnix accepts
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	tests := []struct {
		preset string
		set    map[string]string
	}{
		{"stripe", map[string]string{"Stripe-Signature": "t=" + ts + ",v1=" + hmacHex(secret, ts+"."+body)}},
		{"paddle", map[string]string{"Paddle-Signature": "ts=" + ts + ";h1=" + hmacHex(secret, ts+":"+body)}},
		{"slack", map[string]string{
			"X-Slack-Request-Timestamp": ts,
			"X-Slack-Signature":         "v0=" + hmacHex(secret, "v0:"+ts+":"+body),
		}},
		{"standardwebhooks", map[string]string{
			"webhook-id":        "msg_1",
			"webhook-timestamp": ts,
			"webhook-signature": "v1," + hmacB64(swKey(t, secret), "msg_1."+ts+"."+body),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.preset, func(t *testing.T) {
			p := newPreset(t, tt.preset, provider.Config{Secrets: []string{secret}}, baseTime)
			r := post("/", body)
			for k, v := range tt.set {
				r.Header.Set(k, v)
			}
			if err := verify(t, p, r); !errors.Is(err, provider.ErrTimestampOutOfTolerance) {
				t.Fatalf("Verify = %v, want %v", err, provider.ErrTimestampOutOfTolerance)
			}
		})
	}
}
