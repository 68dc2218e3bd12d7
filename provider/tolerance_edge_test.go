package provider_test

import (
	"errors"
	"testing"

	"github.com/idemhook/idemhook/provider"
)

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
