package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// HubSignatureHeader is the header GitHub and Meta put their body HMAC in.
const HubSignatureHeader = "X-Hub-Signature-256"

// githubPreset is the github preset, a spec.
var githubPreset = builtin{
	spec: Spec{
		Name: "github",
		Signature: Signature{
			Algorithm: "hmac-sha256",
			Header:    HubSignatureHeader,
			Prefix:    "sha256=",
			Encoding:  "hex",
			Signed:    "{body}",
		},
		Key: KeySpec{Templates: []string{
			"{header:X-GitHub-Hook-ID}:{header:X-GitHub-Delivery}",
			"{header:X-GitHub-Delivery}",
		}},
		RetryWindow:     githubRetryWindow,
		ResponseTimeout: githubResponseTimeout,
	},
	malformed: `want "sha256=<hex>"`,
}

// GitHub returns the preset for GitHub webhooks (repository, organization and
// App hooks).
//
// Key: "<X-GitHub-Hook-ID>:<X-GitHub-Delivery>". The delivery GUID is kept on
// redelivery but is the same for every hook that receives the event, so it is
// scoped by the hook id. Without a hook id header the key is the GUID alone.
// Without a GUID it is the body hash.
//
// Verify: X-Hub-Signature-256 "sha256=<hex>" = HMAC-SHA256(secret, raw body).
// GitHub signs no timestamp, so there is no tolerance. It signs the body
// only, so the delivery GUID and hook id headers are not covered. The key
// thus deduplicates GitHub's own redeliveries, but it is no replay defence.
// A captured delivery re-sent with a new X-GitHub-Delivery passes Verify and
// gets a new key. The legacy SHA-1 X-Hub-Signature is not accepted.
//
// Duplicates: the stored status. No options. GitHub never retries on its
// own. Redeliveries are manual.
func GitHub(cfg Config) (*idemhook.Preset, error) {
	return githubPreset.build(cfg)
}

// verifyHubSignature checks X-Hub-Signature-256 against the raw body.
func (s settings) verifyHubSignature(r *http.Request, body []byte) error {
	sig, err := parseHexMAC(r.Header.Get(HubSignatureHeader), "sha256=")
	if err != nil {
		return s.fail(HubSignatureHeader, err, headerDetail(err, `want "sha256=<hex>"`))
	}
	if !anyMAC(s.secretBytes(), [][]byte{sig}, func(k []byte) []byte { return hmacSHA256(k, body) }) {
		return s.fail(HubSignatureHeader, ErrNoMatchingSignature, "")
	}
	return nil
}
