package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVerifyRefusesUnsignedTimestamp: Verify itself refuses a request
// whose signature did not cover the timestamp it checks, whatever its
// spec passed when compiled: here a template with the timestamp in an
// optional part, which the compiler refuses, set behind its back.
func TestVerifyRefusesUnsignedTimestamp(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	sp := Spec{Signature: Signature{Algorithm: "hmac-sha256", Header: "X-Sig", Signed: "{timestamp}.{body}",
		Timestamp: Timestamp{Header: "X-Ts"}}}
	c, err := sp.compile(Config{Secrets: []string{"s"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if c.signed, err = parseTemplate("{body}[{timestamp}{header:X-Maybe}]", []string{"body", "timestamp", "header"}, false); err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	for _, tt := range []struct {
		maybe, signed string
		want          error
	}{
		{"", "{}", ErrUnsignedTimestamp},
		{"m", "{}" + ts + "m", nil},
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
		r.Header.Set("X-Ts", ts)
		if tt.maybe != "" {
			r.Header.Set("X-Maybe", tt.maybe)
		}
		sum := hmacSum(sha256.New, []byte("s"), []byte(tt.signed))
		r.Header.Set("X-Sig", hex.EncodeToString(sum))
		if err := c.verify(r, []byte("{}")); !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
			t.Errorf("X-Maybe %q: %v, want %v", tt.maybe, err, tt.want)
		}
	}
}
