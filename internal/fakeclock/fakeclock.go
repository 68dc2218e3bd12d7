// Package fakeclock is a clock for tests that moves only when told, for the
// idemhook components that take a Now func (stores, audit sinks). It is safe
// for concurrent use, so one clock can drive several stores of a test.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Clock is a fake clock. Create it with [New].
type Clock struct{ ns atomic.Int64 }

// New returns a clock reading start until it is advanced.
func New(start time.Time) *Clock {
	c := new(Clock)
	c.ns.Store(start.UnixNano())
	return c
}

// Now returns the clock's time. Its method value c.Now fits the Now fields
// of the stores' and sinks' configurations.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock by d (backwards when d is negative).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
