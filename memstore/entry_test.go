package memstore

import (
	"bytes"
	"strings"
	"testing"
)

func TestCompactKey(t *testing.T) {
	hash := strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		give    string
		wantLen int
	}{
		{"", 1},
		{"idem:stone:evt_1", 17},
		{"idem:stone:sha256:" + hash, 18 + 32 + 1},
		{hash, 32 + 1},
		{"idem:stone:sha256:" + strings.ToUpper(hash), 18 + 64 + 1},
		{"idem:stone:sha256:" + hash[1:], 18 + 63 + 1},
		{"idem:stone:sha256:" + hash[:63] + "g", 18 + 64 + 1},
	}
	for _, tt := range tests {
		if got := compactKey(nil, tt.give); len(got) != tt.wantLen {
			t.Errorf("compactKey(%q): got %d bytes, want %d", tt.give, len(got), tt.wantLen)
		}
	}
}

// FuzzCompactKey checks that distinct keys never share a compact key.
func FuzzCompactKey(f *testing.F) {
	hash := strings.Repeat("0123456789abcdef", 4)
	packed := string(compactKey(nil, hash))
	f.Add("idem:a:sha256:"+hash, "idem:a:sha256:"+strings.ToUpper(hash))
	f.Add(hash, packed)
	f.Add(hash, packed[:len(packed)-1])
	f.Add("x"+hash, "x"+packed)
	f.Add("a", "a\x00")
	f.Add("", "\x00")
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, cb := compactKey(nil, a), compactKey(nil, b)
		if (a == b) != bytes.Equal(ca, cb) {
			t.Fatalf("keys %q and %q: compact keys %q and %q", a, b, ca, cb)
		}
	})
}

func BenchmarkCompactKey(b *testing.B) {
	key := "idem:stone:sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	var buf [256]byte
	for b.Loop() {
		compactKey(buf[:0], key)
	}
}

// TestMetaMicroseconds: the meta word keeps the expiry in whole
// microseconds, rounded up, and the completed flag apart from it.
func TestMetaMicroseconds(t *testing.T) {
	tests := []struct {
		exp, want int64
		completed bool
	}{
		{1_800_000_000_123_456_000, 1_800_000_000_123_456_000, false}, // whole µs: exact
		{1_800_000_000_123_456_001, 1_800_000_000_123_457_000, true},  // rounded up, never down
		{1_800_000_000_123_456_999, 1_800_000_000_123_457_000, false},
		{7_258_118_400_000_000_001, 7_258_118_400_000_001_000, true}, // the year 2200
	}
	for _, tt := range tests {
		b := make([]byte, entryHeader)
		putMeta(b, tt.exp, tt.completed)
		e := string(b)
		if got := expiryOf(e); got != tt.want {
			t.Errorf("expiryOf(putMeta(%d)) = %d, want %d", tt.exp, got, tt.want)
		}
		if got := completed(e); got != tt.completed {
			t.Errorf("completed(putMeta(%d, %t)) = %t", tt.exp, tt.completed, got)
		}
		if (tt.exp < tt.want && expired(e, tt.exp)) || expired(e, tt.want-1) || !expired(e, tt.want) {
			t.Errorf("exp %d: expired wrong around the kept expiry %d", tt.exp, tt.want)
		}
	}
}
