package problem_test

import (
	"encoding/json"
	"net/http/httptest"
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

func TestExtended(t *testing.T) {
	doc := struct {
		Type   string   `json:"type"`
		Title  string   `json:"title"`
		Status int      `json:"status"`
		Detail string   `json:"detail,omitempty"`
		Scopes []string `json:"scopes,omitempty"`
	}{"about:blank", "no such key", 404, "add ?scope=<path> & retry", []string{"/a"}}
	want := `{"type":"about:blank","title":"no such key","status":404,"detail":"add ?scope=<path> & retry","scopes":["/a"]}` + "\n"
	if got := problem.Extended(doc); string(got) != want {
		t.Errorf("Extended = %s; want %s", got, want)
	}
}

func TestWrite(t *testing.T) {
	w := httptest.NewRecorder()
	body := problem.JSON(409, "Conflict", "")
	problem.Write(w, 409, body)
	if w.Code != 409 || w.Header().Get("Content-Type") != problem.ContentType || w.Header().Get("Cache-Control") != "no-store" || w.Body.String() != string(body) {
		t.Errorf("Write answered %d %v %q", w.Code, w.Header(), w.Body)
	}
}
