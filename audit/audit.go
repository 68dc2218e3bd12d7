// Package audit is idemhook's audit trail, the successor of the NestJS guard's
// webhook-audit.service: every delivery the gateway sees is recorded with
// its time, route, source, key, outcome, status, duration, sizes, the reason
// it was refused (if it was) and the gateway instance that answered it.
//
// A [Recorder] takes entries on the request path without ever blocking it
// and hands them in batches to a [Sink]: [SQLite] (the gateway's default,
// same file as the store), [Postgres] (one trail for several gateways),
// [RedisStream] (a capped stream on the store's Redis, shared by every
// gateway on it), [Ring] (a bounded in-process ring, with the memory store)
// or [Log] (one slog line per delivery). A sink that fails is retried in the
// background while entries wait in the recorder's bounded buffer. Every sink
// but Log is also a [Querier]: filtered, newest-first pages with an opaque
// cursor, which the admin API serves as GET /admin/deliveries. The SQL sinks
// are also a [Counter] (entries per source and outcome, GET /admin/stats),
// and they delete rows older than their retention.
package audit

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Entry is one delivery in the trail.
type Entry struct {
	Time          time.Time     // when the delivery arrived; stored to the microsecond
	Route         string        // the route's path, e.g. /webhooks/stone
	Source        string        // the route's source label, e.g. stone
	Key           string        // the resolved key part, e.g. sha256:9f86...; empty when none
	Scope         string        // the key's scope (a prefix route's request path), as in the store key; empty when unscoped
	Outcome       string        // one of the idemhook.Outcome values, e.g. processed
	Status        int           // HTTP status sent to the provider
	Duration      time.Duration // time spent answering
	RequestBytes  int64         // request body size
	ResponseBytes int64         // response body size
	// Reason says why a delivery was refused or not protected: the
	// signature error of a 401, the limit of a 413, the store error of a
	// store_error_* outcome, the upstream's status of a released claim.
	// Empty for an ordinary delivery.
	Reason string
	// Instance names the gateway instance that answered, e.g. its host
	// name; empty when not set.
	Instance string
	// Decision is the key decision of the delivery in words (claimed,
	// replayed, waited, released and why). Only the Log sink writes it, at
	// DEBUG; the other sinks don't store it.
	Decision string
	ID       int64 // assigned by the sink that stores it (0 on input)
}

// PartialWriteError is returned by a [Sink] whose Write stored the first
// Written entries of a batch before it failed; the [Recorder] then retries
// only the rest.
type PartialWriteError struct {
	Written int
	Err     error
}

func (e *PartialWriteError) Error() string {
	return fmt.Sprintf("%v (after %d entries were written)", e.Err, e.Written)
}

func (e *PartialWriteError) Unwrap() error { return e.Err }

// Filter selects entries for [Querier.Query]. Non-empty fields combine with
// AND.
type Filter struct {
	Source  string    // exact match
	Outcome string    // exact match
	Route   string    // exact match
	Since   time.Time // entries at or after Since
	Until   time.Time // entries strictly before Until
	Limit   int       // page size; default DefaultLimit, at most MaxLimit
	Cursor  string    // opaque, from Page.Next; "" for the first page
}

// Page is one page of entries, newest first.
type Page struct {
	Entries []Entry
	// Next is the cursor of the following page, "" when this is the last.
	Next string
}

// Sink stores batches of entries.
type Sink interface {
	// Write stores a batch, in order, all or nothing when the sink can.
	Write(ctx context.Context, entries []Entry) error
}

// Querier reads the trail back.
type Querier interface {
	// Query returns the entries matching f, newest first (by time, then
	// by ID), one page at a time. Following Next from the first page
	// returns every matching entry exactly once. A malformed cursor is an
	// error wrapping ErrBadCursor.
	Query(ctx context.Context, f Filter) (Page, error)
}

// Page sizes of [Filter.Limit].
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// DefaultRetention is how long the SQL sinks keep entries by default.
const DefaultRetention = 7 * 24 * time.Hour

// ErrBadCursor is wrapped by the error of a query whose cursor is not one
// returned in Page.Next.
var ErrBadCursor = errors.New("audit: malformed cursor")

// position is a row's place in the newest-first order: its time in Unix
// microseconds, then its ID.
type position struct {
	micros int64
	id     int64
}

func (p position) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + strconv.FormatInt(p.micros, 10) + ":" + strconv.FormatInt(p.id, 10)))
}

