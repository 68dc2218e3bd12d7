package idemhook

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// renewals keeps the claims of a route's running deliveries alive: each
// claim's lease is extended Lease/3 after the claim and again Lease/3 after
// each extension ends, until its delivery stops the renewal. One timer
// serves every delivery of the route. The interval is the same for all of
// them, so appending keeps the queue in order of due time, and the timer is
// armed for the head.
type renewals struct {
	interval time.Duration // Lease/3 of the route

	mu         sync.Mutex
	timer      *time.Timer // made by the first delivery
	head, tail *renewal
}

// renewal is one delivery's place in its route's renewals.
type renewal struct {
	ex    *exchange // nil until started
	claim *Record

	// Guarded by the route's renewals.mu.
	prev, next *renewal
	due        time.Duration // since monoBase
	queued     bool          // in the queue, waiting for its due time
	stopped    bool
}

// monoBase is the origin of the renewals' due times, read from the
// monotonic clock.
var monoBase = time.Now()

func (ex *exchange) startRenewal(claim *Record) {
	rn := &ex.renew
	rn.ex, rn.claim = ex, claim
	q := &ex.h.renewals
	q.mu.Lock()
	q.push(rn)
	q.mu.Unlock()
}

// push appends rn, due one interval from now. The caller holds q.mu.
func (q *renewals) push(rn *renewal) {
	rn.due = time.Since(monoBase) + q.interval
	rn.queued, rn.prev, rn.next = true, q.tail, nil
	if q.tail != nil {
		q.tail.next = rn
		q.tail = rn
		return // the timer is armed for the head, due earlier
	}
	q.head, q.tail = rn, rn
	if q.timer == nil {
		q.timer = time.AfterFunc(q.interval, q.fire)
	} else {
		q.timer.Reset(q.interval)
	}
}

// unlink takes rn out of the queue. The caller holds q.mu.
func (q *renewals) unlink(rn *renewal) {
	if rn.prev != nil {
		rn.prev.next = rn.next
	} else {
		q.head = rn.next
	}
	if rn.next != nil {
		rn.next.prev = rn.prev
	} else {
		q.tail = rn.prev
	}
	rn.prev, rn.next, rn.queued = nil, nil, false
}

// fire starts the extension of every claim that is due, each in its own
// goroutine so that a slow store call delays no other claim, and arms the
// timer for the next one. A fire with nothing due (the head was stopped
// meanwhile) only re-arms the timer.
func (q *renewals) fire() {
	now := time.Since(monoBase)
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head != nil && q.head.due <= now {
		rn := q.head
		q.unlink(rn)
		go rn.extend()
	}
	if q.head != nil {
		q.timer.Reset(q.head.due - now)
	}
}

// extend renews the claim's lease, then queues the next renewal unless the
// delivery stopped meanwhile or the claim was lost.
func (rn *renewal) extend() {
	ex := rn.ex
	m := ex.h.m
	_, err := ex.call("extend", func(ctx context.Context) (*Record, error) {
		return nil, m.store.Extend(ctx, ex.storeKey, rn.claim, ex.h.lease)
	})
	q := &ex.h.renewals
	q.mu.Lock()
	stopped := rn.stopped
	lost := !stopped && errors.Is(err, ErrNotOwner)
	if !stopped && !lost {
		q.push(rn)
	}
	q.mu.Unlock()
	if lost {
		m.warn("idemhook: lease lost while the handler runs: another delivery may run it too",
			slog.String("source", ex.h.rt.Source), slog.String("key", ex.storeKey))
	}
}

// stop ends the renewal; it may be called more than once. An extension
// under way finishes, and is not followed by another.
func (rn *renewal) stop() {
	if rn.ex == nil {
		return // never started
	}
	q := &rn.ex.h.renewals
	q.mu.Lock()
	rn.stopped = true
	if rn.queued {
		q.unlink(rn)
	}
	q.mu.Unlock()
}
