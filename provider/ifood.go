package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// IFoodSignatureHeader is the header iFood puts its body HMAC in.
const IFoodSignatureHeader = "X-IFood-Signature"

// ifoodPreset is the ifood preset, a spec.
var ifoodPreset = builtin{
	spec: Spec{
		Name:            "ifood",
		Signature:       Signature{Algorithm: "hmac-sha256", Header: IFoodSignatureHeader},
		Key:             KeySpec{Templates: []string{"{json:id}"}},
		Success:         Success{Status: http.StatusAccepted},
		RetryWindow:     ifoodRetryWindow,
		ResponseTimeout: ifoodResponseTimeout,
	},
	malformed: "want the hex of a 32-byte HMAC-SHA256",
}

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
	return ifoodPreset.build(cfg)
}
