// Package queue is idemhook's durable delivery queue: accept an event, answer
// the provider, then deliver it to the backend with retries until it
// succeeds or is dead.
//
// The gateway's `deliver: queue` routes use it; a Go program can too. Its two
// halves are an [Engine], which keeps the events (sqlitestore and pgstore
// keep them in the store's own database, beside the keys; [NewMemory] keeps
// them in memory, for tests and the demo), and a [Dispatcher], which claims
// due events and delivers them.
//
// # The promise
//
// Accept completes the key's claim with the accept answer and appends the
// event in one atomic step of the store, and the provider is answered only
// after it. So a crash can neither lose an event the provider was told was
// accepted nor queue one twice: before the commit, the provider had no 2xx
// and sends again; after it, a re-delivery finds the key done and is
// replayed the accept answer.
//
// Delivery to the backend is at least once. An attempt holds a lease on its
// event; each attempt has a number, and the pair (event id, attempt number)
// is a fencing token: every write that settles or renews an attempt matches
// both, so a worker whose lease lapsed (a stalled process, an attempt past
// its timeout) can never settle an attempt another worker now holds. An
// attempt in flight when a process dies is sent again, with the same
// Idempotency-Key and the next attempt number; a backend makes its effects
// once by keying them on the Idempotency-Key (the idemhook middleware in a
// Go backend does exactly that).
package queue

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// Event is one accepted delivery, as the queue keeps it.
type Event struct {
	// ID is the event's number, assigned by Accept: increasing in the order
	// events were accepted on one engine. On a SQL engine two concurrent
	// accepts may commit in the other order than their IDs (within an
	// ordered group they don't), so a List paged by AfterID while events
	// arrive can miss one: page again from the start to be sure.
	ID int64
	// Route names the route the event was accepted on.
	Route string
	// Key is the event's store key (idem:<source>[@<scope>]:<key>), sent to
	// the backend as Idempotency-Key on every attempt.
	Key string
	// OrderKey, when not empty, puts the event in an ordered group: events
	// of one route with the same OrderKey are delivered one at a time, in
	// the order of their IDs.
	OrderKey string

	// Method, Target (path and query, as received), Header (what the gateway
	// forwards) and Body are the request.
	Method string
	Target string
	Header http.Header
	Body   []byte

	// ReceivedAt is when the event was accepted.
	ReceivedAt time.Time

	// Lease, when set on Accept, appends the event running its first
	// attempt (Attempt 1) under a lease of Lease held by Worker, as if Claim
	// had just returned it: the caller is making that attempt already (a
	// route's respond_within budget ran out while the backend worked) and
	// settles it with the event's Token. An event accepted so must not be
	// ordered (OrderKey empty).
	Lease  time.Duration
	Worker string

	// Attempt is the number of attempts started, including the one Claim
	// just started: 1 for the first. It never decreases, redrives included,
	// and with ID it is the attempt's fencing token.
	Attempt int
	// Fence is the attempt's fencing token for the backend, which the
	// gateway sends it as Idempotent-Fence: a number larger for every later
	// attempt of the event, on whichever process makes it, so that a
	// backend that records the largest it has seen can refuse the late work
	// of an attempt another has superseded. Claim sets it. Accept keeps the
	// one it is given, the fence of the key's claim (idemhook.Delivery.Fence):
	// an event accepted running makes its first attempt with it, and every
	// later attempt gets a larger one, so that the attempts of one key never
	// carry a smaller fence than an earlier one, the first attempt of a
	// respond_within route (sent before the event is kept) included. 0: the
	// engine gives none.
	Fence uint64
	// Base is the value of Attempt when the event was last redriven (0
	// before): the route's attempt limit counts the attempts after it.
	Base int
	// Since is when the route's maximum age counts from: ReceivedAt, or the
	// last redrive.
	Since time.Time
}

// Token is the fencing token of one attempt.
func (e *Event) Token() Token { return Token{ID: e.ID, Attempt: e.Attempt} }

// Token names one attempt of one event. Settle and Extend act only while the
// event is running under exactly this attempt.
type Token struct {
	ID      int64
	Attempt int
}

// Completion is the key's side of an accept: the claim the middleware holds
// on Key and the record (the accept answer) that replaces it for TTL. They are
// the arguments of [idemhook.CompleteDelivery]'s write function.
type Completion struct {
	Key         string
	Claim, Done *idemhook.Record
	TTL         time.Duration
}

// State is where an event is in its life.
type State int

const (
	// Queued: waiting for its next attempt (its first, or a retry).
	Queued State = iota
	// Running: an attempt holds its lease.
	Running
	// Dead: its attempts or its maximum age ran out, or the backend refused
	// it for good. It is kept until redriven or purged.
	Dead
)

