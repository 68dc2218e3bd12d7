package headerdict

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	for i, s := range Strings {
		if len(s) > maxLen {
			t.Fatalf("%q is longer than maxLen %d", s, maxLen)
		}
		b := AppendToken(nil, s)
		if len(b) != 1 || b[0] != byte(2*i) {
			t.Errorf("token of %q = %x, want %02x", s, b, 2*i)
		}
		if got, ok := Lookup(uint64(b[0])); !ok || got != s {
			t.Errorf("Lookup(%d) = %q, %v; want %q", b[0], got, ok, s)
		}
	}
	for _, s := range []string{"", "X-Custom", "content-type", "Content-Type ", strings.Repeat("a", maxLen+1)} {
		b := AppendToken(nil, s)
		n, w := binary.Uvarint(b)
		if w <= 0 || n != 2*uint64(len(s))+1 || string(b[w:]) != s {
			t.Errorf("token of %q = %x, want the literal", s, b)
		}
	}
	for _, tok := range []uint64{1, 3, 2 * uint64(len(Strings)), 1 << 40} {
		if s, ok := Lookup(tok); ok {
			t.Errorf("Lookup(%d) = %q, want none", tok, s)
		}
	}
}

func BenchmarkAppendToken(b *testing.B) {
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = AppendToken(buf[:0], "Content-Type")
		buf = AppendToken(buf, "application/json")
		buf = AppendToken(buf, "X-Custom-Header")
	}
}
