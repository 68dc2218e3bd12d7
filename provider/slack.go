package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// The headers of Slack's request signing.
const (
	SlackSignatureHeader = "X-Slack-Signature"
	SlackTimestampHeader = "X-Slack-Request-Timestamp"
)

// Go, not a spec: the key decodes the body into a Go struct: field names match
// in any case, which a spec's {json:...} does not (TestSpecKnownKeyDifferences).

// Slack returns the preset for the Slack Events API.
//
// Key: "<api_app_id>:<event_id>" of the event_callback envelope (event_id
// alone when api_app_id is absent), the same on Slack's three retries. Bodies
// without an event_id (slash commands, interactivity, url_verification) fall
// back to the body hash.
//
// Verify: X-Slack-Signature "v0=<hex>" = HMAC-SHA256(signing secret,
// "v0:<X-Slack-Request-Timestamp>:<raw body>"). The timestamp must be within
// cfg.Tolerance of now (default 5 minutes, as Slack's SDKs, both
// directions). Each attempt carries its own timestamp.
//
// Handshake: after Verify, a url_verification body is answered 200
// text/plain with its challenge.
//
// Duplicates: the stored status. No options. Slack retries after 3 s even
// while the first attempt is still running. Consider the route's in-flight
// policy "wait" or "reject".
func Slack(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("slack")
	if err != nil {
		return nil, err
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:        "slack",
		RetryWindow: slackRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			ts := r.Header.Get(SlackTimestampHeader)
			if ts == "" {
				return s.fail(SlackTimestampHeader, ErrMissingHeader, "")
			}
			signed, ok := parseUnix(ts)
			if !ok {
				return s.fail(SlackTimestampHeader, ErrMalformedHeader, "want unix seconds")
			}
			sig, err := parseHexMAC(r.Header.Get(SlackSignatureHeader), "v0=")
			if err != nil {
				return s.fail(SlackSignatureHeader, err, headerDetail(err, `want "v0=<hex>"`))
			}
			if err := s.checkAge(SlackTimestampHeader, signed); err != nil {
				return err
			}
			if !anyMAC(keys, [][]byte{sig}, func(k []byte) []byte {
				return hmacSHA256(k, []byte("v0:"), []byte(ts), []byte(":"), body)
			}) {
				return s.fail(SlackSignatureHeader, ErrNoMatchingSignature, "")
			}
			return nil
		},
		Handshake: func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			var v struct {
				Type      string `json:"type"`
				Challenge string `json:"challenge"`
			}
			if !decodeEvent(body, &v) || v.Type != "url_verification" {
				return false
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(v.Challenge))
			return true
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			var v struct {
				AppID   jsonID `json:"api_app_id"`
				EventID jsonID `json:"event_id"`
			}
			if !decodeEvent(body, &v) || v.EventID == "" {
				return "", nil
			}
			if v.AppID == "" {
				return string(v.EventID), nil
			}
			return string(v.AppID) + ":" + string(v.EventID), nil
		},
	}, nil
}
