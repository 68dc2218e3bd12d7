// Package problem is the RFC 9457 problem document that the middleware
// and the gateway answer their errors with.
package problem

import "encoding/json"

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
