package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/idemhook/idemhook"
)

// ShopifySignatureHeader is the header Shopify puts its body HMAC in.
const ShopifySignatureHeader = "X-Shopify-Hmac-Sha256"

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
	s, err := cfg.check("shopify")
	if err != nil {
		return nil, err
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:            "shopify",
		RetryWindow:     shopifyRetryWindow,
		ResponseTimeout: shopifyResponseTimeout,
		Verify: func(r *http.Request, body []byte) error {
			sig, err := parseShopifySignature(r.Header.Get(ShopifySignatureHeader))
			if err != nil {
				return s.fail(ShopifySignatureHeader, err, headerDetail(err, "want the base64 of a 32-byte HMAC-SHA256"))
			}
			if !anyMAC(keys, [][]byte{sig}, func(k []byte) []byte { return hmacSHA256(k, body) }) {
				return s.fail(ShopifySignatureHeader, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			if id := strings.TrimSpace(r.Header.Get("X-Shopify-Webhook-Id")); id != "" {
				return id, nil
			}
			event := strings.TrimSpace(r.Header.Get("X-Shopify-Event-Id"))
			topic := strings.TrimSpace(r.Header.Get("X-Shopify-Topic"))
			if event == "" || topic == "" {
				return "", nil
			}
			return event + ":" + topic, nil
		},
	}, nil
}

// parseShopifySignature decodes X-Shopify-Hmac-Sha256 (standard base64).
func parseShopifySignature(v string) ([]byte, error) {
	return parseMAC(v, "", base64.StdEncoding.DecodeString, sha256.Size)
}
