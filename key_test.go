package idemhook

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The sha256 literals below were computed independently with sha256sum.
func TestNormalizeKey(t *testing.T) {
	a128 := strings.Repeat("a", 128)
	a129 := strings.Repeat("a", 129)
	const hashA129 = "sha256:c12cb024a2e5551cca0e08fce8f1c5e314555cc3fef6329ee994a3db752166ae"
	tests := []struct {
		name string
		give string
		want string
	}{
		{"empty", "", ""},
		{"only spaces", " \t ", ""},
		{"plain", "evt_123", "evt_123"},
		{"trimmed", "  evt_123 \t", "evt_123"},
		{"sf-string", `"evt_123"`, "evt_123"},
		{"sf-string trimmed first", `  "evt_123"  `, "evt_123"},
		{"sf-string escaped quote", `"a\"b"`, `a"b`},
		{"sf-string escaped backslash", `"a\\b"`, `a\b`},
		{"empty sf-string", `""`, ""},
		{"bad escape kept verbatim", `"a\x"`, `"a\x"`},
		{"trailing backslash kept verbatim", `"a\"`, `"a\"`},
		{"bare inner quote kept verbatim", `"a"b"`, `"a"b"`},
		{"lone quote", `"`, `"`},
		{"quote on one side only", `"abc`, `"abc`},
		{"inner space kept", "a b", "a b"},
		{"128 bytes verbatim", a128, a128},
		{"129 bytes hashed", a129, hashA129},
		{"129 bytes after unquoting hashed", `"` + a129 + `"`, hashA129},
		{"128 bytes after unquoting verbatim", `"` + a128 + `"`, a128},
		{"non-ASCII hashed", "é", "sha256:4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c"},
		{"inner tab hashed", "a\tb", "sha256:894891f8b78a9945b0aa07e70d5f71f10b1f1990af127de561cc0ac36024c188"},
		{"quoted non-ASCII hashed with its quotes", `"é"`, "sha256:f2886017e9c7abacf804b54d64787dce2b611c9544ba21f3affdd126a6e50086"},
		{"quoted control hashed with its quotes", "\"a\x01\"", "sha256:c9d2383066aab673c265d5a4d2cd636c9052859fdffb0f253683f003d01d9cc7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NormalizeKey(tt.give); got != tt.want {
				t.Errorf("NormalizeKey(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

func TestNormalizeKeyHashesTheValue(t *testing.T) {
	// The hash covers the trimmed, unquoted value, so the same key sent
	// quoted or bare maps to one record.
	v := strings.Repeat("k", 200)
	sum := sha256.Sum256([]byte(v))
	want := "sha256:" + hex.EncodeToString(sum[:])
	for _, give := range []string{v, " " + v + " ", `"` + v + `"`} {
		if got := NormalizeKey(give); got != want {
			t.Errorf("NormalizeKey(%.20q...) = %s, want %s", give, got, want)
		}
	}
}

func TestStoreKey(t *testing.T) {
	tests := []struct {
		source, key string
		want        string
	}{
		{"stone", "evt_1", "idem:stone:evt_1"},
		{"stone", "sha256:ab12", "idem:stone:sha256:ab12"},
		{"", "", "idem::"},
	}
	for _, tt := range tests {
		if got := StoreKey(tt.source, tt.key); got != tt.want {
			t.Errorf("StoreKey(%q, %q) = %q, want %q", tt.source, tt.key, got, tt.want)
		}
	}
}

// DefaultScope names the route and the values of its wildcards, whatever
// the spelling of the path: the requests are built as a router leaves them
// (Request.Pattern and the path values set, the path as sent).
func TestDefaultScope(t *testing.T) {
	type values map[string]string
	tests := []struct {
		name    string
		pattern string
		values  values
		path    string // as sent, escaped
		want    string
	}{
		{"fixed pattern", "POST /webhooks/stone", nil, "/webhooks/stone", ""},
		{"fixed, exact subtree", "/exact/{$}", nil, "/exact/", ""},
		{"fixed, host and method", "POST example.com/hooks", nil, "/hooks", ""},
		{"wildcard", "POST /t/{tenant}/orders", values{"tenant": "acme"}, "/t/acme/orders", "/t/acme/orders"},
		{"wildcard, trailing slash (StripSlashes)", "/t/{tenant}/orders", values{"tenant": "acme"}, "/t/acme/orders/", "/t/acme/orders"},
		{"wildcard, percent-encoded letter", "/t/{tenant}/orders", values{"tenant": "acme"}, "/t/%61cme/orders", "/t/acme/orders"},
		{"wildcard, doubled slash", "/t/{tenant}/orders", values{"tenant": "acme"}, "/t//acme/orders", "/t/acme/orders"},
		{"wildcard, escaped value (chi)", "/t/{tenant}/orders", values{"tenant": "%61cme"}, "/t/%61cme/orders", "/t/acme/orders"},
		{"wildcard holding a slash", "/t/{tenant}/orders", values{"tenant": "a/b"}, "/t/a%2Fb/orders", "/t/a%2Fb/orders"},
		{"two wildcards, a slash in the first", "/x/{a}/{b}", values{"a": "p/q", "b": "r"}, "/x/p%2Fq/r", "/x/p%2Fq/r"},
		{"two wildcards, a slash in the second", "/x/{a}/{b}", values{"a": "p", "b": "q/r"}, "/x/p/q%2Fr", "/x/p/q%2Fr"},
		{"two wildcards, escaped values (chi)", "/x/{a}/{b}", values{"a": "p", "b": "q%2Fr"}, "/x/p/q%2Fr", "/x/p/q%2Fr"},
		{"wildcard, non-ASCII and space", "/t/{tenant}", values{"tenant": "são paulo"}, "/t/s%C3%A3o%20paulo", "/t/s%C3%A3o%20paulo"},
		{"wildcard, sub-delims kept", "/t/{tenant}", values{"tenant": "a!b$c"}, "/t/a!b$c", "/t/a!b$c"},
		{"chi regexp wildcard", "/t/{id:[0-9]+}", values{"id": "42"}, "/t/42/", "/t/42"},
		{"ServeMux catch-all", "/files/{rest...}", values{"rest": "a/b/"}, "/files/a/b/", "/files/a/b"},
		{"ServeMux catch-all, empty", "/files/{rest...}", values{"rest": ""}, "/files/", "/files/"},
		{"chi catch-all", "/files/*", values{"*": "a//b"}, "/files/a//b", "/files/a/b"},
		{"subtree", "POST /t/", nil, "/t/acme", "/t/acme"},
		{"subtree, trailing slash", "/t/", nil, "/t/acme/", "/t/acme"},
		{"subtree, percent-encoded letter", "/t/", nil, "/t/%61cme", "/t/acme"},
		{"subtree, its own path", "/t/", nil, "/t/", "/t/"},
		{"subtree after a wildcard", "/t/{tenant}/", values{"tenant": "acme"}, "/t/acme/x/y/", "/t/acme/x/y"},
		{"subtree after a wildcard, clean path", "/t/{tenant}/", values{"tenant": "acme"}, "/t/acme/x/y", "/t/acme/x/y"},
		{"subtree, path shorter than the prefix", "/t/", nil, "/t", "/t/"},
		{"no value for a wildcard: the path", "/t/{tenant}/orders", nil, "/t/acme/orders/", "/t/acme/orders"},
		{"wildcard inside a segment: the path", "/t/x-{id}", values{"id": "1"}, "/t/x-1/", "/t/x-1"},
		{"no pattern: the path", "", nil, "/t/acme/orders", "/t/acme/orders"},
		{"no pattern, trailing slash", "", nil, "/t/acme/orders/", "/t/acme/orders"},
		{"no pattern, dot segments", "", nil, "/t/./x/../acme//orders", "/t/acme/orders"},
		{"no pattern, encoded dot segment", "", nil, "/t/%2E%2E/acme", "/acme"},
		{"no pattern, encoded slash kept", "", nil, "/t/a%2Fb", "/t/a%2Fb"},
		{"no pattern, lower-case escapes", "", nil, "/t/s%c3%a3o", "/t/s%C3%A3o"},
		{"no pattern, root", "", nil, "/", "/"},
		{"no pattern, clean with sub-delims", "", nil, "/t/a!b/c@d", "/t/a!b/c@d"},
		{"no pattern, a dot inside a segment", "", nil, "/t/a.b/..c", "/t/a.b/..c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPost, "http://example.com"+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Pattern = tt.pattern
			for k, v := range tt.values {
				r.SetPathValue(k, v)
			}
			if got := DefaultScope(r); got != tt.want {
				t.Errorf("DefaultScope(pattern %q, path %q) = %q, want %q", tt.pattern, tt.path, got, tt.want)
			}
		})
	}
}

// The sha256 literals below were computed independently with sha256sum over
// the text named in each case.
func TestBodyKey(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"JSON hashed in compact form", `{"a": 1}`, "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"}, // {"a":1}
		{"compact JSON hashed as is", `{"a":1}`, "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"},
		{"non-JSON hashed raw", "not json {", "sha256:c3f07c17117dc1953b6b514cc4e816c00a33fb6cbbe66cbb31e5e22cd1a05fd0"},
		{"empty body hashed raw", "", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"BOM-prefixed JSON hashed raw", "\xef\xbb\xbf{}", "sha256:aa25e978046d680ef8740d837e6de5bc1e2a2dc6089dbda1012544b538d53f65"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BodyKey([]byte(tt.give)); got != tt.want {
				t.Errorf("BodyKey(%q) = %s, want %s", tt.give, got, tt.want)
			}
		})
	}
}

