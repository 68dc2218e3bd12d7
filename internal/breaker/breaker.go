// Package breaker is the circuit breaker that keeps a dead store from adding
// its timeout to every request.
//
// It counts consecutive failures, and at Threshold it opens. Allow then
// reports false until Cooldown has passed. After that it lets exactly one
// probe through (half-open). A successful probe closes the breaker. A
// failed one opens it for another Cooldown.
// The closed state, the common case, costs one atomic load per call.
package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	closed int32 = iota
	open
	halfOpen
)

// Breaker is safe for concurrent use. Create it with New.
type Breaker struct {
	threshold int32
	cooldown  time.Duration
	now       func() time.Time
	onChange  func(open bool)

	state    atomic.Int32
	failures atomic.Int32

	mu        sync.Mutex
	openUntil time.Time
}

// New returns a closed breaker. A threshold <= 0 gives a breaker that never
// opens. onChange, if not nil, is called (without locks held) when the breaker
// opens (true) or closes (false).
func New(threshold int, cooldown time.Duration, now func() time.Time, onChange func(open bool)) *Breaker {
	return &Breaker{threshold: int32(threshold), cooldown: cooldown, now: now, onChange: onChange}
}

// Allow reports whether a call may go to the store. Every call that was
// allowed must be followed by Done.
func (b *Breaker) Allow() bool {
	switch b.state.Load() {
	case closed:
		return true
	case halfOpen:
		return false // a probe is already out
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() != open || b.now().Before(b.openUntil) {
		return false
	}
	b.state.Store(halfOpen)
	return true
}

// Done records the result of an allowed call.
func (b *Breaker) Done(ok bool) {
	if b.threshold <= 0 {
		return
	}
	if ok {
		if b.state.Load() == closed {
			if b.failures.Load() != 0 {
				b.failures.Store(0)
			}
			return
		}
		b.mu.Lock()
		wasOpen := b.state.Load() != closed
		b.state.Store(closed)
		b.failures.Store(0)
		b.mu.Unlock()
		if wasOpen && b.onChange != nil {
			b.onChange(false)
		}
		return
	}
	if b.state.Load() == closed && b.failures.Add(1) < b.threshold {
		return
	}
	b.mu.Lock()
	opened := b.state.Load() == closed
	b.state.Store(open)
	b.openUntil = b.now().Add(b.cooldown)
	b.mu.Unlock()
	if opened && b.onChange != nil {
		b.onChange(true)
	}
}

// Open reports whether the breaker is open or half-open.
func (b *Breaker) Open() bool { return b.state.Load() != closed }
