package provider

import (
	"net/http"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// The headers of Twitch EventSub's webhook transport.
const (
	TwitchMessageIDHeader        = "Twitch-Eventsub-Message-Id"
	TwitchMessageTimestampHeader = "Twitch-Eventsub-Message-Timestamp"
	TwitchMessageSignatureHeader = "Twitch-Eventsub-Message-Signature"
	TwitchMessageTypeHeader      = "Twitch-Eventsub-Message-Type"
)

// twitchTolerance is how old Twitch says a message may be: "Make sure the
// value in the Twitch-Eventsub-Message-Timestamp header isn't older than 10
// minutes".
const twitchTolerance = 10 * time.Minute

// Go, not a spec: the challenge is decoded into a Go struct: its name matches in
// any case and a number is refused, where a spec's {json:challenge} reads
// a number too.

// Twitch returns the preset for Twitch EventSub's webhook transport.
//
// Key: the Twitch-Eventsub-Message-Id header. Twitch sends each message at
// least once and, when it resends one, with the same message id. A message
// without the header falls back to the body hash (and fails Verify anyway).
//
// Verify: Twitch-Eventsub-Message-Signature "sha256=<hex>" =
// HMAC-SHA256(the subscription's secret, message id + timestamp + raw
// body), with the id and the Twitch-Eventsub-Message-Timestamp header as
// sent. The timestamp (RFC 3339) must be within cfg.Tolerance of now,
// default 10 minutes as Twitch advises, in either direction.
//
// Handshake: after Verify, a webhook_callback_verification message
// (Twitch-Eventsub-Message-Type) is answered 200 text/plain with the body's
// challenge: never forwarded, never claimed. A revocation message is a
// delivery like a notification: it is forwarded once, keyed by its message
// id, so that the backend learns its subscription is gone.
//
// Duplicates: the stored status (Twitch wants a 2xx). No options.
func Twitch(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("twitch")
	if err != nil {
		return nil, err
	}
	if cfg.Tolerance == 0 {
		s.tolerance = twitchTolerance
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:        "twitch",
		RetryWindow: twitchRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			id := r.Header.Get(TwitchMessageIDHeader)
			if id == "" {
				return s.fail(TwitchMessageIDHeader, ErrMissingHeader, "")
			}
			ts := r.Header.Get(TwitchMessageTimestampHeader)
			if ts == "" {
				return s.fail(TwitchMessageTimestampHeader, ErrMissingHeader, "")
			}
			signed, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				return s.fail(TwitchMessageTimestampHeader, ErrMalformedHeader, "want an RFC 3339 time")
			}
			sig, err := parseHexMAC(r.Header.Get(TwitchMessageSignatureHeader), "sha256=")
			if err != nil {
				return s.fail(TwitchMessageSignatureHeader, err, headerDetail(err, `want "sha256=<hex>"`))
			}
			if err := s.checkAge(TwitchMessageTimestampHeader, signed); err != nil {
				return err
			}
			if !anyMAC(keys, [][]byte{sig}, func(k []byte) []byte {
				return hmacSHA256(k, []byte(id), []byte(ts), body)
			}) {
				return s.fail(TwitchMessageSignatureHeader, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Handshake: func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			if r.Header.Get(TwitchMessageTypeHeader) != "webhook_callback_verification" {
				return false
			}
			var v struct {
				Challenge string `json:"challenge"`
			}
			if !decodeEvent(body, &v) || v.Challenge == "" {
				http.Error(w, "twitch: webhook_callback_verification without a challenge", http.StatusBadRequest)
				return true
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(v.Challenge))
			return true
		},
		Key: func(r *http.Request, _ []byte) (string, error) {
			return strings.TrimSpace(r.Header.Get(TwitchMessageIDHeader)), nil
		},
	}, nil
}
