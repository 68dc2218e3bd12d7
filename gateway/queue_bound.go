package gateway

import (
	"context"
	"sync"
)

// bound is a queued route's count of events not yet delivered, against
// which max_queued admits new events. It is a bound under concurrency: an
// accept reserves its place before it writes the event (so that concurrent
// accepts can't all see the same last free place), and gives the place back
// if the write fails.
//
// The count never falls below the store's: it is the last count read from
// the store, plus every event kept since that read began, plus the
// reservations of the accepts under way. An event kept while a read runs
// may or may not be in what the read found, so it is counted on top: the
// count can then be above the store's by those events, until the next read
// that no accept overlaps sets it exact. Deliveries lower the count only
// through a read (at most statsInterval later), never by themselves: a
// delivery is observed after its commit, and a read can land between the
// two. So the gateway never holds more than max_queued events of a route
// from its own accepts; near the bound it may refuse a few it could have
// taken, until the next read.
type bound struct {
	mu       sync.Mutex
	count    int64 // the last read, plus the events kept since it began
	reserved int64 // accepts under way: their events may be written at any moment
	kept     int64 // events kept since the start: a read's start takes it as a mark
}

// reserve takes a place for one event if the count and the reservations
// are under max, and reports the count it found. A reservation ends in
// exactly one of commit (the event was kept) or cancel.
func (b *bound) reserve(max int64) (n int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = b.count + b.reserved
	if n >= max {
		return n, false
	}
	b.reserved++
	return n, true
}

// full reports whether no place is left, without reserving one, and the
// count it found.
func (b *bound) full(max int64) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.count + b.reserved
	return n, n >= max
}

// commit turns a reservation into a kept event.
func (b *bound) commit() {
	b.mu.Lock()
	b.reserved--
	b.count++
	b.kept++
	b.mu.Unlock()
}

// cancel gives back a reservation whose event was not kept.
func (b *bound) cancel() {
	b.mu.Lock()
	b.reserved--
	b.mu.Unlock()
}

// pending returns the count with the reservations.
func (b *bound) pending() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count + b.reserved
}

// read sets the count from read, a count of the store's: what it found,
// plus the events kept while it ran (which it may have missed). A read
// that fails leaves the count as it was.
func (b *bound) read(read func() (int64, error)) error {
	b.mu.Lock()
	mark := b.kept
	b.mu.Unlock()
	n, err := read()
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.count = n + (b.kept - mark)
	b.mu.Unlock()
	return nil
}

// countRoute reads the counts of qr's queue from the store: its stats (the
// metrics and the console) and its bound.
func (q *queues) countRoute(ctx context.Context, qr *queuedRoute) error {
	return qr.bound.read(func() (int64, error) {
		st, err := q.engine.Stats(ctx, qr.name)
		if err != nil {
			return 0, err
		}
		qr.stats.Store(&st)
		return st.Pending(), nil
	})
}
