package memstore

import "testing"

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
