package headerdict

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	longest := 0
	for i, s := range Strings {
		longest = max(longest, len(s))
		b := AppendToken(nil, s)
		if len(b) != 1 || b[0] != byte(2*i) {
			t.Errorf("token of %q = %x, want %02x", s, b, 2*i)
		}
		if got, n, ok := Token(uint64(b[0])); !ok || got != s || n != 0 {
			t.Errorf("Token(%d) = %q, %d, %v; want %q", b[0], got, n, ok, s)
		}
	}
	for _, s := range []string{"", "X-Custom", "content-type", "Content-Type ", strings.Repeat("a", longest+1)} {
		b := AppendToken(nil, s)
		tok, w := binary.Uvarint(b)
		if w <= 0 || tok != 2*uint64(len(s))+1 || string(b[w:]) != s {
			t.Errorf("token of %q = %x, want the literal", s, b)
		}
		if got, n, ok := Token(tok); !ok || got != "" || n != uint64(len(s)) {
			t.Errorf("Token(%d) = %q, %d, %v; want a literal of %d bytes", tok, got, n, ok, len(s))
		}
	}
	for _, tok := range []uint64{2 * uint64(len(Strings)), 1 << 40} {
		if s, n, ok := Token(tok); ok {
			t.Errorf("Token(%d) = %q, %d, true; want not ok", tok, s, n)
		}
	}
}

func BenchmarkAppendToken(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = AppendToken(buf[:0], "Content-Type")
		buf = AppendToken(buf, "application/json")
		buf = AppendToken(buf, "X-Custom-Header")
	}
}
