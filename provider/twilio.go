package provider

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemhook/idemhook"
)

// The headers of Twilio's webhook signature.
const (
	TwilioSignatureHeader         = "X-Twilio-Signature"
	TwilioSignatureSettingsHeader = "X-Twilio-Webhooks-Signature-Settings"
	TwilioIdempotencyTokenHeader  = "I-Twilio-Idempotency-Token"
)

// TwilioOptions are the settings of the twilio preset.
type TwilioOptions struct {
	// PublicURL is the scheme, host and any path prefix of the URL Twilio
	// calls, e.g. "https://hooks.example.com" (option public_url). Twilio
	// signs the whole URL it calls, so behind a proxy, a load balancer or
	// the gateway the preset must know it: the URL checked is PublicURL
	// followed by the path and query the request arrived with. Default: ""
	// (the URL is rebuilt from the request itself: https when it came over
	// TLS, else http, and its Host). X-Forwarded-Proto and X-Forwarded-Host
	// are never read, even from a trusted proxy.
	PublicURL string
}

// Go, not a spec: HMAC-SHA256 chosen by X-Twilio-Webhooks-Signature-Settings,
// JSON bodies signed through the bodySHA256 query parameter and the key's
// exclusion of Conversations forms are beyond a spec (spec_test.go, partly).

// Twilio returns the preset for Twilio's webhooks (Programmable Messaging
// and Voice callbacks, and Event Streams' webhook sinks).
//
// Key: the I-Twilio-Idempotency-Token header, which Twilio sends with its
// webhooks and keeps on their retries. Without it: for Programmable
// Messaging, "<MessageSid>:<MessageStatus>" of the form (SmsStatus when
// there is no MessageStatus, e.g. "received" for an inbound message),
// because one MessageSid goes through queued, sent, delivered...; for a
// JSON body (Event Streams), the id of the single CloudEvent it carries.
// Anything else, voice callbacks among them (a call's successive <Gather>
// callbacks share CallSid and CallStatus), falls back to the body hash,
// which Twilio's byte-identical retries keep.
//
// Verify: X-Twilio-Signature = base64(HMAC-SHA1(Auth Token, URL + the POST
// form's parameters sorted by name, each name followed by its value)). A
// body that is not a form is covered by the bodySHA256 query parameter
// instead: the signature is over the URL alone and the body's hex SHA-256
// must equal bodySHA256. With X-Twilio-Webhooks-Signature-Settings
// "algorithm=HMAC_SHA256" (a Webhook Rule's SharedKey) the MAC is
// HMAC-SHA256; put the SharedKey among the secrets. The URL is the one
// Twilio called (see TwilioOptions.PublicURL), tried with and without its
// scheme's default port, as Twilio's own SDK does (not its further
// re-encodings of the query string, for URLs your own code signed with
// another escaping). No timestamp is signed:
// the key store is the only replay defence, and a request signed for one
// URL of the account fails at another.
//
// Duplicates: the stored status and body (the TwiML of the first answer).
// Options: TwilioOptions.
func Twilio(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("twilio")
	if err != nil {
		return nil, err
	}
	public, err := checkPublicURL(cfg.Twilio.PublicURL, "Twilio")
	if err != nil {
		return nil, &OptionError{Preset: "twilio", Option: "public_url", Reason: err.Error()}
	}
	keys := s.secretBytes()
	return &idemhook.Preset{
		Name:        "twilio",
		RetryWindow: twilioRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			return s.verifyTwilio(keys, public, r, body)
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return twilioKey(r, body), nil
		},
	}, nil
}