func TestBodyKeyRawFallbackDiffersFromJSON(t *testing.T) {
	// A non-JSON body that happens to be a prefix of JSON must not share
	// the JSON form's key, and whitespace changes it (raw bytes).
	if BodyKey([]byte(`{"a":1`)) == BodyKey([]byte(`{"a":1}`)) {
		t.Error("truncated JSON got the key of the complete body")
	}
	if BodyKey([]byte("not json")) == BodyKey([]byte("not  json")) {
		t.Error("raw fallback ignored a byte difference")
	}
}

func TestKeyHeaderValue(t *testing.T) {
	h := http.Header{}
	if got := headerValue(h, "Idempotency-Key"); got != "" {
		t.Errorf("absent header = %q, want empty", got)
	}
	h.Add("Idempotency-Key", "a")
	if got := headerValue(h, "idempotency-key"); got != "a" {
		t.Errorf("one field = %q, want a", got)
	}
	h.Add("Idempotency-Key", "b")
	if got := headerValue(h, "Idempotency-Key"); got != "a, b" {
		t.Errorf("two fields = %q, want %q (Node's join)", got, "a, b")
	}
	h.Set("X-Other", "1")
	if got, want := sortedHeaderNames(h), []string{"Idempotency-Key", "X-Other"}; !slices.Equal(got, want) {
		t.Errorf("sortedHeaderNames = %v, want %v", got, want)
	}
}

