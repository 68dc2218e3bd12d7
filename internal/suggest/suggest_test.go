package suggest

import "testing"

func TestDidYouMean(t *testing.T) {
	known := []string{"json", "raw", "header", "query", "encoding", "hmac-sha512", "algorithm"}
	for _, tt := range []struct{ name, want string }{
		{"jsn", `: did you mean "json"?`},
		{"JSON", `: did you mean "json"?`},
		{"encodng", `: did you mean "encoding"?`},
		{"hmac-sha521", `: did you mean "hmac-sha512"?`},
		{"haeder", `: did you mean "header"?`},
		{"algoritm", `: did you mean "algorithm"?`},
		{"xyz", ""},
		{"ra", `: did you mean "raw"?`},
		{"qu", ""}, // three edits from query: too many for five letters
		{"", ""},
	} {
		if got := DidYouMean(tt.name, known); got != tt.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := DidYouMean("x", nil); got != "" {
		t.Errorf("no names: %q", got)
	}
	for _, tt := range []struct {
		a, b string
		d    int
	}{{"", "abc", 3}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"kitten", "sitting", 3}} {
		if d := Distance(tt.a, tt.b); d != tt.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, d, tt.d)
		}
	}
}
