// Package periodic runs a background chore at a fixed interval until it is
// stopped. The chores are the sweeping of expired rows of sqlitestore and
// the pruning of old entries of the audit sinks.
package periodic

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Task is a chore running in its own goroutine. Create it with [Start].
type Task struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Start calls fn every interval, from a new goroutine, until [Task.Stop].
// When a call fails, other than because Stop canceled it, the error is
// logged to log (if not nil) at WARN as msg, with the error under "err".
// A non-positive interval starts nothing, and Stop still works.
func Start(interval time.Duration, fn func(context.Context) error, log *slog.Logger, msg string) *Task {
	t := &Task{stop: make(chan struct{}), done: make(chan struct{})}
	if interval <= 0 {
		close(t.done)
		return t
	}
	go t.run(interval, fn, log, msg)
	return t
}

func (t *Task) run(interval time.Duration, fn func(context.Context) error, log *slog.Logger, msg string) {
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
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			if err := fn(ctx); err != nil && ctx.Err() == nil && log != nil {
				log.Warn(msg, "err", err)
			}
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
