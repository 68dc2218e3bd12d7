package provider

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/idemhook/idemhook"
)

// The headers of the Standard Webhooks specification.
const (
	WebhookIDHeader        = "webhook-id"
	WebhookTimestampHeader = "webhook-timestamp"
	WebhookSignatureHeader = "webhook-signature"
)

// StandardWebhooks returns the preset for senders that follow the Standard
// Webhooks specification (standardwebhooks.com).
//
// Key: webhook-id, which the specification keeps the same on every retry.
//
// Verify: webhook-signature holds space-separated "v1,<base64>" entries, each
// base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<raw body>")),
// where key is the base64-decoded part of a "whsec_<base64>" secret (the
// prefix is optional). A request passes if any v1 entry matches any secret;
// other versions (v1a, ed25519) are ignored. webhook-timestamp must be within
// cfg.Tolerance of now (default 5 minutes, both directions). Senders re-sign
// every retry with a fresh timestamp, which is why the signature can never be
// the key.
//
// Duplicates: the stored status. No options.
func StandardWebhooks(cfg Config) (*idemhook.Preset, error) {
	return standardWebhooksPreset.build(cfg)
}

// standardWebhooksPreset is the standardwebhooks preset, a spec.
var standardWebhooksPreset = builtin{
	spec: Spec{
		Name: "standardwebhooks",
		Signature: Signature{
			Algorithm:      "hmac-sha256",
			Header:         WebhookSignatureHeader,
			Format:         "pairs",
			Separator:      " ",
			Assign:         ",",
			SignatureKey:   "v1",
			Encoding:       "base64",
			SecretPrefix:   "whsec_",
			SecretEncoding: "base64",
			Signed:         "{header:" + WebhookIDHeader + "}.{timestamp}.{body}",
			Timestamp:      Timestamp{Header: WebhookTimestampHeader},
		},
		Key:             KeySpec{Templates: []string{"{header:" + WebhookIDHeader + "}"}},
		RetryWindow:     standardWebhooksRetryWindow,
		ResponseTimeout: standardWebhooksResponseTimeout,
	},
	malformed: standardWebhooksMalformed,
	secrets:   whsecSecrets,
}

// standardWebhooksMalformed is the detail of a malformed signature header
// of standardwebhooks and svix.
const standardWebhooksMalformed = `want space-separated "v1,<base64>" entries`

// whsecSecrets refuses a secret that is not "whsec_<base64>" (the prefix
// is optional) in the words of standardwebhooks and svix: a plain error
// that counts the non-empty secrets only.
func whsecSecrets(s settings) error {
	for i, sec := range s.secrets {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
		if err != nil || len(k) == 0 {
			return fmt.Errorf("provider %s: secret #%d is not \"whsec_<base64>\" (the base64 part does not decode)", s.name, i+1)
		}
	}
	return nil
}
