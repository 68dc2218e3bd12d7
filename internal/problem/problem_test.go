package problem_test

import (
	"encoding/json"
	"testing"

	"github.com/idemhook/idemhook/internal/problem"
)

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		status        int
		title, detail string
		want          string
	}{
		{409, "Delivery in progress", "retry after 5s", `{"type":"about:blank","title":"Delivery in progress","status":409,"detail":"retry after 5s"}` + "\n"},
		{503, "Overloaded", "", `{"type":"about:blank","title":"Overloaded","status":503}` + "\n"},
		{502, "Bad gateway", "dial: <b>\x00\xff", `{"type":"about:blank","title":"Bad gateway","status":502,"detail":"dial: \u003cb\u003e\u0000\ufffd"}` + "\n"},
	} {
		got := problem.JSON(tc.status, tc.title, tc.detail)
		if string(got) != tc.want {
			t.Errorf("JSON(%d, %q, %q) = %s; want %s", tc.status, tc.title, tc.detail, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("JSON(%d, %q, %q) is not valid JSON", tc.status, tc.title, tc.detail)
		}
	}
}
