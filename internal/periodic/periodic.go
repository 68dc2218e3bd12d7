// Package periodic runs a background chore, at a fixed interval or when
// asked, until it is stopped. The chores are the sweeping of expired rows
// of sqlitestore, the pruning of old entries of the audit sinks (both at
// an interval) and sqlitestore's background checkpoints (when its writer
// asks).
package periodic

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Task is a chore running in its own goroutine. Create it with [Start] or
// [OnDemand].
type Task struct {
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Start calls fn every interval, from a new goroutine, until [Task.Stop].
// When a call fails, other than because Stop canceled it, the error is
// logged to log (if not nil) at WARN as msg, with the error under "err".
// A non-positive interval starts nothing, and Stop still works.
func Start(interval time.Duration, fn func(context.Context) error, log *slog.Logger, msg string) *Task {
	t := newTask()
	if interval <= 0 {
		close(t.done)
		return t
	}
	tick := time.NewTicker(interval)
	go func() {
		defer tick.Stop()
		t.run(tick.C, fn, log, msg, 0)
	}()
	return t
}

// OnDemand calls fn, from a new goroutine, after each [Task.Kick], until
// [Task.Stop]. Kicks that come while fn runs make one call after it. A
// failure is logged as [Start] logs it, but at most once per quiet
// (every one when quiet is not positive): a chore kicked often fails as
// often while, say, the disk is full.
func OnDemand(fn func(context.Context) error, log *slog.Logger, msg string, quiet time.Duration) *Task {
	t := newTask()
	go t.run(nil, fn, log, msg, quiet)
	return t
}

func newTask() *Task {
	return &Task{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Kick asks an [OnDemand] task for a call, without waiting for it. A task
// made by Start never reads it (its loop selects on its ticker only).
func (t *Task) Kick() {
	select {
	case t.kick <- struct{}{}:
	default: // a call is asked for already
	}
}

// run calls fn on each tick (nil for none) and each kick.
func (t *Task) run(tick <-chan time.Time, fn func(context.Context) error, log *slog.Logger, msg string, quiet time.Duration) {
	defer close(t.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	kick := t.kick
	if tick != nil {
		kick = nil // Start's tasks run on their ticker only
	}
	var warned time.Time
	for {
		select {
		case <-t.stop:
			return
		case <-tick:
		case <-kick:
		}
		if err := fn(ctx); err != nil && ctx.Err() == nil && log != nil && (quiet <= 0 || time.Since(warned) >= quiet) {
			warned = time.Now()
			log.Warn(msg, "err", err)
		}
	}
}

// Stop ends the task: it cancels the context of a call in progress and
// waits for the call to return. Once Stop returns, fn is not called again.
// It is safe to call more than once, and concurrently.
func (t *Task) Stop() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}
