package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
)

// The reasons a Verify fails. A [*VerifyError] wraps exactly one of them, so
// callers can tell them apart with errors.Is.
var (
	// ErrMissingHeader: a header the scheme needs is absent or empty.
	ErrMissingHeader = errors.New("missing header")
	// ErrMalformedHeader: a header is present but cannot be parsed.
	ErrMalformedHeader = errors.New("malformed header")
	// ErrTimestampOutOfTolerance: the signed timestamp is too old or too far
	// in the future.
	ErrTimestampOutOfTolerance = errors.New("timestamp outside tolerance")
	// ErrNoMatchingSignature: no signature in the request matches any
	// configured secret.
	ErrNoMatchingSignature = errors.New("no matching signature")
	// ErrTokenMismatch: a static token header does not equal any configured
	// token.
	ErrTokenMismatch = errors.New("token does not match")
	// ErrMalformedBody: the body cannot carry a signature (Stone's JWE).
	ErrMalformedBody = errors.New("malformed body")
	// ErrUnsignedTimestamp: the timestamp whose age is checked is not
	// covered by what the signature signs (a provider Spec whose signed
	// template left out the part holding it), so its age proves nothing.
	ErrUnsignedTimestamp = errors.New("timestamp not signed")
)

// VerifyError is the error a preset's Verify returns. Its text, e.g.
// `stripe: header Stripe-Signature: timestamp outside tolerance (signed 7m0s
// ago, tolerance 5m0s)`, is safe to send to the caller: it never holds a
// secret or an expected signature.
type VerifyError struct {
	Preset string // the preset's name, e.g. "stripe"
	Header string // the header at fault, e.g. "Stripe-Signature"; "" when the fault is elsewhere
	Err    error  // one of the Err* sentinels of this package
	Detail string // more context, e.g. how old the timestamp is; may be ""
}

// Error describes the failure.
func (e *VerifyError) Error() string {
	msg := e.Preset + ": "
	if e.Header != "" {
		msg += "header " + e.Header + ": "
	}
	msg += e.Err.Error()
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

// Unwrap returns the sentinel reason.
func (e *VerifyError) Unwrap() error { return e.Err }

// fail builds a *VerifyError for the provider s.
func (s settings) fail(header string, reason error, detail string) error {
	return &VerifyError{Preset: s.name, Header: header, Err: reason, Detail: detail}
}

// headerDetail returns the expected format for a malformed header, and
// nothing for a missing one.
func headerDetail(err error, format string) string {
	if err == ErrMalformedHeader {
		return format
	}
	return ""
}

// hmacSHA256 returns HMAC-SHA256(key, parts...).
func hmacSHA256(key []byte, parts ...[]byte) []byte {
	return hmacSum(sha256.New, key, parts...)
}

// hmacSum returns the HMAC of parts with key and the hash newHash.
func hmacSum(newHash func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// parseHexMAC decodes a signature header "<prefix><hex>" carrying one
// HMAC-SHA256 (hex in either case, spaces around the value allowed). It
// reads GitHub's "sha256=<hex>", Slack's "v0=<hex>" and iFood's bare hex
// (prefix ""). An empty value is ErrMissingHeader. A value without the
// prefix, or whose rest isn't the hex of 32 bytes, is ErrMalformedHeader.
func parseHexMAC(v, prefix string) ([]byte, error) {
	return parseMAC(v, prefix, hex.DecodeString, sha256.Size)
}

// parseMAC decodes a signature header "<prefix><encoded signature>" (spaces
// around the value allowed) with decode. An empty value is
// ErrMissingHeader. A value without the prefix, that does not decode, or
// whose decoded length is not size (any non-zero length when size is 0)
// is ErrMalformedHeader.
func parseMAC(v, prefix string, decode func(string) ([]byte, error), size int) ([]byte, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, ErrMissingHeader
	}
	encoded, ok := strings.CutPrefix(v, prefix)
	if !ok {
		return nil, ErrMalformedHeader
	}
	sig, err := decode(encoded)
	if err != nil || len(sig) == 0 || (size != 0 && len(sig) != size) {
		return nil, ErrMalformedHeader
	}
	return sig, nil
}

// anyMAC reports whether one of the candidate MACs equals mac(key) for one of
// the keys. Comparisons are constant-time (hmac.Equal). Only which pair
// matched, never the expected value, could leak through timing.
func anyMAC(keys [][]byte, candidates [][]byte, mac func(key []byte) []byte) bool {
	return matchMAC(keys, candidates, mac) >= 0
}

// matchMAC returns the index of the first key for which one of the
// candidate MACs equals mac(key), or -1. Comparisons are constant-time
// (hmac.Equal).
func matchMAC(keys [][]byte, candidates [][]byte, mac func(key []byte) []byte) int {
	for i, k := range keys {
		want := mac(k)
		for _, c := range candidates {
			if hmac.Equal(want, c) {
				return i
			}
		}
	}
	return -1
}

// anyToken reports whether got equals one of the tokens, in constant time
// with respect to the tokens' contents and lengths. It compares SHA-256
// digests, because subtle.ConstantTimeCompare returns at once on a length
// mismatch and would tell a caller how long a token is.
func anyToken(tokens []string, got string) bool {
	sum := sha256.Sum256([]byte(got))
	found := 0
	for _, t := range tokens {
		want := sha256.Sum256([]byte(t))
		found |= subtle.ConstantTimeCompare(want[:], sum[:])
	}
	return found == 1
}

// parseUnix parses a decimal count of seconds since the Unix epoch, as
// signed by Stripe, Standard Webhooks, Slack and Paddle.
func parseUnix(v string) (time.Time, bool) {
	if v == "" || len(v) > 18 {
		return time.Time{}, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return time.Time{}, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// checkAge returns an ErrTimestampOutOfTolerance error when signed is more
// than s.tolerance away from now, in either direction.
func (s settings) checkAge(header string, signed time.Time) error {
	// Compare instants, not now.Sub(signed). Sub saturates at the minimum
	// Duration for a timestamp centuries ahead, and negating that overflows
	// back to a negative value that would pass a "-age > tolerance" check.
	now := s.now()
	switch {
	case signed.Before(now.Add(-s.tolerance)):
		return s.fail(header, ErrTimestampOutOfTolerance,
			fmt.Sprintf("signed %v ago, tolerance %v", now.Sub(signed).Truncate(time.Second), s.tolerance))
	case signed.After(now.Add(s.tolerance)):
		return s.fail(header, ErrTimestampOutOfTolerance,
			fmt.Sprintf("signed %v in the future, tolerance %v", signed.Sub(now).Truncate(time.Second), s.tolerance))
	}
	return nil
}
