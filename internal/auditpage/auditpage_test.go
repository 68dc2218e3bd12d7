package auditpage

import (
	"errors"
	"testing"
)

func TestCursorRoundTrip(t *testing.T) {
	tests := []Position{{0, 0}, {1, 1}, {-1, 5}, {1_796_040_000_123_456, 42}, {1<<63 - 1, 1<<63 - 1}}
	for _, tt := range tests {
		got, err := Decode(tt.Encode())
		if err != nil || got != tt {
			t.Errorf("Decode(%v.Encode()) = %v, %v", tt, got, err)
		}
	}
}

// FuzzCursor: a cursor from a client is either one Next produced (and then
// decodes to the same position) or an error wrapping ErrBadCursor. It never
// panics.
func FuzzCursor(f *testing.F) {
	f.Add(Position{1_796_040_000_123_456, 42}.Encode())
	f.Add("")
	f.Add("djE6MTp4")
	f.Add("%%%")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Decode(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("Decode(%q): %v does not wrap ErrBadCursor", s, err)
			}
			return
		}
		again, err := Decode(p.Encode())
		if err != nil || again != p {
			t.Fatalf("round trip of %v: %v, %v", p, again, err)
		}
	})
}