// FuzzNormalizeKey: whatever a sender puts in the key header, the key part
// is either empty, or printable ASCII of at most 128 bytes, or the hash form.
func FuzzNormalizeKey(f *testing.F) {
	for _, s := range []string{"", "abc", `"abc"`, `"a\"b"`, " evt_1 ", "t=1,v1=ab", "\x00", "é", strings.Repeat("k", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := NormalizeKey(v)
		if got != NormalizeKey(v) {
			t.Fatal("not deterministic")
		}
		if got == "" {
			return
		}
		if len(got) <= maxKeyLen && printableASCII(got) {
			return
		}
		t.Fatalf("NormalizeKey(%q) = %q: neither a printable key of <= %d bytes nor a hash", v, got, maxKeyLen)
	})
}

// Header values are trimmed of optional whitespace (space, tab) only: a
// value ending in another Unicode space is another key. Before,
// strings.TrimSpace made "abc\u00a0" the key "abc".
func TestNormalizeKeyTrimsOnlySpaceAndTab(t *testing.T) {
	tests := []struct{ give, want string }{
		{" \tabc\t ", "abc"},
		{` "abc" `, "abc"},
	}
	for _, tt := range tests {
		if got := NormalizeKey(tt.give); got != tt.want {
			t.Errorf("NormalizeKey(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
	for _, v := range []string{"abc\u00a0", "\u3000abc", "abc\u2003", "abc\u0085"} {
		if got := NormalizeKey(v); got == "abc" || !strings.HasPrefix(got, "sha256:") {
			t.Errorf("NormalizeKey(%q) = %q, want the hash of the whole value", v, got)
		}
	}
}
