package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemhook/idemhook/internal/auditpage"
)

// DefaultRingSize is how many entries a [Ring] keeps by default.
const DefaultRingSize = 10000

// RingConfig configures a [Ring]. The zero value means the defaults.
type RingConfig struct {
	// Size is how many entries the ring keeps: writing one more forgets the
	// oldest. An entry takes about 300 bytes with a body-hash key, so the
	// default costs about 3 MB. Default: DefaultRingSize (10000).
	Size int
}

// Ring is a [Sink] and [Querier] keeping the last entries in memory, for a
// gateway on the memory store (one process, nothing to install). Its trail
// is queryable like the SQL sinks', with the same filters, order and
// cursor. It is lost when the process ends. Create it with [NewRing].
type Ring struct {
	mu     sync.RWMutex
	buf    []Entry // circular; buf[next] is the oldest once full
	next   int
	full   bool
	lastID int64
}

var (
	_ Sink    = (*Ring)(nil)
	_ Querier = (*Ring)(nil)
)

// NewRing returns an empty ring of cfg.Size entries.
func NewRing(cfg RingConfig) (*Ring, error) {
	if cfg.Size < 0 {
		return nil, fmt.Errorf("audit: NewRing: negative size %d", cfg.Size)
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultRingSize
	}
	return &Ring{buf: make([]Entry, cfg.Size)}, nil
}

// Write adds entries, forgetting the oldest beyond the ring's size. Times
// are kept to the microsecond, as the SQL sinks keep them, and IDs are
// assigned in write order. It never fails.
func (r *Ring) Write(_ context.Context, entries []Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range entries {
		r.lastID++
		e.ID = r.lastID
		e.Time = time.UnixMicro(e.Time.UnixMicro()).UTC()
		e.Decision = ""
		r.buf[r.next] = e
		r.next++
		if r.next == len(r.buf) {
			r.next, r.full = 0, true
		}
	}
	return nil
}

// Len returns how many entries the ring holds.
func (r *Ring) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.full {
		return len(r.buf)
	}
	return r.next
}

// Query returns a page of the entries matching f, newest first (by time,
// then by ID), with the SQL sinks' cursor.
func (r *Ring) Query(ctx context.Context, f Filter) (Page, error) {
	var after *auditpage.Position
	if f.Cursor != "" {
		p, err := auditpage.Decode(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		after = &p
	}
	since, until := auditpage.Window(f.Since, f.Until)
	r.mu.RLock()
	held := r.held()
	var out []Entry
	for _, e := range held {
		us := e.Time.UnixMicro()
		switch {
		case f.Source != "" && e.Source != f.Source,
			f.Outcome != "" && e.Outcome != f.Outcome,
			f.Route != "" && e.Route != f.Route,
			since != 0 && us < since,
			until != 0 && us >= until,
			after != nil && (us > after.Micros || us == after.Micros && e.ID >= after.ID):
			continue
		}
		out = append(out, e)
	}
	r.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return Page{}, errors.Join(errors.New("audit: query"), err)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	limit := f.PageSize()
	if len(out) > limit+1 {
		out = out[:limit+1]
	}
	return page(slices.Clip(out), limit), nil
}

var _ Counter = (*Ring)(nil)

// Counts returns the number of entries matching f per source and outcome,
// ordered by source then outcome. f.Limit and f.Cursor are ignored.
func (r *Ring) Counts(ctx context.Context, f Filter) ([]Count, error) {
	t := NewTally(f)
	r.mu.RLock()
	held := r.held()
	for _, e := range held {
		t.Add(e)
	}
	r.mu.RUnlock()
	return t.Counts(), ctx.Err()
}

// held returns the entries the ring holds, in buffer order (once the ring
// is full, the oldest is at r.next). The caller holds r.mu.
func (r *Ring) held() []Entry {
	if r.full {
		return r.buf
	}
	return r.buf[:r.next]
}
