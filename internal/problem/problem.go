// Package problem is the RFC 9457 problem document that the middleware
// and the gateway answer their errors with.
package problem

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// ContentType is the problem document's media type.
const ContentType = "application/problem+json"

// JSON is the problem document of status, title and detail, of type
// about:blank, ending in a newline. encoding/json escapes what a detail
// may carry (a control byte in an error's text, invalid UTF-8), so the
// body is always valid JSON. An empty detail is left out.
func JSON(status int, title, detail string) []byte {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", title, status, detail}) // cannot fail: strings and an int
	return append(b, '\n')
}

// Extended is the JSON of doc, a problem document with extension members
// (a struct embedding the standard ones and adding its own), ending in a
// newline. Unlike [JSON], it leaves <, > and & as they are, so that a
// detail may show a URL's template ("?scope=<path>") as written. doc must
// encode (no channel, function or cycle).
func Extended(doc any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		panic("problem: " + err.Error()) // a programming error: the documents are fixed types
	}
	return b.Bytes()
}

// Write answers w with body, a problem document of status, which no cache
// is to keep.
func Write(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client may be gone
}
