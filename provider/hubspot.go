package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// The headers of HubSpot's v3 request signature.
const (
	HubSpotSignatureV3Header = "X-HubSpot-Signature-v3"
	HubSpotTimestampHeader   = "X-HubSpot-Request-Timestamp"
	// HubSpotSignatureHeader carries the older v1 and v2 signatures, which
	// the preset does not accept (they sign no timestamp).
	HubSpotSignatureHeader = "X-HubSpot-Signature"
)

// HubSpotOptions are the settings of the hubspot preset.
type HubSpotOptions struct {
	// PublicURL is the scheme, host and any path prefix of the URL
	// HubSpot calls, e.g. "https://hooks.example.com" (option public_url).
	// HubSpot signs the whole URL it calls, so behind a proxy, a load
	// balancer or the gateway the preset must know it, as with twilio's
	// option of the same name: the URL checked is PublicURL followed by
	// the path and query the request arrived with. Default: "" (rebuilt
	// from the request: https when it came over TLS, else http, and its
	// Host). X-Forwarded-Proto and X-Forwarded-Host are never read.
	PublicURL string
}

// Go, not a spec: the URL is also tried with the percent-escapes HubSpot decodes
// before signing, which a spec's {url} does not do (spec_test.go, partly).

// HubSpot returns the preset for HubSpot's webhooks (the Webhooks API of
// an app: a JSON array of up to 100 CRM events, each with its eventId).
//
// Verify: X-HubSpot-Signature-v3 = base64(HMAC-SHA256(the app's client
// secret, method + URI + raw body + X-HubSpot-Request-Timestamp)), as
// @hubspot/api-client's Signature.isValid (signatureVersion "v3")
// computes it. The URI is the URL HubSpot called (see
// HubSpotOptions.PublicURL), tried as it arrived and with the
// percent-escapes HubSpot's validation guide lists decoded (%3A %2F %3F
// %40 %21 %24 %27 %28 %29 %2A %2C %3B), and with and without the scheme's
// default port. The timestamp is in milliseconds and must be within
// cfg.Tolerance of now, in either direction; default 5 minutes, the age
// HubSpot's guide and its SDKs reject. Only v3 is accepted: the v1 and v2
// signatures of X-HubSpot-Signature sign no timestamp, and HubSpot sends
// v3 beside them.
//
// Key: "<subscriptionId>:<eventId>" of a body holding one event. HubSpot
// documents that an eventId is not guaranteed to be unique, so the
// subscription it came through is part of the key; both stay the same on
// every retry of the event (attemptNumber grows). An event without one of
// them is keyed by the SHA-256 of its canonical JSON, as Items keys it
// ([idemhook.Items.OneItemKey]). A batch of several events
// is keyed by its body hash, which a retry does not keep, so Items (a
// "[*]" path keyed by "{subscriptionId}:{eventId}", the same key) has each
// event claimed on its own when the route runs items.
//
// Duplicates: the stored status (HubSpot counts any 2xx). Options:
// HubSpotOptions.
func HubSpot(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("hubspot")
	if err != nil {
		return nil, err
	}
	public, err := checkPublicURL(cfg.HubSpot.PublicURL, "HubSpot")
	if err != nil {
		return nil, &OptionError{Preset: "hubspot", Option: "public_url", Reason: err.Error()}
	}
	keys := s.secretBytes()
	items := &idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "{subscriptionId}:{eventId}"}}}
	return &idemhook.Preset{
		Name:        "hubspot",
		RetryWindow: hubSpotRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			return s.verifyHubSpot(keys, public, r, body)
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return items.OneItemKey(body), nil
		},
		Items: items,
	}, nil
}

// hubSpotDecoder decodes the percent-escapes HubSpot's validation guide
// lists for the v3 signature's URI.
var hubSpotDecoder = func() *strings.Replacer {
	var pairs []string
	for _, c := range ":/?@!$'()*,;" {
		esc := "%" + strings.ToUpper(strconv.FormatInt(int64(c), 16))
		pairs = append(pairs, esc, string(c), strings.ToLower(esc), string(c))
	}
	return strings.NewReplacer(pairs...)
}()

// hubSpotURIs returns the URIs the v3 signature may cover.
func hubSpotURIs(public string, r *http.Request) []string {
	var uris []string
	for _, u := range calledURLs(public, r) {
		uris = append(uris, u)
		if d := hubSpotDecoder.Replace(u); d != u {
			uris = append(uris, d)
		}
	}
	return uris
}

// verifyHubSpot checks X-HubSpot-Signature-v3 and its timestamp.
func (s settings) verifyHubSpot(keys [][]byte, public string, r *http.Request, body []byte) error {
	v := strings.TrimSpace(r.Header.Get(HubSpotSignatureV3Header))
	if v == "" {
		detail := ""
		if r.Header.Get(HubSpotSignatureHeader) != "" {
			detail = "only the v3 signature is accepted: v1 and v2 sign no timestamp"
		}
		return s.fail(HubSpotSignatureV3Header, ErrMissingHeader, detail)
	}
	sig, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(sig) != sha256.Size {
		return s.fail(HubSpotSignatureV3Header, ErrMalformedHeader, "want the base64 of an HMAC-SHA256")
	}
	ts := strings.TrimSpace(r.Header.Get(HubSpotTimestampHeader))
	if ts == "" {
		return s.fail(HubSpotTimestampHeader, ErrMissingHeader, "")
	}
	ms, ok := parseUnix(ts) // the same digits, read as milliseconds
	if !ok {
		return s.fail(HubSpotTimestampHeader, ErrMalformedHeader, "want unix milliseconds")
	}
	if err := s.checkAge(HubSpotTimestampHeader, time.UnixMilli(ms.Unix())); err != nil {
		return err
	}
	for _, u := range hubSpotURIs(public, r) {
		for _, k := range keys {
			if hmac.Equal(hmacSHA256(k, []byte(r.Method), []byte(u), body, []byte(ts)), sig) {
				return nil
			}
		}
	}
	return s.fail(HubSpotSignatureV3Header, ErrNoMatchingSignature, "")
}