func (s State) String() string {
	switch s {
	case Queued:
		return "queued"
	case Running:
		return "running"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// ParseState is the inverse of State.String.
func ParseState(s string) (State, bool) {
	for _, st := range []State{Queued, Running, Dead} {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

// Verdict is how an attempt ended, as Settle records it.
type Verdict int

const (
	// Delivered: the backend accepted the event. It leaves the queue.
	Delivered Verdict = iota
	// Retry: the attempt failed; the event is queued again for NextAt.
	Retry
	// Kill: the event is dead, with Reason.
	Kill
)

// Attempt is the record of one attempt, kept for the operator.
type Attempt struct {
	Attempt  int
	Started  time.Time
	Latency  time.Duration
	Status   int    // the backend's status; 0 when none came back
	Error    string // the transport's error, or why the attempt was cut short
	BodyHead []byte // the first bytes of the backend's answer
	Worker   string // the process that made it
}

// Settlement settles one attempt.
type Settlement struct {
	Token   Token
	Verdict Verdict
	NextAt  time.Time // Retry: when the event is due again
	Reason  string    // Kill: why it is dead
	Attempt Attempt
}

// MaxBodyHead bounds Attempt.BodyHead.
const MaxBodyHead = 512

// KeptAttempts bounds the attempts kept per event: the first and the most
// recent ones, by attempt number.
const KeptAttempts = 20

// Summary is what an operator sees of an event, without its request.
type Summary struct {
	ID         int64
	Route      string
	Key        string
	OrderKey   string
	State      State
	Attempt    int
	ReceivedAt time.Time
	NextAt     time.Time // Queued: when it is due; Running: when its lease ends
	Reason     string    // Dead: why
	LastStatus int       // the last attempt's status, 0 when none
	LastError  string    // the last attempt's error
}

// Stats is a route's queue at one moment.
type Stats struct {
	Queued   int64 // waiting for their first attempt
	Retrying int64 // waiting for a retry
	Running  int64
	Dead     int64
	// Oldest is when the oldest event that is not dead was accepted; zero
	// when there is none.
	Oldest time.Time
	// NextAt is when the earliest queued event is due; zero when none is
	// queued.
	NextAt time.Time
	Paused bool
}

// Pending is the events that are not dead: what the backpressure bound counts.
func (s Stats) Pending() int64 { return s.Queued + s.Retrying + s.Running }

// Filter selects events for List, Redrive and Purge. Zero fields select
// everything; Route is required by Redrive and Purge.
type Filter struct {
	Route  string
	IDs    []int64 // only these events
	States []State // only in one of these states
	// Reason selects dead events whose reason contains it.
	Reason string
	// ReceivedFrom and ReceivedTo bound ReceivedAt (From included, To excluded).
	ReceivedFrom, ReceivedTo time.Time
	// AfterID and Limit page List: events with a larger ID, at most Limit
	// (0: 100). AfterID applies to Redrive and Purge too; Limit does not
	// (they act on every event selected).
	AfterID int64
	Limit   int
}

// An EngineStore is a store that can keep the queue beside its keys, so
// that Accept completes the key's claim and appends the event in one step:
// sqlitestore.Store and pgstore.Store in their database, memstore.Store in
// memory ([NewMemory]). A program holding an idemhook.Store of any kind gets
// its queue through it, without knowing the store's type.
type EngineStore interface {
	// QueueEngine returns the store's queue, creating its tables if they
	// are missing (see the store's Queue method).
	QueueEngine(ctx context.Context) (Engine, error)
}

// Engine keeps a queue's events. Every method is safe for concurrent use,
// and, on an engine shared by several processes (pgstore), across them.
type Engine interface {
	// Accept completes c (a compare-and-set on the claim, as
	// idemhook.Store's Complete) and appends ev, in one atomic step, and
	// sets ev.ID (and, with ev.Lease, ev.Attempt to 1). When the claim is no longer held it returns an error
	// wrapping idemhook.ErrNotOwner and appends nothing.
	Accept(ctx context.Context, c Completion, ev *Event) error

	// AcceptAll is Accept for one completion and several events, each of
	// its own route (a queued route's destinations): it completes c and
	// appends every event of evs, all or none, in one atomic step, and sets
	// each event's ID. The events are not accepted running (Lease 0), and
	// no two have one Route. On PostgreSQL an accept of ordered events
	// takes their groups' locks in one fixed order, so that two accepts of
	// the same groups can't deadlock.
	AcceptAll(ctx context.Context, c Completion, evs []*Event) error

	// Claim starts the next attempt of at most max due events of route and
	// returns them with their requests: queued events whose time has come,
	// and running ones whose lease has ended (their worker is gone). An
	// event of an ordered group is due only while it is the group's oldest
	// event. A paused route's events are never due. Each returned event
	// holds a lease of lease, in the name of worker.
	Claim(ctx context.Context, route string, max int, lease time.Duration, worker string) ([]*Event, error)

	// Extend renews the lease of the attempt t to lease from now. It
	// returns ErrSuperseded when t no longer holds the event.
	Extend(ctx context.Context, t Token, lease time.Duration) error

	// Settle ends the attempt s.Token and records it. It returns
	// ErrSuperseded, and changes nothing but the attempt's record, when the
	// token no longer holds the event.
	Settle(ctx context.Context, s Settlement) error

	// Hasten makes every queued retry of route due now (the backend is back:
	// catch up at once instead of waiting out each event's backoff). It
	// returns how many it moved.
	Hasten(ctx context.Context, route string) (int64, error)

	// Stats returns the counts of route's queue. It counts the route's
	// events (about 0.5s per million on PostgreSQL): an operator's call, and
	// the gateway's once a second, not one per accept.
	Stats(ctx context.Context, route string) (Stats, error)

	// List returns the summaries of the events f selects, by ID.
	List(ctx context.Context, f Filter) ([]Summary, error)

	// Get returns one event's summary and its kept attempts, or nil when
	// there is no such event.
	Get(ctx context.Context, id int64) (*Summary, []Attempt, error)

	// Redrive queues again, due now, the dead (and queued) events f selects:
	// their attempt limit and maximum age count afresh from now, and their
	// attempt numbers go on from where they were. Running events are left
	// alone. It returns how many it queued.
	Redrive(ctx context.Context, f Filter) (int64, error)

	// Purge deletes the events f selects that are not running and returns
	// their keys. It is the only way an accepted event leaves the queue
	// undelivered.
	Purge(ctx context.Context, f Filter) ([]string, error)

	// SetPaused pauses or resumes route's deliveries. Accept goes on while
	// a route is paused.
	SetPaused(ctx context.Context, route string, paused bool) error
}

// ErrSuperseded is returned by Settle and Extend when the attempt's token no
// longer holds its event: its lease ended and another attempt took the
// event, or the event was purged.
var ErrSuperseded = errors.New("queue: the attempt no longer holds its event")

// ValidateAccept checks what Accept requires of an event: engines call it
// first.
func ValidateAccept(ev *Event) error {
	switch {
	case ev == nil:
		return errors.New("queue: Accept: nil *Event")
	case ev.Lease < 0:
		return errors.New("queue: Accept: negative Event.Lease")
	case ev.Lease > 0 && ev.OrderKey != "":
		return errors.New("queue: Accept: an event accepted running (Event.Lease) can't be ordered: it is being sent out of its group's order")
	}
	return nil
}

// ValidateAcceptAll checks what AcceptAll requires of its events: engines
// call it first.
func ValidateAcceptAll(evs []*Event) error {
	if len(evs) == 0 {
		return errors.New("queue: AcceptAll: no events")
	}
	routes := make(map[string]bool, len(evs))
	for _, ev := range evs {
		if err := ValidateAccept(ev); err != nil {
			return errors.New("queue: AcceptAll: " + strings.TrimPrefix(err.Error(), "queue: Accept: "))
		}
		switch {
		case ev.Lease != 0:
			return errors.New("queue: AcceptAll: an event can't be accepted running (Event.Lease)")
		case routes[ev.Route]:
			return fmt.Errorf("queue: AcceptAll: two events of route %q", ev.Route)
		}
		routes[ev.Route] = true
	}
	return nil
}

// ValidateFilter checks a filter for Redrive and Purge: engines call it
// first, so that a forgotten route never selects every route's events.
func ValidateFilter(op string, f Filter) error {
	if f.Route == "" {
		return errors.New("queue: " + op + ": Filter.Route is required")
	}
	return nil
}

// Selects reports whether the filter selects the summary s. Engines that
// filter in Go (the memory engine) use it; SQL engines translate f.
func (f Filter) Selects(s *Summary) bool {
	if f.Route != "" && s.Route != f.Route {
		return false
	}
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, s.ID) {
		return false
	}
	if len(f.States) > 0 && !slices.Contains(f.States, s.State) {
		return false
	}
	if f.Reason != "" && (s.State != Dead || !strings.Contains(s.Reason, f.Reason)) {
		return false
	}
	if !f.ReceivedFrom.IsZero() && s.ReceivedAt.Before(f.ReceivedFrom) {
		return false
	}
	if !f.ReceivedTo.IsZero() && !s.ReceivedAt.Before(f.ReceivedTo) {
		return false
	}
	return s.ID > f.AfterID
}

// PageSize returns f.Limit, or the default page of 100 when it is not set.
func (f Filter) PageSize() int {
	if f.Limit <= 0 {
		return 100
	}
	return f.Limit
}
