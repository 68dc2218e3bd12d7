package memstore

import (
	"bytes"
	"fmt"
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
		if got := new(prefixTable).compactKey(nil, tt.give, false); len(got) != tt.wantLen {
			t.Errorf("compactKey(%q): got %d bytes, want %d", tt.give, len(got), tt.wantLen)
		}
	}
}

// FuzzCompactKey checks that distinct keys never share a compact key, in an
// empty table, in one where a's prefix was interned first, and in a full
// one, and that the lookups of the other calls (which don't intern) find
// the form Claim gave.
func FuzzCompactKey(f *testing.F) {
	hash := strings.Repeat("0123456789abcdef", 4)
	packed := string(new(prefixTable).compactKey(nil, hash, false))
	f.Add("idem:a:sha256:"+hash, "idem:a:sha256:"+strings.ToUpper(hash), byte(0))
	f.Add(hash, packed, byte(1))
	f.Add(hash, packed[:len(packed)-1], byte(2))
	f.Add("x"+hash, "x"+packed, byte(0))
	f.Add("a", "a\x00", byte(1))
	f.Add("", "\x00", byte(2))
	f.Add("p:"+hash, hash[:32]+"\x02", byte(0))
	f.Add("p:"+hash, hash+"\x02", byte(1))
	f.Fuzz(func(t *testing.T, a, b string, state byte) {
		var pt prefixTable
		switch state % 3 {
		case 1:
			pt.compactKey(nil, a, true)
		case 2:
			fillPrefixes(&pt)
		}
		ca, cb := pt.compactKey(nil, a, true), pt.compactKey(nil, b, true)
		if (a == b) != bytes.Equal(ca, cb) {
			t.Fatalf("keys %q and %q: compact keys %q and %q", a, b, ca, cb)
		}
		if la := pt.compactKey(nil, a, false); !bytes.Equal(la, ca) {
			t.Fatalf("key %q: lookup form %q, Claim's form %q", a, la, ca)
		}
	})
}

// fillPrefixes interns prefixes until pt is full.
func fillPrefixes(pt *prefixTable) {
	hash := strings.Repeat("0123456789abcdef", 4)
	for i := 0; pt.len() < maxPrefixes; i++ {
		pt.compactKey(nil, fmt.Sprintf("fill-%d:", i)+hash, true)
	}
}

func TestCompactKeyInterned(t *testing.T) {
	hash := strings.Repeat("0123456789abcdef", 4)
	var pt prefixTable
	key := func(prefix string) string { return prefix + hash }

	// Lookups don't intern: a prefix no Claim has seen stays in full.
	if got := pt.compactKey(nil, key("idem:a:sha256:"), false); len(got) != 14+32+1 || pt.len() != 0 {
		t.Fatalf("lookup of a new prefix: %d bytes, %d prefixes; want 47, 0", len(got), pt.len())
	}
	a := pt.compactKey(nil, key("idem:a:sha256:"), true)
	b := pt.compactKey(nil, key("idem:b:sha256:"), true)
	if len(a) != 33 || len(b) != 33 || a[32] != tagInterned || b[32] != tagInterned+1 || pt.len() != 2 {
		t.Fatalf("interned: %x and %x (%d prefixes); want 33 bytes each, tags %d and %d", a, b, pt.len(), tagInterned, tagInterned+1)
	}
	if again := pt.compactKey(nil, key("idem:a:sha256:"), false); !bytes.Equal(again, a) {
		t.Errorf("lookup after interning: %x, want %x", again, a)
	}
	// A key that doesn't end in hex is held in full, its prefix not interned.
	if got := pt.compactKey(nil, "idem:c:evt_1", true); len(got) != 13 || pt.len() != 2 {
		t.Errorf("raw key: %d bytes, %d prefixes; want 13, 2", len(got), pt.len())
	}
	long := strings.Repeat("p", maxPrefixLen+1)
	if got := pt.compactKey(nil, key(long), true); len(got) != len(long)+32+1 || pt.len() != 2 {
		t.Errorf("prefix of %d bytes: %d bytes, %d prefixes; want it held in full", len(long), len(got), pt.len())
	}
	if got := pt.compactKey(nil, key(long[1:]), true); len(got) != 33 || pt.len() != 3 {
		t.Errorf("prefix of %d bytes: %d bytes, %d prefixes; want it interned", maxPrefixLen, len(got), pt.len())
	}

	// The cap: once full, new prefixes are held in full, old ones stay.
	fillPrefixes(&pt)
	if pt.len() != maxPrefixes {
		t.Fatalf("full table holds %d prefixes, want %d", pt.len(), maxPrefixes)
	}
	if got := pt.compactKey(nil, key("idem:new:sha256:"), true); len(got) != 16+32+1 || got[len(got)-1] != tagHashed || pt.len() != maxPrefixes {
		t.Errorf("new prefix in a full table: %x (%d prefixes), want it held in full", got, pt.len())
	}
	if again := pt.compactKey(nil, key("idem:b:sha256:"), true); !bytes.Equal(again, b) {
		t.Errorf("interned prefix in a full table: %x, want %x", again, b)
	}
}

func BenchmarkCompactKey(b *testing.B) {
	key := "idem:stone:sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	var buf [256]byte
	var pt prefixTable
	pt.compactKey(buf[:0], key, true)
	for b.Loop() {
		pt.compactKey(buf[:0], key, false)
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
		e := b
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
