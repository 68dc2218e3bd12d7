package provider

import "github.com/idemhook/idemhook"

// The headers Svix sends (white-labelled senders use the webhook-* ones).
const (
	SvixIDHeader        = "svix-id"
	SvixTimestampHeader = "svix-timestamp"
	SvixSignatureHeader = "svix-signature"
)

// Svix returns the preset for webhooks sent through Svix (Clerk, Resend and
// many others). The scheme is Standard Webhooks' (see [StandardWebhooks])
// with svix-id, svix-timestamp and svix-signature. A request without svix-id
// is read from the webhook-* headers instead, as Svix's own libraries do.
//
// Key: svix-id (the same on every resend). Verify: v1 HMAC-SHA256 over
// "<id>.<timestamp>.<raw body>" with the decoded "whsec_" secret, tolerance
// cfg.Tolerance (default 5 minutes, both directions). Duplicates: the stored
// status. No options.
func Svix(cfg Config) (*idemhook.Preset, error) {
	return svixPreset.build(cfg)
}

// svixPreset is the svix preset, a spec: standardwebhooks' under svix-*
// headers, or the webhook-* ones when a request has no svix-id.
var svixPreset = builtin{
	spec: Spec{
		Name: "svix",
		Signature: Signature{
			Algorithm:      "hmac-sha256",
			Header:         SvixSignatureHeader,
			Format:         "pairs",
			Separator:      " ",
			Assign:         ",",
			SignatureKey:   "v1",
			Encoding:       "base64",
			SecretPrefix:   "whsec_",
			SecretEncoding: "base64",
			Signed:         "{header:" + SvixIDHeader + "}.{timestamp}.{body}",
			Timestamp:      Timestamp{Header: SvixTimestampHeader},
		},
		Key: KeySpec{Templates: []string{"{header:" + SvixIDHeader + "}"}},
		AlternateHeaders: AlternateHeaders{
			WhenMissing: SvixIDHeader,
			Headers: map[string]string{
				SvixIDHeader:        WebhookIDHeader,
				SvixTimestampHeader: WebhookTimestampHeader,
				SvixSignatureHeader: WebhookSignatureHeader,
			},
		},
		RetryWindow:     standardWebhooksRetryWindow,
		ResponseTimeout: standardWebhooksResponseTimeout,
	},
	malformed: standardWebhooksMalformed,
	secrets:   whsecSecrets,
}