func decodeCursor(s string) (position, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "v1" {
		return position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	micros, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return position{micros, id}, nil
}

// limit returns the page size f asks for, within bounds.
func (f Filter) limit() int {
	switch {
	case f.Limit <= 0:
		return DefaultLimit
	case f.Limit > MaxLimit:
		return MaxLimit
	}
	return f.Limit
}

// query is the SQL of a filtered page, shared by the SQL sinks: the column
// of the time, how a placeholder is written and how a time is passed differ.
type query struct {
	timeCol     string
	placeholder func(n int) string
	timeArg     func(micros int64) any
}

// where returns the WHERE clause (with a leading " WHERE", or "") and its
// arguments for f.
func (q query) where(f Filter) (string, []any, error) {
	var conds []string
	var args []any
	add := func(cond string, vals ...any) {
		for _, v := range vals {
			args = append(args, v)
			cond = strings.Replace(cond, "?", q.placeholder(len(args)), 1)
		}
		conds = append(conds, cond)
	}
	if f.Source != "" {
		add("source = ?", f.Source)
	}
	if f.Outcome != "" {
		add("outcome = ?", f.Outcome)
	}
	if f.Route != "" {
		add("route = ?", f.Route)
	}
	if !f.Since.IsZero() {
		add(q.timeCol+" >= ?", q.timeArg(ceilMicros(f.Since)))
	}
	if !f.Until.IsZero() {
		add(q.timeCol+" < ?", q.timeArg(ceilMicros(f.Until)))
	}
	if f.Cursor != "" {
		p, err := decodeCursor(f.Cursor)
		if err != nil {
			return "", nil, err
		}
		add("("+q.timeCol+" < ? OR ("+q.timeCol+" = ? AND id < ?))", q.timeArg(p.micros), q.timeArg(p.micros), p.id)
	}
	if len(conds) == 0 {
		return "", nil, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// selectPage returns the SELECT of a page of the entries of table matching
// f, newest first, its arguments, and the page size: the statement fetches
// up to limit+1 rows, the extra one telling whether there is a next page
// (see [page]).
func (q query) selectPage(table string, f Filter) (stmt string, args []any, limit int, err error) {
	where, args, err := q.where(f)
	if err != nil {
		return "", nil, 0, err
	}
	limit = f.limit()
	stmt = `SELECT id, ` + q.timeCol + `, route, source, key, outcome, status, duration_ns, request_bytes, response_bytes, reason, instance, scope
		FROM ` + table + where + ` ORDER BY ` + q.timeCol + ` DESC, id DESC LIMIT ` + fmt.Sprint(limit+1)
	return stmt, args, limit, nil
}

// resultSet is what readPage needs of the rows of a query; *sql.Rows and
// pgx.Rows both have it.
type resultSet interface {
	Next() bool
	Err() error
}

// readPage reads the rows of a statement made by selectPage, scanning each
// into an Entry with scan, and makes the page.
func readPage(rs resultSet, limit int, scan func(*Entry) error) (Page, error) {
	out := make([]Entry, 0, min(limit+1, 64))
	for rs.Next() {
		var e Entry
		if err := scan(&e); err != nil {
			return Page{}, fmt.Errorf("audit: query: %w", err)
		}
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return Page{}, fmt.Errorf("audit: query: %w", err)
	}
	return page(out, limit), nil
}

// window returns f's Since and Until in Unix microseconds (see ceilMicros),
// 0 for a bound that is not set.
func (f Filter) window() (since, until int64) {
	if !f.Since.IsZero() {
		since = ceilMicros(f.Since)
	}
	if !f.Until.IsZero() {
		until = ceilMicros(f.Until)
	}
	return since, until
}

// ceilMicros is t in Unix microseconds, rounded up. Filters apply to the
// stored times, which are whole microseconds: stored >= 10.5µs holds exactly
// when stored >= 11µs, and likewise for <.
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Sub(time.UnixMicro(us)) > 0 {
		us++
	}
	return us
}

// page turns rows fetched with LIMIT limit+1 into a Page.
func page(rows []Entry, limit int) Page {
	if len(rows) <= limit {
		return Page{Entries: rows}
	}
	rows = rows[:limit]
	last := rows[len(rows)-1]
	return Page{Entries: rows, Next: position{last.Time.UnixMicro(), last.ID}.encode()}
}
