package idemhook

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemhook/idemhook/internal/canonjson"
)

// DefaultHeader is the request header a route takes its key from by default.
const DefaultHeader = "idempotency-key"

// maxKeyLen is the longest header or preset key used verbatim.
const maxKeyLen = 128

// StoreKey returns the key a record of an unscoped route is stored under:
// "idem:<source>:<key>", the NestJS guard's.
func StoreKey(source, key string) string {
	return "idem:" + source + ":" + key
}

// ScopedStoreKey returns the key a record is stored under:
// "idem:<source>@<scope>:<key>", or [StoreKey] when scope is empty. The
// scope is as [DeliveryInfo.Scope] reports it (escaped, holding no ':'), so
// source, scope and key can be told apart: the source holds no '@' or ':',
// the scope no ':'.
func ScopedStoreKey(source, scope, key string) string {
	if scope == "" {
		return StoreKey(source, key)
	}
	return "idem:" + source + "@" + scope + ":" + key
}

func storeKeyLen(source, scope string, keyLen int) int {
	n := len("idem:") + len(source) + len(":") + keyLen
	if scope != "" {
		n += len("@") + len(scope)
	}
	return n
}

// appendStoreKeyPrefix appends the store key up to the key part.
func appendStoreKeyPrefix(b []byte, source, scope string) []byte {
	b = append(append(b, "idem:"...), source...)
	if scope != "" {
		b = append(append(b, '@'), scope...)
	}
	return append(b, ':')
}

// DefaultScope is the scope of a route that sets no Route.Scope: "" (the
// guard's unscoped key) when the route's pattern matches one path only, else
// the route and the values of its parameters, written as a canonical path.
//
// A pattern can match several paths when it holds a wildcard ({name} or
// {name...} of net/http.ServeMux, {name}, {name:regexp} or * of chi) or
// ends in / (a ServeMux subtree; "/x/{$}" is exact). Its scope is the
// pattern with each wildcard replaced by the request's value for it
// ([http.Request.PathValue], which ServeMux and chi since v5.0.12 set), and a
// subtree's prefix followed by the rest of the path: POST /t/{tenant}/orders
// scopes a delivery for tenant acme as "/t/acme/orders".
//
// The scope names what the router matched, not how the path was spelled:
// "/t/acme/orders/" (behind chi's middleware.StripSlashes, or any router
// that treats /x and /x/ alike), "/t/%61cme/orders" and, below a subtree or
// where no pattern is known, "/t//acme/./orders" all scope as
// "/t/acme/orders". So a signed delivery re-sent with another spelling of
// its path is a duplicate, never a new event. Values and segments are
// percent-decoded, then encoded again the one same way: a "/" inside a
// value stays %2F, so "/x/{a}/{b}" keeps a="p/q", b="r" apart from a="p",
// b="q/r". A value may come decoded (ServeMux) or as sent (chi, which
// routes on the escaped path when the request has one): either way it
// names one scope, at the cost of taking a value's literal "%41" for "A".
//
// When Request.Pattern is empty the router is unknown (gorilla/mux, gin,
// chi before v5.2.2, or no router), so the path may vary: the scope is the
// request's path, cleaned the same way (empty segments and "." dropped,
// ".." resolved, a trailing slash dropped). So is the scope of a pattern
// whose wildcards have no value in the request (a router that records a
// pattern but not its values) or share a segment with text (chi's
// "/x-{id}").
func DefaultScope(r *http.Request) string {
	p := r.Pattern
	if p == "" {
		return cleanPath(r.URL.EscapedPath())
	}
	// A ServeMux pattern is "[METHOD ][HOST]/PATH".
	i := strings.IndexByte(p, '/')
	if i < 0 {
		return cleanPath(r.URL.EscapedPath())
	}
	p = p[i:]
	exact := strings.HasSuffix(p, "{$}")
	p = strings.TrimSuffix(p, "{$}")
	if !strings.ContainsAny(p, "{*") && (exact || !strings.HasSuffix(p, "/")) {
		return ""
	}
	if s, ok := patternScope(p, exact, r); ok {
		return s
	}
	return cleanPath(r.URL.EscapedPath())
}

