// Package auditpage is the newest-first pagination shared by the audit
// sinks ordered by time (audit.Ring, the SQLite and PostgreSQL sinks). It
// holds an entry's position, the cursor that encodes it, the cut of a
// fetched page and the filters' time bounds in microseconds. It works on
// plain values so
// that package audit and its backends can both import it.
package auditpage

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadCursor is wrapped by the error of Decode. Package audit exports it
// as audit.ErrBadCursor.
var ErrBadCursor = errors.New("audit: malformed cursor")

// Position is a row's place in the newest-first order: its time in Unix
// microseconds, then its ID.
type Position struct {
	Micros int64
	ID     int64
}

// Encode returns the cursor of the page that follows p.
func (p Position) Encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + strconv.FormatInt(p.Micros, 10) + ":" + strconv.FormatInt(p.ID, 10)))
}

// Decode returns the position a cursor made by Encode holds. Any other
// string is an error wrapping ErrBadCursor.
func Decode(s string) (Position, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "v1" {
		return Position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	micros, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Position{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return Position{micros, id}, nil
}

// Cut turns rows fetched with LIMIT limit+1 into a page: the first limit
// rows, and the cursor after the last of them (at gives a row's position).
// The cursor is "" when rows holds limit rows or fewer, the last page.
func Cut[E any](rows []E, limit int, at func(*E) Position) ([]E, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, at(&rows[len(rows)-1]).Encode()
}

// Window returns since and until in Unix microseconds (see CeilMicros), 0
// for a bound that is the zero time (not set).
func Window(since, until time.Time) (sinceUS, untilUS int64) {
	if !since.IsZero() {
		sinceUS = CeilMicros(since)
	}
	if !until.IsZero() {
		untilUS = CeilMicros(until)
	}
	return sinceUS, untilUS
}

// CeilMicros is t in Unix microseconds, rounded up. Filters apply to the
// stored times, which are whole microseconds: stored >= 10.5µs holds exactly
// when stored >= 11µs, and likewise for <.
func CeilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Sub(time.UnixMicro(us)) > 0 {
		us++
	}
	return us
}
