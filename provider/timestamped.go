package provider

import (
	"encoding/hex"
	"strings"
)

// timestampedHeader is the shape of a signature header made of key=value
// items, at most one timestamp and one or more signatures. Items of other
// schemes are skipped, so that a downgrade to a weaker scheme is
// impossible. Stripe ("t=<unix>,v1=<hex>"), Paddle ("ts=<unix>;h1=<hex>")
// and Mercado Pago ("ts=<ts>,v1=<hex>") sign this way, and so does
// Standard Webhooks ("v1,<base64> v1,<base64>": items separated by spaces,
// "," between key and value, no timestamp). A provider [Spec] with
// signature format "pairs" is read by the same parser.
type timestampedHeader struct {
	name   string // the header, e.g. "Stripe-Signature"
	format string // the expected value, for the error of a malformed one
	sep    string // between items: "," or ";"; " " splits at any run of white space
	assign string // between an item's key and value; default "="
	tsKey  string // the key of the timestamp, e.g. "t"; "" when the header carries none
	sigKey string // the key of a signature, e.g. "v1"
	// spaced allows spaces around the keys and values of items, not only
	// around items.
	spaced bool
	// decode decodes a signature; default hex (either case).
	decode func(string) ([]byte, error)
	// validTS reports whether a timestamp is well formed; default
	// parseUnix.
	validTS func(string) bool
}

// items splits v into its items.
func (h timestampedHeader) items(v string) []string {
	if h.sep == " " {
		return strings.Fields(v)
	}
	return strings.Split(v, h.sep)
}

// parse splits a value of the header into its timestamp and its decoded
// signatures. An empty value is ErrMissingHeader. ErrMalformedHeader is an
// item without "=", a repeated or malformed timestamp, a signature that
// doesn't decode to at least one byte, or a value with no signature or,
// when the header carries one, no timestamp.
func (h timestampedHeader) parse(v string) (ts string, sigs [][]byte, err error) {
	if strings.TrimSpace(v) == "" {
		return "", nil, ErrMissingHeader
	}
	assign, decode, validTS := h.assign, h.decode, h.validTS
	if assign == "" {
		assign = "="
	}
	if decode == nil {
		decode = hex.DecodeString
	}
	if validTS == nil {
		validTS = func(v string) bool { _, ok := parseUnix(v); return ok }
	}
	for _, item := range h.items(v) {
		k, val, ok := strings.Cut(strings.TrimSpace(item), assign)
		if !ok {
			return "", nil, ErrMalformedHeader
		}
		if h.spaced {
			k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		}
		switch {
		case k == h.tsKey && h.tsKey != "":
			if !validTS(val) || ts != "" {
				return "", nil, ErrMalformedHeader
			}
			ts = val
		case k == h.sigKey:
			sig, err := decode(val)
			if err != nil || len(sig) == 0 {
				return "", nil, ErrMalformedHeader
			}
			sigs = append(sigs, sig)
		}
	}
	if (ts == "" && h.tsKey != "") || len(sigs) == 0 {
		return "", nil, ErrMalformedHeader
	}
	return ts, sigs, nil
}
