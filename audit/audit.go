// Package audit is idemhook's audit trail, the successor of the NestJS guard's
// webhook-audit.service. Every delivery the gateway sees is recorded with
// its time, route, source, key, outcome, status, duration and sizes. The
// entry also holds the reason it was refused (if it was) and the gateway
// instance that answered it.
//
// A [Recorder] takes entries on the request path without ever blocking it
// and hands them in batches to a [Sink]. A sink that fails is retried in the
// background while entries wait in the recorder's bounded buffer. Every sink
// but Log is also a [Querier] and a [Counter]. A Querier returns filtered,
// newest-first pages with an opaque cursor, which the admin API serves as
// GET /admin/deliveries. A Counter counts entries per source and outcome,
// for GET /admin/stats.
//
// This package holds the sinks that need no driver: [Ring] (a bounded
// in-process ring, with the memory store) and [Log] (one slog line per
// delivery). It imports no database driver, so a program that records to
// one of them, or only uses the types, compiles none. The sinks on a
// database are one package each, as the stores are:
//
//   - [github.com/idemhook/idemhook/audit/sqliteaudit] writes to a table in
//     a SQLite file. It is the gateway's default and uses the store's file
//     (a *sql.DB from sqlitestore.Open, which brings modernc.org/sqlite).
//   - [github.com/idemhook/idemhook/audit/pgaudit] writes to a PostgreSQL
//     table, one trail for several gateways (pgx).
//   - [github.com/idemhook/idemhook/audit/redisaudit] writes to a capped
//     stream on the store's Redis, shared by every gateway on it (go-redis).
//
// The SQL sinks delete rows older than their retention. Package
// [github.com/idemhook/idemhook/audit/audittest] is the conformance suite
// every queryable sink runs.
package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhook/idemhook/internal/auditpage"
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
	// name. It is empty when not set.
	Instance string
	// Decision is the key decision of the delivery in words (claimed,
	// replayed, waited, released and why). Only the Log sink writes it, at
	// DEBUG. The other sinks don't store it.
	Decision string
	ID       int64 // assigned by the sink that stores it (0 on input)
}

// PartialWriteError is returned by a [Sink] whose Write stored the first
// Written entries of a batch before it failed. The [Recorder] then retries
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
var ErrBadCursor = auditpage.ErrBadCursor

// PageSize returns the page size f asks for: f.Limit, DefaultLimit when
// it is 0 or less, MaxLimit when it is more.
func (f Filter) PageSize() int {
	switch {
	case f.Limit <= 0:
		return DefaultLimit
	case f.Limit > MaxLimit:
		return MaxLimit
	}
	return f.Limit
}

// page turns rows fetched with LIMIT limit+1 into a Page whose cursor is
// the position (time, then ID) of its last entry.
func page(rows []Entry, limit int) Page {
	rows, next := auditpage.Cut(rows, limit, position)
	return Page{Entries: rows, Next: next}
}

// position is e's place in the newest-first order.
func position(e *Entry) auditpage.Position {
	return auditpage.Position{Micros: e.Time.UnixMicro(), ID: e.ID}
}