// verifyTwilio checks X-Twilio-Signature.
func (s settings) verifyTwilio(keys [][]byte, public string, r *http.Request, body []byte) error {
	newHash := sha1.New
	if settings := r.Header.Get(TwilioSignatureSettingsHeader); settings != "" {
		switch twilioAlgorithm(settings) {
		case "", "HMAC_SHA1":
		case "HMAC_SHA256":
			newHash = sha256.New
		default:
			return s.fail(TwilioSignatureSettingsHeader, ErrMalformedHeader, "want algorithm=HMAC_SHA1 or HMAC_SHA256")
		}
	}
	v := strings.TrimSpace(r.Header.Get(TwilioSignatureHeader))
	if v == "" {
		return s.fail(TwilioSignatureHeader, ErrMissingHeader, "")
	}
	sig, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(sig) != newHash().Size() {
		return s.fail(TwilioSignatureHeader, ErrMalformedHeader, "want the base64 of an HMAC-SHA1 (HMAC-SHA256 with a SharedKey)")
	}
	bodyHash := r.URL.Query().Get("bodySHA256")
	var params []byte
	if bodyHash == "" && len(body) > 0 {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return s.fail("", ErrMalformedBody, "a body that is not a form needs bodySHA256 in the URL")
		}
		params = twilioParams(form)
	}
	matched := false
	for _, u := range calledURLs(public, r) {
		for _, k := range keys {
			matched = matched || hmac.Equal(twilioMAC(newHash, k, u, params), sig)
		}
	}
	if !matched {
		return s.fail(TwilioSignatureHeader, ErrNoMatchingSignature, "")
	}
	if bodyHash != "" {
		sum := sha256.Sum256(body)
		if !hmac.Equal([]byte(strings.ToLower(bodyHash)), []byte(hex.EncodeToString(sum[:]))) {
			return s.fail("", ErrNoMatchingSignature, "the body's SHA-256 is not the signed bodySHA256")
		}
	}
	return nil
}

// twilioAlgorithm returns the algorithm of X-Twilio-Webhooks-Signature-Settings
// ("key=...,algorithm=HMAC_SHA256"), or "".
func twilioAlgorithm(settings string) string {
	for part := range strings.SplitSeq(settings, ",") {
		if k, v, ok := strings.Cut(part, "="); ok && strings.TrimSpace(k) == "algorithm" {
			return strings.ToUpper(strings.TrimSpace(v))
		}
	}
	return ""
}

// twilioParams concatenates a form's parameters as Twilio signs them:
// sorted by name, each name followed by its value; a name given several
// times has its distinct values sorted, as Twilio's SDK does.
func twilioParams(form url.Values) []byte {
	var b []byte
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range form {
			if !yield(k) {
				return
			}
		}
	}) {
		values := slices.Compact(slices.Sorted(slices.Values(form[name])))
		for _, v := range values {
			b = append(b, name...)
			b = append(b, v...)
		}
	}
	return b
}

func twilioMAC(newHash func() hash.Hash, key []byte, u string, params []byte) []byte {
	m := hmac.New(newHash, key)
	m.Write([]byte(u))
	m.Write(params)
	return m.Sum(nil)
}

// twilioKey returns the idempotency token, a Programmable Messaging key, a
// single CloudEvent's id, or "".
func twilioKey(r *http.Request, body []byte) string {
	if tok := strings.TrimSpace(r.Header.Get(TwilioIdempotencyTokenHeader)); tok != "" {
		return tok
	}
	if r.URL.Query().Has("bodySHA256") {
		return twilioCloudEventID(body)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Has("EventType") {
		return "" // Conversations and other products: the body hash
	}
	sid := form.Get("MessageSid")
	status := form.Get("MessageStatus")
	if status == "" {
		status = form.Get("SmsStatus")
	}
	if sid == "" || status == "" {
		return ""
	}
	return sid + ":" + status
}

// twilioCloudEventID returns the id of the single CloudEvent of an Event
// Streams body (an array of one event, or the event itself), or "".
func twilioCloudEventID(body []byte) string {
	type event struct {
		ID          jsonID `json:"id"`
		SpecVersion jsonID `json:"specversion"`
	}
	var one event
	if decodeEvent(body, &one) && one.SpecVersion != "" {
		return string(one.ID)
	}
	var batch []event
	if decodeEvent(body, &batch) && len(batch) == 1 && batch[0].SpecVersion != "" {
		return string(batch[0].ID)
	}
	return ""
}
