// Package adminapi holds the JSON documents of the gateway's admin API
// (docs/operations.md), for a Go program that reads them: the answers of
// GET /admin/keys/..., /admin/deliveries and /admin/stats, and the RFC 9457
// problem both listeners answer errors with.
package adminapi

import "time"

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Record is a stored record as the admin API shows it.
type Record struct {
	StoreKey     string              `json:"store_key"`
	State        string              `json:"state"`
	CreatedAt    time.Time           `json:"created_at"`
	Status       int                 `json:"status,omitempty"`
	Headers      map[string][]string `json:"headers,omitempty"`
	Body         *string             `json:"body,omitempty"`
	BodyEncoding string              `json:"body_encoding,omitempty"` // "text" or "base64"
	BodyOmitted  bool                `json:"body_omitted,omitempty"`
}

// Delivery is an audit entry as GET /admin/deliveries shows it.
type Delivery struct {
	ID            int64     `json:"id"`
	Time          time.Time `json:"time"`
	Route         string    `json:"route"`
	Source        string    `json:"source"`
	Key           string    `json:"key"`
	Outcome       string    `json:"outcome"`
	Status        int       `json:"status"`
	DurationMS    float64   `json:"duration_ms"`
	RequestBytes  int64     `json:"request_bytes"`
	ResponseBytes int64     `json:"response_bytes"`
	Reason        string    `json:"reason,omitempty"`
	Instance      string    `json:"instance,omitempty"`
	Scope         string    `json:"scope,omitempty"` // give it as ?scope= to /admin/keys
}

// Deliveries is GET /admin/deliveries: a page of entries, newest first,
// and the cursor of the next page.
type Deliveries struct {
	Deliveries []Delivery `json:"deliveries"`
	Next       string     `json:"next,omitempty"`
}

// Window is one source's deliveries over one window. Processed,
// Replayed, Refused, Failed, Unprotected and Other add up to Total.
type Window struct {
	Total       int64 `json:"total"`
	Processed   int64 `json:"processed"`
	Replayed    int64 `json:"replayed"`
	Refused     int64 `json:"refused"`
	Failed      int64 `json:"failed"`
	Unprotected int64 `json:"unprotected"`
	Other       int64 `json:"other"` // outcomes this build doesn't know
	Duplicates  int64 `json:"duplicates"`
	// Duplicates / Total, or null without deliveries.
	DuplicateRate *float64         `json:"duplicate_rate"`
	Outcomes      map[string]int64 `json:"outcomes"`
}

// SourceStats is one source's deliveries over the last hour and day.
type SourceStats struct {
	Source string `json:"source"`
	Hour   Window `json:"hour"`
	Day    Window `json:"day"`
}

// Outcome is one outcome and the class the console counts it in.
type Outcome struct {
	Name  string `json:"name"`
	Class string `json:"class"` // processed, replayed, refused, failed or unprotected
}

// Route is one route of the configuration and its source.
type Route struct {
	Path   string `json:"path"`
	Source string `json:"source"`
}

// Stats is GET /admin/stats.
type Stats struct {
	Now      time.Time     `json:"now"`
	Sources  []SourceStats `json:"sources"`
	Routes   []Route       `json:"routes"`
	Outcomes []Outcome     `json:"outcomes"`
}

// ConsoleCSP is the Content-Security-Policy of the console's files. It allows the console's own script, style sheet and API calls and
// nothing else. It forbids inline script or style, eval, other origins,
// frames and forms posting elsewhere.
const ConsoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
