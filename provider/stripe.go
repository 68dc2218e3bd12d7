package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// StripeSignatureHeader is the header Stripe signs every delivery attempt in.
const StripeSignatureHeader = "Stripe-Signature"

// stripeSignature is the shape of Stripe-Signature. A value with no t, a
// non-numeric t, or no valid v1 is malformed.
var stripeSignature = timestampedHeader{
	name:   StripeSignatureHeader,
	format: `want "t=<unix seconds>,v1=<hex>"`,
	sep:    ",",
	tsKey:  "t",
	sigKey: "v1",
}

// Stripe returns the preset for Stripe webhooks.
//
// Key: the event's "id" (evt_...), which every retry of an event repeats.
// Never the Stripe-Signature header: Stripe signs each attempt with a new
// timestamp, so a key taken from it never matches a retry.
//
// Verify: Stripe-Signature "t=<unix>,v1=<hex>[,v1=<hex>...]", each v1 being
// hex HMAC-SHA256(secret, "<t>.<raw body>"), with the endpoint secret
// (whsec_..., used as is). The request passes if any v1 matches any of
// cfg.Secrets. Schemes other than v1 (v0, ...) are ignored, so a downgrade is
// impossible. t must be within cfg.Tolerance of now (default 5 minutes, both
// directions).
//
// Duplicates: the stored status (any 2xx satisfies Stripe). No options.
func Stripe(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("stripe")
	if err != nil {
		return nil, err
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:        "stripe",
		RetryWindow: stripeRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			return s.verifyBodyHMAC(stripeSignature, keys, ".", r, body)
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return topLevelID(body, "id"), nil
		},
	}, nil
}
