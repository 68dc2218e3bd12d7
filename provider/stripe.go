package provider

import "github.com/idemhook/idemhook"

// StripeSignatureHeader is the header Stripe signs every delivery attempt in.
const StripeSignatureHeader = "Stripe-Signature"

// stripePreset is the stripe preset, a spec.
var stripePreset = builtin{
	spec: Spec{
		Name: "stripe",
		Signature: Signature{
			Algorithm:    "hmac-sha256",
			Header:       StripeSignatureHeader,
			Format:       "pairs",
			TimestampKey: "t",
			SignatureKey: "v1",
			Signed:       "{timestamp}.{body}",
		},
		Key:         KeySpec{Templates: []string{"{json:id}"}},
		RetryWindow: stripeRetryWindow,
	},
	malformed: `want "t=<unix seconds>,v1=<hex>"`,
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
	return stripePreset.build(cfg)
}
