// Package gather hands a worker goroutine the work that concurrent callers
// queued for it, as one batch. The stores' group commits (sqlitestore,
// pgstore) and Redis pipelines (redisstore) are built on it. Whatever waits
// when the previous batch is done becomes the next batch, so a lone call
// goes at once and a burst shares one commit or one round trip.
package gather

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Next waits for the first item of queue, then takes the items already
// waiting after it, without blocking, up to max in all. It returns them in
// batch[:0]. It returns false, and no items, once stop is closed while
// nothing waits.
func Next[T any](batch []T, queue <-chan T, stop <-chan struct{}, max int) ([]T, bool) {
	select {
	case v := <-queue:
		return more(append(batch[:0], v), queue, max), true
	case <-stop:
		return batch[:0], false
	}
}

// more appends to batch the items already waiting in queue, without
// blocking, up to max in all.
func more[T any](batch []T, queue <-chan T, max int) []T {
	for len(batch) < max {
		select {
		case v := <-queue:
			batch = append(batch, v)
		default:
			return batch
		}
	}
	return batch
}

// ErrStopped is what Put returns once Close has been called.
var ErrStopped = errors.New("gather: the workers are stopped")

// Workers runs exec on batches of the items sent to it, from at most n
// goroutines. Each batch is what Next gathers. exec must signal the batch's
// callers itself.
//
// Workers made by Start run their n goroutines from the start until Close.
// Workers made by StartIdle start none: Put starts one when none runs, and a
// goroutine that has had nothing to do for an idle period (between idle and
// twice idle) exits. So unused Workers hold no goroutine, and Workers that
// are never closed leak none. While a goroutine runs a batch, the items that
// arrive wait for it: they are its next batch. Only when a batch has run
// for longer than the stall period with items waiting does another
// goroutine start, up to n. So a fast exec (a pipeline to a Redis nearby)
// gathers everything that arrives during one round trip into the next, and
// a slow one (a WAIT for replicas, a server that has stalled) holds the
// others up for at most the stall period.
type Workers[T any] struct {
	queue chan T
	stop  chan struct{}
	wg    sync.WaitGroup
	exec  func(batch []T)
	n     int32
	max   int
	idle  time.Duration // 0: the goroutines run until Close
	stall time.Duration // StartIdle: how long a batch runs before a waiting item starts another goroutine

	running atomic.Int32 // goroutines started and not retired
	waiting atomic.Int32 // Puts that found no goroutine free at once

	mu     sync.Mutex // orders starting a goroutine against Close
	closed bool
}

// Start starts n goroutines that run exec on batches of at most max items,
// until Close.
func Start[T any](n, max int, exec func(batch []T)) *Workers[T] {
	w := newWorkers(n, max, 0, exec)
	w.running.Store(w.n)
	w.wg.Add(n)
	for range n {
		go w.run()
	}
	return w
}

// StartIdle returns Workers that run exec on batches of at most max items
// from at most n goroutines, each started when needed (when none runs, or
// when a batch has run for longer than stall with items waiting) and exiting
// once idle for idle. idle and stall must be positive.
func StartIdle[T any](n, max int, idle, stall time.Duration, exec func(batch []T)) *Workers[T] {
	if idle <= 0 || stall <= 0 {
		panic("gather: StartIdle needs positive idle and stall periods")
	}
	w := newWorkers(n, max, idle, exec)
	w.stall = stall
	return w
}

func newWorkers[T any](n, max int, idle time.Duration, exec func(batch []T)) *Workers[T] {
	return &Workers[T]{queue: make(chan T), stop: make(chan struct{}), exec: exec, n: int32(n), max: max, idle: idle}
}

// Queue is where callers send their items to Workers made by Start. A send
// blocks until a goroutine takes the item, so a caller should also select
// on Stopped. Workers made by StartIdle take their items through Put.
func (w *Workers[T]) Queue() chan<- T { return w.queue }

// Stopped is closed once Close has been called.
func (w *Workers[T]) Stopped() <-chan struct{} { return w.stop }

// Put hands v to one of the goroutines, starting one if none runs (Workers
// made by StartIdle). It returns nil once a goroutine has taken v, or
// ctx's error, or ErrStopped after Close, without v being taken.
func (w *Workers[T]) Put(ctx context.Context, v T) error {
	select {
	case w.queue <- v: // a goroutine was free
		return nil
	default:
	}
	// No goroutine is waiting for an item: they are running batches, or
	// there are none. Count this Put as waiting before looking at the
	// goroutines, so that one retiring at this moment sees it and stays
	// (see retire). When some run, v waits for the next batch; a batch that
	// stalls starts another goroutine (see run).
	w.waiting.Add(1)
	if w.idle > 0 && w.running.Load() == 0 {
		w.start(func() bool { return w.running.CompareAndSwap(0, 1) })
	}
	var err error
	select {
	case w.queue <- v:
	case <-ctx.Done():
		err = ctx.Err()
	case <-w.stop:
		err = ErrStopped
	}
	w.waiting.Add(-1)
	return err
}

