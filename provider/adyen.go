package provider

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemhook/idemhook"
)

// AdyenSuccessBody is the body Adyen's Standard webhooks expect with a
// success: its Customer Area's test webhook fails without it.
const AdyenSuccessBody = "[accepted]"

// Go, not a spec: the HMAC is inside the body, one per notification item, over eight of
// the item's fields; a spec's signature is one per request.

// Adyen returns the preset for Adyen's Standard webhooks (the JSON payments
// webhooks: {"live": ..., "notificationItems": [{"NotificationRequestItem":
// {...}}]}).
//
// Secrets: the webhook's HMAC keys as Adyen's Customer Area shows them, in
// hex. A secret that is not hex is a [*SecretError].
//
// Verify: every item's additionalData.hmacSignature must be the base64 of
// HMAC-SHA256(hex-decoded key, pspReference:originalReference:
// merchantAccountCode:merchantReference:amount.value:amount.currency:
// eventCode:success), with any of the secrets (rotation: Adyen signs an
// event when it generates it, so events queued before a key change come
// with the old key). The values are joined as they are, without escaping,
// as Adyen's own libraries do (@adyen/api-library's HmacValidator, the Go
// library's hmacvalidator); the escaping of '\' and ':' Adyen documents is
// for the key-value signatures of its classic payment pages, not for
// webhooks. Only those eight fields are signed: the rest of the body is not
// authenticated, so a backend should trust only them, or add the basic
// authentication Adyen can send, which this preset leaves to the route (a
// header the backend or a proxy in front checks). A missing or wrong
// signature on any item fails the whole request: nothing is claimed.
//
// Key: with one item (what Adyen's JSON webhooks always carry; only SOAP
// batches several), "<pspReference>:<eventCode>:<success>". The
// pspReference alone names the payment or the modification, which has
// several events; success is part of the key because it is part of what
// Adyen signs and reports: an event that failed and the same event code
// for the same reference that later succeeded are two facts. A retry is
// byte-identical in these fields (the signature is computed once), so
// success never makes a retry look new. With several items, or one
// without a pspReference or eventCode: "", the body hash.
//
// Answers: 200 with the body "[accepted]" in place of any 2xx of the
// backend (SuccessStatus, SuccessBody), on replays too (DuplicateStatus).
// No options.
func Adyen(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("adyen")
	if err != nil {
		return nil, err
	}
	keys, err := adyenKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &idemhook.Preset{
		Name:        "adyen",
		RetryWindow: adyenRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			return s.verifyAdyen(keys, body)
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return adyenKey(body), nil
		},
		DuplicateStatus: http.StatusOK,
		SuccessStatus:   http.StatusOK,
		SuccessBody:     AdyenSuccessBody,
	}, nil
}

// SecretError is a secret a preset can't use, such as an Adyen HMAC key
// that is not hex. Index is its position in Config.Secrets (from 0), so
// that a configuration can point at its line.
type SecretError struct {
	Preset string
	Index  int
	Reason string
}

func (e *SecretError) Error() string {
	return fmt.Sprintf("provider %s: secret #%d %s", e.Preset, e.Index+1, e.Reason)
}

