// Package fence hands out this process's fencing tokens: the numbers the
// middleware gives a claim of a store that has no clock of its own to give
// (memstore, sqlitestore, redisstore), and the queue engines that live in
// this process (the memory engine, sqlitestore's) give each attempt.
//
// A token is the wall clock in Unix microseconds, raised to one more than
// the last token handed out whenever the clock has not moved past it (two
// calls in one microsecond, or a clock stepped back), so that every token
// is larger than every earlier one of the process. Tokens from two
// processes compare as their clocks do.
//
// The last token is process-wide state on purpose: the middleware's claims
// and the queue's attempts of one key must draw from one sequence, or an
// attempt could carry a smaller token than the claim before it.
package fence

import (
	"sync/atomic"
	"time"
)

// last is the last token handed out.
var last atomic.Uint64

// Next returns a token larger than every one Next has returned in this
// process: the wall clock in Unix microseconds, or the last token plus one
// when the clock has not moved past it.
func Next() uint64 {
	var now uint64
	if us := time.Now().UnixMicro(); us > 0 {
		now = uint64(us)
	}
	for {
		prev := last.Load()
		next := max(now, prev+1)
		if last.CompareAndSwap(prev, next) {
			return next
		}
	}
}