// patternScope writes pattern p (a path, from its leading '/'; exact when
// it ended in {$}) with the request's value for each wildcard, and for a
// subtree the rest of the request's path. It reports false when a value
// can't be placed: a wildcard with no value, or one inside a segment.
func patternScope(p string, exact bool, r *http.Request) (string, bool) {
	var b strings.Builder
	b.Grow(len(r.URL.Path) + 8)
	rest := p[1:]
	for n := 0; ; n++ {
		seg, tail, more := strings.Cut(rest, "/")
		rest = tail
		switch {
		case !more && seg == "": // the pattern ends in '/'
			b.WriteByte('/')
			if !exact { // a subtree: its rest is the path's segments after the pattern's n
				path := r.URL.EscapedPath()
				if isCleanPath(path) { // the rest as it is: after the path's first n segments
					rest := path
					for range n + 1 {
						_, rest, _ = strings.Cut(rest, "/")
					}
					b.WriteString(rest)
					return b.String(), true
				}
				segs := pathSegments(path)
				if len(segs) < n {
					return "", false
				}
				b.WriteString(strings.Join(segs[n:], "/"))
			}
			return b.String(), true
		case seg == "*" || strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}"):
			// chi's catch-all, ServeMux's {name...}: the rest of the path,
			// as a value, so written segment by segment.
			name := "*"
			if seg != "*" {
				name = seg[1 : len(seg)-len("...}")]
			}
			b.WriteByte('/')
			first := true
			for v := range strings.SplitSeq(r.PathValue(name), "/") {
				if v == "" || v == "." {
					continue
				}
				if !first {
					b.WriteByte('/')
				}
				first = false
				b.WriteString(canonicalSegment(v))
			}
			return b.String(), true
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") && strings.Count(seg, "{") == 1:
			name := seg[1 : len(seg)-1]
			if j := strings.IndexByte(name, ':'); j >= 0 { // chi's {name:regexp}
				name = name[:j]
			}
			v := r.PathValue(name)
			if v == "" {
				return "", false
			}
			b.WriteByte('/')
			b.WriteString(canonicalSegment(v))
		case strings.ContainsAny(seg, "{*"):
			return "", false
		default:
			b.WriteByte('/')
			b.WriteString(canonicalSegment(seg))
		}
		if !more {
			return b.String(), true
		}
	}
}

// cleanPath is the canonical form of an escaped path: its segments as
// [pathSegments] gives them, each with a leading '/'; "/" for a path with
// none, "" for an empty path.
func cleanPath(p string) string {
	if p == "" || isCleanPath(p) {
		return p // as most paths are: no allocation
	}
	return "/" + strings.Join(pathSegments(p), "/")
}

// isCleanPath reports whether p is in cleanPath's form already: "/", or
// segments after a '/' each, none empty, "." or "..", holding only bytes
// that escapeSegment keeps (so no escape either).
func isCleanPath(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if !isPchar(p[i]) {
				return false
			}
			continue
		}
		if seg := p[start:i]; seg == "" || seg == "." || seg == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// pathSegments splits an escaped path into canonical segments
// ([canonicalSegment]), dropping empty and "." segments and resolving "..",
// as path.Clean does.
func pathSegments(p string) []string {
	segs := make([]string, 0, strings.Count(p, "/"))
	for seg := range strings.SplitSeq(p, "/") {
		switch seg = canonicalSegment(seg); seg {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, seg)
		}
	}
	return segs
}