// adyenKeys hex-decodes the HMAC keys; empty secrets are skipped, as
// Config.check skips them.
func adyenKeys(secrets []string) ([][]byte, error) {
	var keys [][]byte
	for i, sec := range secrets {
		if sec == "" {
			continue
		}
		k, err := hex.DecodeString(strings.TrimSpace(sec))
		if err != nil || len(k) == 0 {
			return nil, &SecretError{Preset: "adyen", Index: i,
				Reason: "is not a hex HMAC key (Adyen's Customer Area shows it as hex digits, e.g. 64 of them)"}
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// adyenItem is one NotificationRequestItem: the fields Adyen signs, in the
// order it signs them, and the signature.
type adyenItem struct {
	signed    [8]string
	signature string
}

// adyenSigned names the signed fields, in order, as paths into the item.
var adyenSigned = [8][]string{
	{"pspReference"}, {"originalReference"}, {"merchantAccountCode"}, {"merchantReference"},
	{"amount", "value"}, {"amount", "currency"}, {"eventCode"}, {"success"},
}

// adyenItems parses a Standard webhook body into its items. Field names
// match exactly, as in JavaScript (encoding/json would also take
// "PSPReference" for pspReference, and a body carrying both could have one
// checked and the other read by a backend); of a name given twice the last
// is taken, as JSON.parse does.
func adyenItems(body []byte) ([]adyenItem, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: want Adyen's Standard webhook body")
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(top["notificationItems"], &list); err != nil || len(list) == 0 {
		return nil, fmt.Errorf("no notificationItems: want Adyen's Standard webhook body")
	}
	items := make([]adyenItem, len(list))
	for i, wrapper := range list {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(wrapper["NotificationRequestItem"], &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("notificationItems[%d]: no NotificationRequestItem object", i)
		}
		for j, path := range adyenSigned {
			v, err := adyenText(adyenField(obj, path))
			if err != nil {
				return nil, fmt.Errorf("notificationItems[%d]: %s: %v", i, strings.Join(path, "."), err)
			}
			items[i].signed[j] = v
		}
		sig, err := adyenText(adyenField(obj, []string{"additionalData", "hmacSignature"}))
		if err != nil {
			return nil, fmt.Errorf("notificationItems[%d]: additionalData.hmacSignature: %v", i, err)
		}
		items[i].signature = sig
	}
	return items, nil
}

// adyenField returns the JSON value at path in obj, or nil.
func adyenField(obj map[string]json.RawMessage, path []string) json.RawMessage {
	v := obj[path[0]]
	if len(path) == 1 || v == nil {
		return v
	}
	var inner map[string]json.RawMessage
	if json.Unmarshal(v, &inner) != nil {
		return nil
	}
	return adyenField(inner, path[1:])
}

// adyenText is a signed value as JavaScript's Array.join writes it: a
// string as it is, an integer as written, another number in its shortest
// form, true or false, and "" for null or an absent field. An object or an
// array is refused: Adyen signs none.
func adyenText(v json.RawMessage) (string, error) {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0 || string(v) == "null":
		return "", nil
	case v[0] == '"':
		var s string
		err := json.Unmarshal(v, &s)
		return s, err
	case string(v) == "true" || string(v) == "false":
		return string(v), nil
	case v[0] == '-' || v[0] >= '0' && v[0] <= '9':
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return string(v), nil
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return "", err
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("want a string or a number")
}

// signingString is what Adyen signs for the item: its signed fields
// joined by ':', unescaped.
func (it adyenItem) signingString() string { return strings.Join(it.signed[:], ":") }

// verifyAdyen checks every item's hmacSignature.
func (s settings) verifyAdyen(keys [][]byte, body []byte) error {
	items, err := adyenItems(body)
	if err != nil {
		return s.fail("", ErrMalformedBody, err.Error())
	}
	for i, it := range items {
		if it.signature == "" {
			return s.fail("", ErrMalformedBody, fmt.Sprintf("notificationItems[%d]: no additionalData.hmacSignature (enable HMAC signing on the webhook in Adyen's Customer Area)", i))
		}
		sig, err := base64.StdEncoding.DecodeString(it.signature)
		if err != nil || len(sig) != sha256.Size {
			return s.fail("", ErrMalformedBody, fmt.Sprintf("notificationItems[%d]: additionalData.hmacSignature: want the base64 of an HMAC-SHA256", i))
		}
		data := []byte(it.signingString())
		matched := false
		for _, k := range keys {
			matched = matched || hmac.Equal(hmacSHA256(k, data), sig)
		}
		if !matched {
			return s.fail("", ErrNoMatchingSignature, fmt.Sprintf("notificationItems[%d]: additionalData.hmacSignature", i))
		}
	}
	return nil
}

// adyenKey returns "<pspReference>:<eventCode>:<success>" for a body of one
// item, else "".
func adyenKey(body []byte) string {
	items, err := adyenItems(body)
	if err != nil || len(items) != 1 {
		return ""
	}
	psp, code, success := items[0].signed[0], items[0].signed[6], items[0].signed[7]
	if psp == "" || code == "" {
		return ""
	}
	return psp + ":" + code + ":" + success
}
