// Package adminapi holds the JSON documents of the gateway's admin API
// (docs/operations.md), for a Go program that reads them: the answers of
// GET /admin/keys/..., /admin/deliveries, /admin/stats and /admin/queue/...,
// the bodies the queue's POSTs take, and the RFC 9457 problem both
// listeners answer errors with.
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
	// Tenants are the tenants of a route whose path ends in /{tenant}
	// (its tenants:), sorted; their deliveries' scope is the tenant.
	Tenants []string `json:"tenants,omitempty"`
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

// Queue is GET /admin/queue: every queued route (deliver: queue) with its
// counts and its last minutes.
type Queue struct {
	Now     time.Time    `json:"now"`
	Minutes int          `json:"minutes"` // how many minutes each route's history holds (?minutes=; by default the span of the data, at least 15 minutes unless the gateway started since, at most 360)
	Routes  []QueueRoute `json:"routes"`
}

// QueueRoute is one queued route's queue at one moment.
type QueueRoute struct {
	// Path names the queue: the route's path, or, for a destination of a
	// route with destinations, <path>#<destination>; what the other
	// calls' route takes (or route and destination).
	Path        string `json:"path"`
	Route       string `json:"route"`                 // the route's path
	Destination string `json:"destination,omitempty"` // the destination's name`
	Queued      int64  `json:"queued"`                // waiting for their first attempt
	Retrying    int64  `json:"retrying"`              // waiting for a retry
	Running     int64  `json:"running"`
	Dead        int64  `json:"dead"` // kept until redriven or purged
	// OldestAgeSeconds is how long ago the oldest event not yet delivered
	// (nor dead) was accepted; null when there is none.
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	// NextAttempt is when the earliest queued event is due; null when none
	// is queued.
	NextAttempt *time.Time `json:"next_attempt"`
	Paused      bool       `json:"paused"`
	// BackendDown is true while the route's breaker takes its backend for
	// down.
	BackendDown bool `json:"backend_down"`
	// SettlesPending is how many attempts' outcomes the store failed to
	// record: the gateway keeps them and tries again at every poll.
	SettlesPending int           `json:"settles_pending"`
	History        []QueueMinute `json:"history"` // oldest first, one per minute up to now
}

// QueueMinute is what happened on a queued route in one minute. The
// history is kept in the gateway's memory: it starts empty when the
// process starts.
type QueueMinute struct {
	Start     time.Time `json:"start"`
	Accepted  int64     `json:"accepted"`
	Delivered int64     `json:"delivered"`
	Retried   int64     `json:"retried"`
	Dead      int64     `json:"dead"`
}

// QueueEvent is an event of the delivery queue, without its request.
type QueueEvent struct {
	ID    int64  `json:"id"`
	Route string `json:"route"` // the queue's name: the route's path, or <path>#<destination>
	// Destination is the destination's name on a route with destinations.
	Destination string `json:"destination,omitempty"`
	// Key is the Idempotency-Key its attempts carry: the store key, and
	// on a destination's queue '#' and the destination's name.
	Key        string    `json:"key"`
	OrderKey   string    `json:"order_key,omitempty"`
	State      string    `json:"state"`   // queued, running or dead
	Attempt    int       `json:"attempt"` // attempts started
	ReceivedAt time.Time `json:"received_at"`
	// NextAt is, for a queued event, when it is due; for a running one,
	// when its lease ends.
	NextAt     *time.Time `json:"next_at,omitempty"`
	Reason     string     `json:"reason,omitempty"` // dead: why
	LastStatus int        `json:"last_status,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
}

// QueueEvents is GET /admin/queue/events: a page of events by ID, and,
// when there may be more, the ?after= of the next page.
type QueueEvents struct {
	Events []QueueEvent `json:"events"`
	Next   int64        `json:"next,omitempty"`
}

// QueueAttempt is one attempt to deliver an event, as the queue kept it
// (the first and the most recent ones).
type QueueAttempt struct {
	Attempt   int       `json:"attempt"`
	Time      time.Time `json:"time"`
	Status    int       `json:"status,omitempty"` // the backend's; absent when none came back
	LatencyMS float64   `json:"latency_ms"`
	Error     string    `json:"error,omitempty"`
	// BodyHead is the first bytes of the backend's answer, as text (bytes
	// that are not UTF-8 are shown as U+FFFD).
	BodyHead string `json:"body_head,omitempty"`
	Worker   string `json:"worker,omitempty"`
}

// QueueEventDetail is GET /admin/queue/events/{id}.
type QueueEventDetail struct {
	QueueEvent
	Attempts []QueueAttempt `json:"attempts"`
}

// QueueSelect is the body of POST /admin/queue/redrive and /purge: which
// events of one route. The fields other than Route narrow the selection.
type QueueSelect struct {
	Route string `json:"route"`
	// Destination, on a route with destinations, selects its queue (or
	// route names it: /webhooks/stripe#billing).
	Destination  string     `json:"destination,omitempty"`
	IDs          []int64    `json:"ids,omitempty"`
	State        string     `json:"state,omitempty"`  // queued or dead
	Reason       string     `json:"reason,omitempty"` // dead events whose reason contains it
	ReceivedFrom *time.Time `json:"received_from,omitempty"`
	ReceivedTo   *time.Time `json:"received_to,omitempty"` // excluded
	// Confirm, for a purge, is the number of events the selection holds,
	// as the 409 answer without it said.
	Confirm *int64 `json:"confirm,omitempty"`
}

// QueueRoutePause is the body of POST /admin/queue/pause and /resume.
type QueueRoutePause struct {
	Route       string `json:"route"`
	Destination string `json:"destination,omitempty"` // as in QueueSelect
}

// QueueRedriven is the answer of POST /admin/queue/redrive.
type QueueRedriven struct {
	Redriven int64 `json:"redriven"`
}

// QueuePaused is the answer of POST /admin/queue/pause and /resume.
type QueuePaused struct {
	Route  string `json:"route"`
	Paused bool   `json:"paused"`
}

// QueuePurged is the answer of a confirmed POST /admin/queue/purge: the
// number of events deleted (their keys stay stored: a re-delivery is
// replayed the accept answer and not queued again).
type QueuePurged struct {
	Purged int64 `json:"purged"`
}

// QueuePurgeConfirm is the 409 problem of POST /admin/queue/purge without
// the right confirm: Count is how many events the selection holds, to send
// back as "confirm".
type QueuePurgeConfirm struct {
	Problem
	Count int64 `json:"count"`
}