// canonicalSegment is one escaped path segment percent-decoded, then
// encoded again by [escapeSegment], so that every spelling of a segment
// ("acme", "%61cme", "%61%63me") has one form. A segment whose escapes are
// invalid is kept as it is.
func canonicalSegment(seg string) string {
	if strings.IndexByte(seg, '%') < 0 {
		return escapeSegment(seg)
	}
	v, err := url.PathUnescape(seg)
	if err != nil {
		return seg
	}
	return escapeSegment(v)
}

// escapeSegment percent-encodes a decoded path segment: every byte but
// RFC 3986's pchar (unreserved, sub-delims, ':' and '@') becomes %XX, so
// '/', '%', '?', '#', spaces and non-ASCII bytes are escaped and the
// segment can be told apart from its neighbours.
func escapeSegment(v string) string {
	n := 0
	for i := 0; i < len(v); i++ {
		if !isPchar(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(v)+2*n)
	for i := 0; i < len(v); i++ {
		if c := v[i]; isPchar(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return string(b)
}

func isPchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0
}

// maxScopeLen is the longest scope kept verbatim in a store key.
const maxScopeLen = 128

// escapeScope makes a scope part of a store key: '%', ':' and bytes outside
// printable ASCII (and space) become %XX, so the scope holds no ':'; a
// result longer than 128 bytes becomes "sha256-<hex of the scope>".
func escapeScope(v string) string {
	clean := true
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == ':' || c == '%' {
			clean = false
			break
		}
	}
	if !clean {
		const hexDigits = "0123456789ABCDEF"
		b := make([]byte, 0, len(v)+8)
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c > '~' || c == ':' || c == '%' {
				b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			} else {
				b = append(b, c)
			}
		}
		v = string(b)
	}
	if len(v) > maxScopeLen {
		sum := sha256.Sum256([]byte(v))
		return "sha256-" + hex.EncodeToString(sum[:])
	}
	return v
}

// requestSum is the hash behind a body-hash key: the SHA-256 of the body's
// canonical form, and when the request has a query string, the SHA-256 of
// that hash followed by "?" and the raw query, so that events sent as
// ?topic=payment&id=123 with one body are distinct while a request with no
// query keeps the guard's key.
func requestSum(body []byte, rawQuery string) [sha256.Size]byte {
	sum := canonjson.Sum(body)
	if rawQuery == "" {
		return sum
	}
	h := sha256.New()
	h.Write(sum[:])
	h.Write([]byte{'?'})
	h.Write([]byte(rawQuery))
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// BodyKey returns the body-hash key of a request body with no query string:
// "sha256:" and the hex SHA-256 of the body's compact JSON form when the body
// is JSON (the text Node.js's JSON.stringify(JSON.parse(body)) gives), or of
// the raw bytes otherwise. It is the key the NestJS guard produced for the
// same body.
func BodyKey(body []byte) string {
	return RequestKey(body, "")
}

// RequestKey returns the body-hash key of a request with the given body and
// raw query string: [BodyKey] when rawQuery is empty, else "sha256:" and the
// hex SHA-256 of the body's hash followed by "?" and rawQuery. It finds the
// record of an event sent with a query string (?topic=payment&id=123) in a
// store or through the gateway's admin API, as BodyKey does for the others.
func RequestKey(body []byte, rawQuery string) string {
	sum := requestSum(body, rawQuery)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NormalizeKey turns a header or preset value into a key part. Surrounding
// spaces and tabs are trimmed. An RFC 8941 string ("abc") is unquoted. A
// value longer than 128 bytes, or holding bytes outside printable ASCII,
// becomes "sha256:<hex of the value>". Empty input gives "".
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
	return joinFieldValues(h.Values(name))
}

// joinFieldValues joins the values of several fields of one name with ", ",
// as Node.js does.
func joinFieldValues(vs []string) string {
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ", ")
}

func sortedHeaderNames(h http.Header) []string {
	return appendSortedHeaderNames(make([]string, 0, len(h)), h)
}

// appendSortedHeaderNames appends the names of h to names, sorted.
func appendSortedHeaderNames(names []string, h http.Header) []string {
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