// grow starts a goroutine unless n run already or Close has been called.
func (w *Workers[T]) grow() { w.start(w.take) }

// start starts a goroutine if count, which counts it as running, allows
// it, unless Close has been called.
func (w *Workers[T]) start(count func() bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !count() {
		return
	}
	w.wg.Add(1)
	go w.run()
}

// take counts one more running goroutine, if fewer than n are counted.
func (w *Workers[T]) take() bool {
	for {
		r := w.running.Load()
		if r >= w.n {
			return false
		}
		if w.running.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// retire reports whether an idle goroutine may exit. It uncounts itself
// first, then looks for a waiting Put. A Put counts itself as waiting first,
// then looks at the running count (both sequentially consistent atomics):
// so either the Put sees the goroutine uncounted, and starts another if
// none is left, or the goroutine sees the Put and stays, unless n others
// are counted, which will take the item or see the Put in turn.
func (w *Workers[T]) retire() bool {
	w.running.Add(-1)
	if w.waiting.Load() == 0 {
		return true
	}
	return !w.take()
}

// live counts the worker goroutines of every Workers of the process.
var live atomic.Int64

// Live returns the number of worker goroutines of every Workers of the
// process that have not returned: for the tests that check a store leaves
// none behind once idle or closed.
func Live() int { return int(live.Load()) }

func (w *Workers[T]) run() {
	live.Add(1)
	defer live.Add(-1) // after wg.Done: a Close that returned sees the goroutine gone soon after, not before
	defer w.wg.Done()
	var t *time.Timer
	var tick <-chan time.Time // nil without an idle period: never ready
	if w.idle > 0 {
		t = time.NewTimer(w.idle)
		defer t.Stop()
		tick = t.C
	}
	// stalled fires when a batch runs for longer than the stall period:
	// it starts another goroutine for the items waiting meanwhile. With
	// none waiting yet it fires again a stall period later, for as long as
	// the batch runs: an item that comes after the first stall period
	// waits at most one more, not until the stalled batch ends.
	var stalled *time.Timer
	var inBatch atomic.Bool
	if w.stall > 0 {
		stalled = time.AfterFunc(time.Hour, func() {
			switch {
			case !inBatch.Load():
			case w.waiting.Load() > 0:
				w.grow()
			default:
				stalled.Reset(w.stall)
			}
		})
		stalled.Stop()
		defer stalled.Stop()
	}
	batch := make([]T, 0, w.max)
	busy := false // a batch ran since the timer was last set
	for {
		select {
		case v := <-w.queue:
			batch = more(append(batch[:0], v), w.queue, w.max)
			if stalled != nil {
				inBatch.Store(true)
				stalled.Reset(w.stall)
			}
			w.exec(batch)
			if stalled != nil {
				inBatch.Store(false)
				stalled.Stop()
			}
			clear(batch)
			busy = true
		case <-w.stop:
			w.running.Add(-1)
			return
		case <-tick:
			if !busy && w.retire() {
				return
			}
			busy = false
			t.Reset(w.idle)
		}
	}
}

// Running is the number of goroutines running, or about to exit.
func (w *Workers[T]) Running() int { return int(w.running.Load()) }

// Close stops the goroutines after the batches they are running, and waits
// for them. Calling it again does nothing more.
func (w *Workers[T]) Close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// Deadline is the latest deadline of a batch's calls. A batch runs until the
// last of its callers stops waiting, so that one caller's short deadline
// never fails the others. One call without a deadline leaves the batch
// without one.
type Deadline struct {
	latest time.Time
	none   bool
}

// Add counts the deadline of ctx, a call of the batch.
func (d *Deadline) Add(ctx context.Context) {
	if dl, ok := ctx.Deadline(); !ok {
		d.none = true
	} else if dl.After(d.latest) {
		d.latest = dl
	}
}

// Context returns the context the batch runs under.
func (d *Deadline) Context() (context.Context, context.CancelFunc) {
	if d.none || d.latest.IsZero() {
		return context.Background(), func() {}
	}
	return context.WithDeadline(context.Background(), d.latest)
}
