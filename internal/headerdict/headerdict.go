// Package headerdict is the dictionary of header names and values that
// idemhook's record encodings write as one byte: version 2 of the binary
// encoding that the SQLite, PostgreSQL and Redis stores persist, and
// memstore's own.
//
// A string in a header entry is written as a token: a uvarint t followed,
// when t is odd, by the (t-1)/2 bytes of the string; an even t stands for
// the dictionary's string t/2. An encoder writes a string that is in the
// dictionary as its even token, so that equal records give equal bytes.
//
// Records written with it are stored for as long as their TTL, by versions
// that may be older or newer than the one reading them: the dictionary only
// grows at its end, and never holds more than 64 strings, so that each of
// its tokens is one byte.
package headerdict

import "encoding/binary"

// Strings is the dictionary. Index i is written as token 2i.
var Strings = [...]string{
	// Names (canonical form, as http.Header holds them).
	"Content-Type",
	"Content-Encoding",
	"Content-Language",
	"Content-Range",
	"Content-Disposition",
	"Cache-Control",
	"Etag",
	"Last-Modified",
	"Location",
	"Retry-After",
	"Set-Cookie",
	"Vary",
	"X-Request-Id",
	// Values.
	"application/json",
	"application/json; charset=utf-8",
	"application/json;charset=utf-8",
	"application/problem+json",
	"application/xml",
	"application/octet-stream",
	"text/plain",
	"text/plain; charset=utf-8",
	"text/html",
	"text/html; charset=utf-8",
	"text/xml; charset=utf-8",
	"gzip",
	"br",
	"deflate",
	"zstd",
	"identity",
	"en",
	"en-US",
	"no-cache",
	"no-store",
	"private",
	"Accept-Encoding",
	"Origin",
}

// Every token of the dictionary fits in one byte.
var _ = [1]struct{}{}[len(Strings)/64]

// byLen lists the dictionary's indexes by string length: a lookup compares
// s with the few strings of its length (at most four), which costs less
// than hashing it.
var byLen = func() (t [maxLen + 1][]byte) {
	seen := make(map[string]bool, len(Strings))
	for i, s := range Strings {
		if seen[s] {
			panic("headerdict: " + s + " twice in the dictionary")
		}
		seen[s] = true
		t[len(s)] = append(t[len(s)], byte(i))
	}
	return t
}()

// maxLen is the length of the dictionary's longest string.
const maxLen = len("application/json; charset=utf-8")

func index(s string) (byte, bool) {
	if len(s) > maxLen {
		return 0, false
	}
	for _, i := range byLen[len(s)] {
		if Strings[i] == s {
			return i, true
		}
	}
	return 0, false
}

// AppendToken appends the token of s to b.
func AppendToken(b []byte, s string) []byte {
	if i, ok := index(s); ok {
		return append(b, 2*i)
	}
	b = binary.AppendUvarint(b, 2*uint64(len(s))+1)
	return append(b, s...)
}

// Lookup returns the string of an even token t, and false when t is not one
// of the dictionary's.
func Lookup(t uint64) (string, bool) {
	if t%2 != 0 || t/2 >= uint64(len(Strings)) {
		return "", false
	}
	return Strings[t/2], true
}
