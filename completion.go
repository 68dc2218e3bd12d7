package idemhook

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"
)

// A delivery whose handler answered but whose answer the store refused
// (the store went down, its disk is full) has sent that answer: the event
// ran. Its claim is still in the store, pending. Left alone, the claim
// lapses and the next copy of the event runs the handler again. So the
// middleware keeps the answer and goes on trying to store it in the
// background, renewing the claim meanwhile, until the store takes it: a
// copy that arrives in between meets the pending claim (and, under
// InFlightWait, gets the answer once it is stored). It stops when the
// claim is no longer held (the store answers ErrNotOwner, or the claim's
// lease ran out while the store was unreachable: then a copy may run the
// handler again, as before), or after three leases in all (a store that
// renews the claim but keeps refusing the answer won't take it), and says
// so in a WARN.

// Bounds of the pauses between two tries.
const (
	minCompleteRetry = 50 * time.Millisecond
	maxCompleteRetry = time.Second
)

// completeLater stores the delivery's answer (ex.doneRec) in place of
// pending in the background. The caller has sent the answer; ex.doneRec's
// header and body may be reused once completeLater returns.
func (ex *exchange) completeLater(pending *Record) {
	m := ex.h.m
	done := ex.doneRec
	done.Header = done.Header.Clone()
	done.Body = bytes.Clone(done.Body)
	job := laterCompletion{
		key:   ex.storeKey,
		claim: *pending,
		done:  done,
		ttl:   ex.h.rt.TTL,
		lease: ex.h.lease,
	}
	m.later.Add(1)
	go func() {
		defer m.later.Done()
		m.completeLater(&job)
	}()
}

// laterCompletion is an answer the store did not take when it was given.
type laterCompletion struct {
	key         string
	claim, done Record
	ttl, lease  time.Duration
}

func (m *Middleware) completeLater(j *laterCompletion) {
	start := time.Now()
	// The claim was renewed at most Lease/3 before the completion failed:
	// it is held for two thirds of the lease at least.
	held := start.Add(j.lease * 2 / 3)
	pause := minCompleteRetry
	for tries := 1; ; tries++ {
		time.Sleep(pause)
		pause = min(2*pause, maxCompleteRetry, max(j.lease/3, minCompleteRetry))
		err := m.storeCall(func(ctx context.Context) error { return m.store.Complete(ctx, j.key, &j.claim, &j.done, j.ttl) })
		if err == nil {
			m.opts.Logger.LogAttrs(context.Background(), slog.LevelInfo, "idemhook: an answer the store refused was stored once it took it again",
				slog.String("key", j.key), slog.Int("tries", tries), slog.Duration("after", time.Since(start)))
			return
		}
		if errors.Is(err, ErrNotOwner) || errors.Is(err, ErrCorruptRecord) {
			m.warn("idemhook: an answer the store refused could not be stored: its claim is no longer held; a copy of the event may run the handler again",
				slog.String("key", j.key), slog.Int("tries", tries), slog.String("error", err.Error()))
			return
		}
		// Still failing: keep the claim held meanwhile.
		switch err := m.storeCall(func(ctx context.Context) error { return m.store.Extend(ctx, j.key, &j.claim, j.lease) }); {
		case err == nil:
			held = time.Now().Add(j.lease)
		case errors.Is(err, ErrNotOwner):
			m.warn("idemhook: an answer the store refused could not be stored: its claim is no longer held; a copy of the event may run the handler again",
				slog.String("key", j.key), slog.Int("tries", tries), slog.String("error", err.Error()))
			return
		}
		if now := time.Now(); now.After(held) || now.Sub(start) > 3*j.lease {
			m.warn("idemhook: an answer the store refused could not be stored before its claim's lease ran out, or within three leases; a copy of the event may run the handler again",
				slog.String("key", j.key), slog.Int("tries", tries), slog.String("error", err.Error()))
			return
		}
	}
}

// storeCall runs fn under the store deadline, outside any delivery: the
// background completions' calls.
func (m *Middleware) storeCall(fn func(context.Context) error) error {
	ctx, cancel := m.storeDeadline(context.Background())
	defer cancel()
	return fn(ctx)
}

// storeDeadline bounds a store call made under parent by StoreTimeout,
// except a call to a store that completes in-process, which never waits.
func (m *Middleware) storeDeadline(parent context.Context) (context.Context, context.CancelFunc) {
	if m.inProcess {
		return parent, func() {}
	}
	return context.WithTimeout(parent, m.opts.StoreTimeout)
}

// Drain waits until the answers whose storing failed and is being retried
// in the background are stored or given up, or until ctx is done. A
// program calls it when it shuts down, after its server stopped taking
// deliveries, so that an answer already sent is not left unstored by the
// exit (a copy of its event would run the handler again).
func (m *Middleware) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		m.later.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
