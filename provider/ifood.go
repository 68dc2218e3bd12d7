package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// IFoodSignatureHeader is the header iFood puts its body HMAC in.
const IFoodSignatureHeader = "X-IFood-Signature"

// IFood returns the preset for the iFood Merchant API webhook (the NestJS
// guard's "marketplace" source).
//
// Key: the event's "id", which iFood documents as the deduplication key
// (one event per request).
//
// Verify: X-IFood-Signature = hex(HMAC-SHA256(client_secret, raw body)), the
// app's OAuth client secret. No timestamp is signed. iFood sends deliberately
// invalid signatures during homologation and expects them refused, and they
// are (401).
//
// Duplicates: 202 Accepted, the answer iFood expects. No options.
func IFood(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("ifood")
	if err != nil {
		return nil, err
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:            "ifood",
		RetryWindow:     ifoodRetryWindow,
		ResponseTimeout: ifoodResponseTimeout,
		Verify: func(r *http.Request, body []byte) error {
			sig, err := parseHexMAC(r.Header.Get(IFoodSignatureHeader), "")
			if err != nil {
				return s.fail(IFoodSignatureHeader, err, headerDetail(err, "want the hex of a 32-byte HMAC-SHA256"))
			}
			if !anyMAC(keys, [][]byte{sig}, func(k []byte) []byte { return hmacSHA256(k, body) }) {
				return s.fail(IFoodSignatureHeader, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return topLevelID(body, "id"), nil
		},
		DuplicateStatus: http.StatusAccepted,
		SuccessStatus:   http.StatusAccepted,
	}, nil
}
