package provider

import (
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/idemhook/idemhook"
)

// StripeSignatureHeader is the header Stripe signs every delivery attempt in.
const StripeSignatureHeader = "Stripe-Signature"

// Stripe returns the preset for Stripe webhooks.
//
// Key: the event's "id" (evt_...), which every retry of an event repeats.
// Never the Stripe-Signature header: Stripe signs each attempt with a new
// timestamp, so a key taken from it never matches a retry.
//
// Verify: Stripe-Signature "t=<unix>,v1=<hex>[,v1=<hex>...]", each v1 being
// hex HMAC-SHA256(secret, "<t>.<raw body>"), with the endpoint secret
// (whsec_..., used as is). The request passes if any v1 matches any of
// cfg.Secrets; schemes other than v1 (v0, ...) are ignored, so a downgrade is
// impossible. t must be within cfg.Tolerance of now (default 5 minutes, both
// directions).
//
// Duplicates: the stored status (any 2xx satisfies Stripe). No options.
func Stripe(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("stripe")
	if err != nil {
		return nil, err
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name: "stripe",
		Verify: func(r *http.Request, body []byte) error {
			ts, sigs, err := parseStripeSignature(r.Header.Get(StripeSignatureHeader))
			if err != nil {
				return s.fail(StripeSignatureHeader, err, headerDetail(err, `want "t=<unix seconds>,v1=<hex>"`))
			}
			signed, _ := parseUnix(ts)
			if err := s.checkAge(StripeSignatureHeader, signed); err != nil {
				return err
			}
			if !anyMAC(keys, sigs, func(k []byte) []byte { return hmacSHA256(k, []byte(ts), []byte("."), body) }) {
				return s.fail(StripeSignatureHeader, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return topLevelID(body, "id"), nil
		},
	}, nil
}

// parseStripeSignature splits a Stripe-Signature value into its timestamp
// and its decoded v1 signatures. Other schemes are skipped; a value with no
// t, a non-numeric t, or no valid v1 is malformed.
func parseStripeSignature(v string) (ts string, sigs [][]byte, err error) {
	if strings.TrimSpace(v) == "" {
		return "", nil, ErrMissingHeader
	}
	for item := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return "", nil, ErrMalformedHeader
		}
		switch k {
		case "t":
			if ts != "" {
				return "", nil, ErrMalformedHeader
			}
			if _, ok := parseUnix(val); !ok {
				return "", nil, ErrMalformedHeader
			}
			ts = val
		case "v1":
			sig, err := hex.DecodeString(val)
			if err != nil || len(sig) == 0 {
				return "", nil, ErrMalformedHeader
			}
			sigs = append(sigs, sig)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return "", nil, ErrMalformedHeader
	}
	return ts, sigs, nil
}

// headerDetail returns the expected format for a malformed header, and
// nothing for a missing one.
func headerDetail(err error, format string) string {
	if err == ErrMalformedHeader {
		return format
	}
	return ""
}
