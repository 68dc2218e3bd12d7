package idemhook

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
)

// DefaultHeader is the request header a route takes its key from by default.
const DefaultHeader = "idempotency-key"

// maxKeyLen is the longest header or preset key used verbatim.
const maxKeyLen = 128

// StoreKey returns the key a record is stored under: "idem:<source>:<key>".
func StoreKey(source, key string) string {
	return "idem:" + source + ":" + key
}

// BodyKey returns the body-hash key of a request body: "sha256:" and the hex
// SHA-256 of the body's compact JSON form when the body is JSON (the text
// Node.js's JSON.stringify(JSON.parse(body)) gives), or of the raw bytes
// otherwise. It is the key the NestJS guard produced for the same body.
func BodyKey(body []byte) string {
	sum := canonicalSum(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NormalizeKey turns a header or preset value into a key part: surrounding
// spaces and tabs are trimmed; an RFC 8941 string ("abc") is unquoted; a value longer than 128 bytes, or holding bytes
// outside printable ASCII, becomes "sha256:<hex of the value>". Empty input
// gives "".
func NormalizeKey(v string) string {
	// Optional whitespace of a field value (RFC 9110 5.6.3) is SP and HTAB
	// only; another Unicode space is part of the value.
	v = strings.Trim(v, " \t")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		if s, ok := unquoteSFString(v); ok {
			v = s
		}
	}
	if v == "" {
		return ""
	}
	if len(v) > maxKeyLen || !printableASCII(v) {
		sum := sha256.Sum256([]byte(v))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return v
}

// unquoteSFString decodes an RFC 8941 sf-string: printable ASCII between
// double quotes, where only \" and \\ are escapes.
func unquoteSFString(v string) (string, bool) {
	inner := v[1 : len(v)-1]
	if !strings.ContainsAny(inner, `"\`) {
		return inner, printableASCII(inner)
	}
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			i++
			if i == len(inner) || (inner[i] != '"' && inner[i] != '\\') {
				return "", false
			}
			b.WriteByte(inner[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// headerValue returns the request header's value as Node.js presents it to
// the NestJS guard: several fields of one name joined with ", ".
func headerValue(h http.Header, name string) string {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ", ")
}

func sortedHeaderNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
