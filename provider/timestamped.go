package provider

import (
	"encoding/hex"
	"net/http"
	"strings"
)

// timestampedHeader is the shape of a signature header made of key=value
// items, one timestamp and one or more hex signatures. Items of other
// schemes are skipped, so that a downgrade to a weaker scheme is
// impossible. Stripe ("t=<unix>,v1=<hex>"), Paddle ("ts=<unix>;h1=<hex>")
// and Mercado Pago ("ts=<ts>,v1=<hex>") sign this way.
type timestampedHeader struct {
	name   string // the header, e.g. "Stripe-Signature"
	format string // the expected value, for the error of a malformed one
	sep    string // between items: "," or ";"
	tsKey  string // the key of the timestamp, e.g. "t"
	sigKey string // the key of a signature, e.g. "v1"
	// spaced allows spaces around the keys and values of items, not only
	// around items.
	spaced bool
}

// parse splits a value of the header into its timestamp and its decoded
// signatures. An empty value is ErrMissingHeader. ErrMalformedHeader is an
// item without "=", a repeated or non-numeric timestamp, a signature that
// isn't non-empty hex, or a value with no timestamp or no signature.
func (h timestampedHeader) parse(v string) (ts string, sigs [][]byte, err error) {
	if strings.TrimSpace(v) == "" {
		return "", nil, ErrMissingHeader
	}
	for item := range strings.SplitSeq(v, h.sep) {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return "", nil, ErrMalformedHeader
		}
		if h.spaced {
			k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		}
		switch k {
		case h.tsKey:
			if _, ok := parseUnix(val); !ok || ts != "" {
				return "", nil, ErrMalformedHeader
			}
			ts = val
		case h.sigKey:
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

// verifyBodyHMAC is the check of Stripe and Paddle: the header h of r must
// carry a timestamp within the tolerance and a signature equal to
// HMAC-SHA256(one of keys, "<timestamp><sep><raw body>").
func (s settings) verifyBodyHMAC(h timestampedHeader, keys [][]byte, sep string, r *http.Request, body []byte) error {
	ts, sigs, err := h.parse(r.Header.Get(h.name))
	if err != nil {
		return s.fail(h.name, err, headerDetail(err, h.format))
	}
	signed, _ := parseUnix(ts)
	if err := s.checkAge(h.name, signed); err != nil {
		return err
	}
	if !anyMAC(keys, sigs, func(k []byte) []byte { return hmacSHA256(k, []byte(ts), []byte(sep), body) }) {
		return s.fail(h.name, ErrNoMatchingSignature, "")
	}
	return nil
}
