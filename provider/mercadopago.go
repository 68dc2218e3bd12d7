package provider

import "github.com/idemhook/idemhook"

// The headers of Mercado Pago's webhook signature.
const (
	MercadoPagoSignatureHeader = "x-signature"
	MercadoPagoRequestIDHeader = "x-request-id"
)

// mercadoPagoPreset is the mercadopago preset, a spec. The manifest
// leaves out its absent parts: [ ... ] is optional.
var mercadoPagoPreset = builtin{
	spec: Spec{
		Name: "mercadopago",
		Signature: Signature{
			Algorithm:    "hmac-sha256",
			Header:       MercadoPagoSignatureHeader,
			Format:       "pairs",
			TimestampKey: "ts",
			SignatureKey: "v1",
			TrimSpaces:   true,
			Signed:       "[id:{query:data.id|lower};][request-id:{header:" + MercadoPagoRequestIDHeader + "};]ts:{timestamp};",
			Timestamp:    Timestamp{Format: "unix_s_or_ms", Tolerance: NoTolerance},
		},
		Key:             KeySpec{Templates: []string{"{json:id}"}},
		RetryWindow:     mercadoPagoRetryWindow,
		ResponseTimeout: mercadoPagoResponseTimeout,
	},
	malformed: `want "ts=<timestamp>,v1=<hex>"`,
}

// MercadoPago returns the preset for Mercado Pago webhooks ("Webhooks"
// notifications, not legacy IPN).
//
// Key: the body's "id", the notification id. Not data.id, which names the
// payment and repeats across payment.created and payment.updated. Mercado
// Pago does not document whether id survives its retries. A body without it
// falls back to the body hash.
//
// Verify: x-signature "ts=<ts>,v1=<hex>", v1 being hex HMAC-SHA256(secret
// signature, manifest). The manifest is
// "id:<data.id>;request-id:<x-request-id>;ts:<ts>;", as Mercado Pago
// documents. Its data.id is taken from the query string (lowercased), and
// any absent part is left out. The manifest does not cover the body. Only
// the data.id of the query string, the request id and ts are authenticated.
//
// Tolerance: none unless cfg.Tolerance is set. Mercado Pago documents no
// tolerance, and its docs disagree on ts's unit (milliseconds in the text,
// seconds in the example). When a tolerance is set, ts is read as
// milliseconds if it is too large to be seconds.
//
// Duplicates: the stored status (Mercado Pago accepts 200 or 201). No
// options.
func MercadoPago(cfg Config) (*idemhook.Preset, error) {
	return mercadoPagoPreset.build(cfg)
}
