// Package gather hands a worker goroutine the work that concurrent callers
// queued for it, as one batch. The stores' group commits (sqlitestore,
// pgstore) and Redis pipelines (redisstore) are built on it. Whatever waits
// when the previous batch is done becomes the next batch, so a lone call
// goes at once and a burst shares one commit or one round trip.
package gather

import (
	"context"
	"sync"
	"time"
)

// Next waits for the first item of queue, then takes the items already
// waiting after it, without blocking, up to max in all. It returns them in
// batch[:0]. It returns false, and no items, once stop is closed while
// nothing waits.
func Next[T any](batch []T, queue <-chan T, stop <-chan struct{}, max int) ([]T, bool) {
	select {
	case v := <-queue:
		batch = append(batch[:0], v)
	case <-stop:
		return batch[:0], false
	}
	for len(batch) < max {
		select {
		case v := <-queue:
			batch = append(batch, v)
		default:
			return batch, true
		}
	}
	return batch, true
}

// Workers runs exec on batches of the items sent to it, from a fixed number
// of goroutines. Each batch is what Next gathers. exec must signal the
// batch's callers itself.
type Workers[T any] struct {
	queue chan T
	stop  chan struct{}
	wg    sync.WaitGroup
}

// Start starts n goroutines that run exec on batches of at most max items.
func Start[T any](n, max int, exec func(batch []T)) *Workers[T] {
	w := &Workers[T]{queue: make(chan T), stop: make(chan struct{})}
	for range n {
		w.wg.Go(func() {
			batch := make([]T, 0, max)
			for {
				var ok bool
				if batch, ok = Next(batch, w.queue, w.stop, max); !ok {
					return
				}
				exec(batch)
				clear(batch)
			}
		})
	}
	return w
}

// Queue is where callers send their items. A send blocks until a goroutine
// takes the item, so a caller should also select on Stopped.
func (w *Workers[T]) Queue() chan<- T { return w.queue }

// Stopped is closed once Close has been called.
func (w *Workers[T]) Stopped() <-chan struct{} { return w.stop }

// Close stops the goroutines after the batches they are running, and waits
// for them.
func (w *Workers[T]) Close() {
	close(w.stop)
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
