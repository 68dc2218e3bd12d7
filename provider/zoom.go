package provider

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
)

// The headers of Zoom's webhook signature.
const (
	ZoomSignatureHeader = "x-zm-signature"
	ZoomTimestampHeader = "x-zm-request-timestamp"
)

// zoomTolerance is the zoom preset's default tolerance: Zoom's retry
// window (the last of its three retries comes 85 minutes after the first
// attempt) and a margin, because Zoom does not say whether a retry carries
// a new x-zm-request-timestamp. A replay inside it is stopped by the key
// store (the default TTL is 2 days), one after it by the tolerance.
const zoomTolerance = 2 * time.Hour

// Go, not a spec: the key decodes the body into a Go struct: field names match in
// any case (TestSpecKnownKeyDifferences).

// Zoom returns the preset for Zoom webhooks (event subscriptions of a
// Marketplace app).
//
// Key: Zoom sends no event id. The key is "<event>:<event_ts>:<digest>":
// the event's name, the time it happened (milliseconds) and the first 16
// bytes of the SHA-256 of its payload in compact JSON. Not payload.object's
// id: the participants joining one meeting in the same millisecond are
// events about one object, which its id would merge. A retry resends the
// event, so the key is the same; the name and time keep the key readable.
// A body without event or event_ts falls back to the body hash.
//
// Verify: x-zm-signature "v0=<hex>" = HMAC-SHA256(the app's secret token,
// "v0:<x-zm-request-timestamp>:<raw body>"). The timestamp (unix seconds)
// must be within cfg.Tolerance of now, in either direction; default 2 hours
// (see zoomTolerance). Zoom's own library (Rivet) checks no age at all.
//
// Handshake: after Verify, an endpoint.url_validation event is answered 200
// application/json {"plainToken": <its payload.plainToken>,
// "encryptedToken": hex(HMAC-SHA256(secret token, plainToken))}, with the
// secret that signed the request: never forwarded, never claimed. Zoom
// sends it when the endpoint is saved and every 72 hours.
//
// Duplicates: the stored status (Zoom wants 200 or 204 within 3 s). No
// options.
func Zoom(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("zoom")
	if err != nil {
		return nil, err
	}
	if cfg.Tolerance == 0 {
		s.tolerance = zoomTolerance
	}
	keys := s.secretBytes()
	// signer returns the secret whose MAC is the request's signature, or nil.
	signer := func(r *http.Request, body []byte) ([]byte, error) {
		ts := r.Header.Get(ZoomTimestampHeader)
		if ts == "" {
			return nil, s.fail(ZoomTimestampHeader, ErrMissingHeader, "")
		}
		signed, ok := parseUnix(ts)
		if !ok {
			return nil, s.fail(ZoomTimestampHeader, ErrMalformedHeader, "want unix seconds")
		}
		sig, err := parseHexMAC(r.Header.Get(ZoomSignatureHeader), "v0=")
		if err != nil {
			return nil, s.fail(ZoomSignatureHeader, err, headerDetail(err, `want "v0=<hex>"`))
		}
		if err := s.checkAge(ZoomTimestampHeader, signed); err != nil {
			return nil, err
		}
		for _, k := range keys {
			if hmac.Equal(hmacSHA256(k, []byte("v0:"), []byte(ts), []byte(":"), body), sig) {
				return k, nil
			}
		}
		return nil, s.fail(ZoomSignatureHeader, ErrNoMatchingSignature, "")
	}
	return &idemhook.Preset{
		Name:        "zoom",
		RetryWindow: zoomRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			_, err := signer(r, body)
			return err
		},
		Handshake: func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			var v struct {
				Event   string `json:"event"`
				Payload struct {
					PlainToken string `json:"plainToken"`
				} `json:"payload"`
			}
			if !decodeEvent(body, &v) || v.Event != "endpoint.url_validation" {
				return false
			}
			key, err := signer(r, body) // Verify passed: the secret Zoom holds
			if err != nil || v.Payload.PlainToken == "" {
				http.Error(w, "zoom: endpoint.url_validation without a payload.plainToken", http.StatusBadRequest)
				return true
			}
			answer, _ := json.Marshal(map[string]string{
				"plainToken":     v.Payload.PlainToken,
				"encryptedToken": hex.EncodeToString(hmacSHA256(key, []byte(v.Payload.PlainToken))),
			})
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(answer)
			return true
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return zoomKey(body), nil
		},
	}, nil
}

// zoomKey returns "<event>:<event_ts>:<payload digest>", or "".
func zoomKey(body []byte) string {
	var v struct {
		Event   jsonID          `json:"event"`
		EventTS jsonID          `json:"event_ts"`
		Payload json.RawMessage `json:"payload"`
	}
	if !decodeEvent(body, &v) || v.Event == "" || v.EventTS == "" {
		return ""
	}
	var compact bytes.Buffer
	if json.Compact(&compact, v.Payload) != nil {
		compact.Reset() // no payload (or null): the name and time alone
	}
	sum := sha256.Sum256(compact.Bytes())
	return string(v.Event) + ":" + string(v.EventTS) + ":" + hex.EncodeToString(sum[:16])
}
