package provider

import (
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/idemhook/idemhook"
)

// PaddleSignatureHeader is the header Paddle Billing signs deliveries in.
const PaddleSignatureHeader = "Paddle-Signature"

// Paddle returns the preset for Paddle Billing webhooks.
//
// Key: the body's "event_id" (evt_...), Paddle's documented deduplication
// key. Not notification_id, which differs per destination.
//
// Verify: Paddle-Signature "ts=<unix>;h1=<hex>[;h1=<hex>...]", each h1 being
// hex HMAC-SHA256(endpoint secret key, "<ts>:<raw body>"); several h1 appear
// during a secret rotation. ts must be within cfg.Tolerance of now. Default
// tolerance: 5 minutes, not the ~5 seconds of Paddle's SDKs: ts is when the
// attempt was sent, and 5 seconds refuses genuine deliveries under ordinary
// clock skew or queueing, while replays of a valid delivery are stopped by the
// key store anyway. Set Tolerance to tighten it.
//
// Duplicates: 200, the only answer Paddle documents as success. No options.
func Paddle(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("paddle")
	if err != nil {
		return nil, err
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name: "paddle",
		Verify: func(r *http.Request, body []byte) error {
			ts, sigs, err := parsePaddleSignature(r.Header.Get(PaddleSignatureHeader))
			if err != nil {
				return s.fail(PaddleSignatureHeader, err, headerDetail(err, `want "ts=<unix seconds>;h1=<hex>"`))
			}
			signed, _ := parseUnix(ts)
			if err := s.checkAge(PaddleSignatureHeader, signed); err != nil {
				return err
			}
			if !anyMAC(keys, sigs, func(k []byte) []byte { return hmacSHA256(k, []byte(ts), []byte(":"), body) }) {
				return s.fail(PaddleSignatureHeader, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return topLevelID(body, "event_id"), nil
		},
		DuplicateStatus: http.StatusOK,
	}, nil
}

// parsePaddleSignature splits a Paddle-Signature value into ts and the
// decoded h1 signatures; other schemes are skipped.
func parsePaddleSignature(v string) (ts string, sigs [][]byte, err error) {
	if strings.TrimSpace(v) == "" {
		return "", nil, ErrMissingHeader
	}
	for item := range strings.SplitSeq(v, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return "", nil, ErrMalformedHeader
		}
		switch k {
		case "ts":
			if _, ok := parseUnix(val); !ok || ts != "" {
				return "", nil, ErrMalformedHeader
			}
			ts = val
		case "h1":
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
