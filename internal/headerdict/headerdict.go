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

// byLen lists the dictionary's indexes by string length, up to the longest:
// a lookup compares s with the few strings of its length (at most four),
// which costs less than hashing it.
var byLen = func() [][]byte {
	var t [][]byte
	seen := make(map[string]bool, len(Strings))
	for i, s := range Strings {
		if s == "" || seen[s] {
			panic("headerdict: " + `"` + s + `"` + " empty or twice in the dictionary")
		}
		seen[s] = true
		for len(t) <= len(s) {
			t = append(t, nil)
		}
		t[len(s)] = append(t[len(s)], byte(i))
	}
	return t
}()

func index(s string) (byte, bool) {
	if len(s) >= len(byLen) {
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

// Token reads token t: a dictionary string s, or, when s is "" (the
// dictionary holds no empty string), a literal whose n bytes follow t. ok is
// false for an even token past the dictionary, which no encoder writes.
func Token(t uint64) (s string, n uint64, ok bool) {
	if t%2 != 0 {
		return "", t / 2, true
	}
	if t/2 >= uint64(len(Strings)) {
		return "", 0, false
	}
	return Strings[t/2], 0, true
}
