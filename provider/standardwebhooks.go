package provider

import (
	"encoding/base64"
	"fmt"
	"net/http"
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
	return standardWebhooks(cfg, "standardwebhooks", WebhookIDHeader, WebhookTimestampHeader, WebhookSignatureHeader)
}

// swHeaders names the three headers of one Standard Webhooks flavour.
type swHeaders struct{ id, timestamp, signature string }

// standardWebhooks builds a Standard Webhooks preset reading the given
// headers. Svix falls back from svix-* to webhook-* (see Svix).
func standardWebhooks(cfg Config, name string, headerSets ...string) (*idemhook.Preset, error) {
	s, err := cfg.check(name)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, len(s.secrets))
	for i, sec := range s.secrets {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
		if err != nil || len(k) == 0 {
			return nil, fmt.Errorf("provider %s: secret #%d is not \"whsec_<base64>\" (the base64 part does not decode)", name, i+1)
		}
		keys[i] = k
	}
	var sets []swHeaders
	for i := 0; i+2 < len(headerSets); i += 3 {
		sets = append(sets, swHeaders{headerSets[i], headerSets[i+1], headerSets[i+2]})
	}
	// pick returns the first header set whose id header the request carries,
	// or the first set, so that errors name the primary headers.
	pick := func(r *http.Request) swHeaders {
		for _, h := range sets {
			if r.Header.Get(h.id) != "" {
				return h
			}
		}
		return sets[0]
	}
	return &idemhook.Preset{
		Name:            name,
		RetryWindow:     standardWebhooksRetryWindow,
		ResponseTimeout: standardWebhooksResponseTimeout,
		Verify: func(r *http.Request, body []byte) error {
			h := pick(r)
			id := r.Header.Get(h.id)
			if id == "" {
				return s.fail(h.id, ErrMissingHeader, "")
			}
			ts := r.Header.Get(h.timestamp)
			if ts == "" {
				return s.fail(h.timestamp, ErrMissingHeader, "")
			}
			signed, ok := parseUnix(ts)
			if !ok {
				return s.fail(h.timestamp, ErrMalformedHeader, "want unix seconds")
			}
			sigs, err := parseStandardSignature(r.Header.Get(h.signature))
			if err != nil {
				return s.fail(h.signature, err, headerDetail(err, `want space-separated "v1,<base64>" entries`))
			}
			if err := s.checkAge(h.timestamp, signed); err != nil {
				return err
			}
			if !anyMAC(keys, sigs, func(k []byte) []byte {
				return hmacSHA256(k, []byte(id), []byte("."), []byte(ts), []byte("."), body)
			}) {
				return s.fail(h.signature, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return r.Header.Get(pick(r).id), nil
		},
	}, nil
}

// standardSignature is the shape of webhook-signature: space-separated
// "<version>,<base64>" entries, of which the v1 ones are read.
var standardSignature = timestampedHeader{
	sep:    " ",
	assign: ",",
	sigKey: "v1",
	decode: base64.StdEncoding.DecodeString,
}

// parseStandardSignature decodes the v1 entries of a webhook-signature value.
// Entries of other versions are skipped. A value without any v1 entry is
// malformed.
func parseStandardSignature(v string) ([][]byte, error) {
	_, sigs, err := standardSignature.parse(v)
	return sigs, err
}
