package canonjson

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzCanonical checks appendCanonicalJSON's invariants on any input. It
// must not panic, and it must leave dst untouched on failure. Its JSON
// output must be its own canonical form. It must accept every body that
// encoding/json accepts, because the two grammars agree on valid UTF-8 and
// both nest at most 10,000 levels.
func FuzzCanonical(f *testing.F) {
	for _, v := range loadGuardVectors(f) {
		f.Add([]byte(v.Body))
	}
	for _, tt := range canonicalTests {
		f.Add([]byte(tt.give))
	}
	f.Add([]byte(webhookBody))
	f.Fuzz(func(t *testing.T, src []byte) {
		prefix := []byte("dst")
		out, ok := appendCanonicalJSON(prefix, src)
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("dst prefix lost: %q", out)
		}
		if !ok {
			if len(out) != len(prefix) {
				t.Fatalf("reported false but dst grew to %q", out)
			}
			if json.Valid(src) && utf8.Valid(src) {
				t.Fatalf("rejected valid JSON %q", src)
			}
			return
		}
		canon := out[len(prefix):]
		if !json.Valid(canon) {
			t.Fatalf("output %q of %q is not valid JSON", canon, src)
		}
		if !utf8.Valid(canon) {
			t.Fatalf("output %q of %q is not valid UTF-8", canon, src)
		}
		again, ok := appendCanonicalJSON(nil, canon)
		if !ok || !bytes.Equal(again, canon) {
			t.Fatalf("not idempotent: %q -> %q -> %q (ok %v)", src, canon, again, ok)
		}
	})
}
