package provider

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// The headers of Mercado Pago's webhook signature.
const (
	MercadoPagoSignatureHeader = "x-signature"
	MercadoPagoRequestIDHeader = "x-request-id"
)

// mercadoPagoSignature is the shape of x-signature, which Mercado Pago
// sends with spaces around its parts at times.
var mercadoPagoSignature = timestampedHeader{
	name:   MercadoPagoSignatureHeader,
	format: `want "ts=<timestamp>,v1=<hex>"`,
	sep:    ",",
	tsKey:  "ts",
	sigKey: "v1",
	spaced: true,
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
	s, err := cfg.check("mercadopago")
	if err != nil {
		return nil, err
	}
	checkAge := cfg.Tolerance > 0
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:            "mercadopago",
		RetryWindow:     mercadoPagoRetryWindow,
		ResponseTimeout: mercadoPagoResponseTimeout,
		Verify: func(r *http.Request, body []byte) error {
			ts, sigs, err := mercadoPagoSignature.parse(r.Header.Get(MercadoPagoSignatureHeader))
			if err != nil {
				return s.fail(MercadoPagoSignatureHeader, err, headerDetail(err, mercadoPagoSignature.format))
			}
			if checkAge {
				n, _ := strconv.ParseInt(ts, 10, 64)
				signed := time.Unix(n, 0)
				if n > 1e11 {
					signed = time.UnixMilli(n)
				}
				if err := s.checkAge(MercadoPagoSignatureHeader, signed); err != nil {
					return err
				}
			}
			manifest := mercadoPagoManifest(r.URL.Query().Get("data.id"), r.Header.Get(MercadoPagoRequestIDHeader), ts)
			if !anyMAC(keys, sigs, func(k []byte) []byte { return hmacSHA256(k, []byte(manifest)) }) {
				return s.fail(MercadoPagoSignatureHeader, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return topLevelID(body, "id"), nil
		},
	}, nil
}

// mercadoPagoManifest builds the signed string, leaving out absent parts.
func mercadoPagoManifest(dataID, requestID, ts string) string {
	var b strings.Builder
	if dataID != "" {
		b.WriteString("id:" + strings.ToLower(dataID) + ";")
	}
	if requestID != "" {
		b.WriteString("request-id:" + requestID + ";")
	}
	b.WriteString("ts:" + ts + ";")
	return b.String()
}
