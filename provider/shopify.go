package provider

import "github.com/idemhook/idemhook"

// ShopifySignatureHeader is the header Shopify puts its body HMAC in.
const ShopifySignatureHeader = "X-Shopify-Hmac-Sha256"

// shopifyPreset is the shopify preset, a spec.
var shopifyPreset = builtin{
	spec: Spec{
		Name: "shopify",
		Signature: Signature{
			Algorithm: "hmac-sha256",
			Header:    ShopifySignatureHeader,
			Encoding:  "base64",
		},
		Key: KeySpec{Templates: []string{
			"{header:X-Shopify-Webhook-Id}",
			"{header:X-Shopify-Event-Id}:{header:X-Shopify-Topic}",
		}},
		RetryWindow:     shopifyRetryWindow,
		ResponseTimeout: shopifyResponseTimeout,
	},
	malformed: "want the base64 of a 32-byte HMAC-SHA256",
}

// Shopify returns the preset for Shopify webhooks (HTTPS deliveries).
//
// Key: X-Shopify-Webhook-Id, documented as unique per delivery and kept on
// retries (Shopify resends the original payload). Without it the key is
// "<X-Shopify-Event-Id>:<X-Shopify-Topic>", because the event id alone is
// shared by every delivery of one merchant action. Without either, the key
// is the body hash.
//
// Verify: X-Shopify-Hmac-Sha256 = base64(HMAC-SHA256(app client secret, raw
// body)). No timestamp is signed. During a secret rotation Shopify may sign
// with the old secret for up to an hour: list both.
//
// Duplicates: the stored status. No options.
func Shopify(cfg Config) (*idemhook.Preset, error) {
	return shopifyPreset.build(cfg)
}
