package provider

import (
	"encoding/hex"
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
)

// mailgunTolerance is the mailgun preset's default tolerance: Mailgun's
// 8-hour retry window and an hour, because Mailgun does not say whether a
// retry is signed again with a new timestamp.
const mailgunTolerance = 9 * time.Hour

// Go, not a spec: the body is decoded into a Go struct, and its errors name what
// is wrong in Mailgun's words (no "signature" object, ...), not a spec's.

// Mailgun returns the preset for Mailgun's webhooks (the JSON ones, with
// "signature" and "event-data").
//
// Key: event-data.id, the event's id. A body without it falls back to the
// body hash.
//
// Verify: the signature is in the body, not in a header:
// signature.signature = hex(HMAC-SHA256(the webhook signing key,
// signature.timestamp + signature.token)). For a subaccount's domain,
// signature.parent-signature is the same over the primary account's key,
// and either passes. signature.timestamp (unix seconds) must be within
// cfg.Tolerance of now, in either direction; default 9 hours (see
// mailgunTolerance). What is signed is the timestamp and the token only,
// not event-data: a captured signature object passes with any event-data
// inside the tolerance. The preset cannot close that, Mailgun's design;
// the key store stops the replay of a whole delivery, and Mailgun advises
// refusing a token seen before, which a route can do by keying on it with
// a custom preset. Legacy form-encoded webhooks are refused (malformed
// body).
//
// Success: exactly 200, because Mailgun counts only 200 as success (any
// other status but 406 makes it retry): the gateway answers it for any 2xx
// of the backend, and replays with it. No options.
func Mailgun(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("mailgun")
	if err != nil {
		return nil, err
	}
	if cfg.Tolerance == 0 {
		s.tolerance = mailgunTolerance
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:        "mailgun",
		RetryWindow: mailgunRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			sig, err := parseMailgunSignature(body)
			if err != nil {
				return s.fail("", ErrMalformedBody, err.Error())
			}
			signed, _ := parseUnix(sig.timestamp)
			if err := s.checkAge("", signed); err != nil {
				return err
			}
			if !anyMAC(keys, sig.macs, func(k []byte) []byte {
				return hmacSHA256(k, []byte(sig.timestamp), []byte(sig.token))
			}) {
				return s.fail("", ErrNoMatchingSignature, "signature.signature")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			var v struct {
				EventData struct {
					ID jsonID `json:"id"`
				} `json:"event-data"`
			}
			if !decodeEvent(body, &v) {
				return "", nil
			}
			return string(v.EventData.ID), nil
		},
		DuplicateStatus: http.StatusOK,
		SuccessStatus:   http.StatusOK,
	}, nil
}

// mailgunSignature is the signature object of a Mailgun webhook, parsed.
type mailgunSignature struct {
	timestamp string
	token     string
	macs      [][]byte // signature, then parent-signature when present
}

// mailgunError is why a body carries no usable signature object.
type mailgunError string

func (e mailgunError) Error() string { return string(e) }

// parseMailgunSignature reads body's signature object: a timestamp of
// decimal seconds (a string or a number), a non-empty token and one or two
// hex HMAC-SHA256s.
func parseMailgunSignature(body []byte) (mailgunSignature, error) {
	var v struct {
		Signature *struct {
			Timestamp       jsonID `json:"timestamp"`
			Token           string `json:"token"`
			Signature       string `json:"signature"`
			ParentSignature string `json:"parent-signature"`
		} `json:"signature"`
	}
	if !decodeEvent(body, &v) || v.Signature == nil {
		return mailgunSignature{}, mailgunError(`no "signature" object: want Mailgun's JSON webhook body`)
	}
	sig := mailgunSignature{timestamp: string(v.Signature.Timestamp), token: v.Signature.Token}
	if _, ok := parseUnix(sig.timestamp); !ok {
		return mailgunSignature{}, mailgunError("signature.timestamp: want unix seconds")
	}
	if sig.token == "" {
		return mailgunSignature{}, mailgunError("signature.token: missing")
	}
	for i, h := range []string{v.Signature.Signature, v.Signature.ParentSignature} {
		if h == "" && i == 1 {
			continue
		}
		mac, err := hex.DecodeString(h)
		if err != nil || len(mac) != 32 {
			return mailgunSignature{}, mailgunError([]string{"signature.signature", "signature.parent-signature"}[i] + ": want the hex of an HMAC-SHA256")
		}
		sig.macs = append(sig.macs, mac)
	}
	return sig, nil
}
