package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// PaddleSignatureHeader is the header Paddle Billing signs deliveries in.
const PaddleSignatureHeader = "Paddle-Signature"

// paddlePreset is the paddle preset, a spec.
var paddlePreset = builtin{
	spec: Spec{
		Name: "paddle",
		Signature: Signature{
			Algorithm:    "hmac-sha256",
			Header:       PaddleSignatureHeader,
			Format:       "pairs",
			Separator:    ";",
			TimestampKey: "ts",
			SignatureKey: "h1",
			Signed:       "{timestamp}:{body}",
			Timestamp:    Timestamp{Tolerance: defaultTolerance},
		},
		Key:             KeySpec{Templates: []string{"{json:event_id}"}},
		Success:         Success{Status: http.StatusOK},
		RetryWindow:     paddleRetryWindow,
		ResponseTimeout: paddleResponseTimeout,
	},
	malformed: `want "ts=<unix seconds>;h1=<hex>"`,
}

// Paddle returns the preset for Paddle Billing webhooks.
//
// Key: the body's "event_id" (evt_...), Paddle's documented deduplication
// key. Not notification_id, which differs per destination.
//
// Verify: Paddle-Signature "ts=<unix>;h1=<hex>[;h1=<hex>...]", each h1 being
// hex HMAC-SHA256(endpoint secret key, "<ts>:<raw body>"). Several h1 appear
// during a secret rotation. ts must be within cfg.Tolerance of now.
//
// The default tolerance is 5 minutes, not the ~5 seconds of Paddle's SDKs.
// ts is when the attempt was sent, and 5 seconds refuses genuine deliveries
// under ordinary clock skew or queueing. Replays of a valid delivery are
// stopped by the key store anyway. Set Tolerance to tighten it.
//
// Duplicates: 200, the only answer Paddle documents as success. No options.
func Paddle(cfg Config) (*idemhook.Preset, error) {
	return paddlePreset.build(cfg)
}
