package idemhook

import "sync/atomic"

// bodyBudget bounds the request-body bytes a [Middleware] holds at once,
// across its routes (Options.MaxHeldBodyBytes). A delivery takes the bytes
// of its body's buffer before it reads the body, and gives them back when
// it ends; one that can't take them is answered 503 without reading.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// take reserves n bytes, or reports false when they would take the total
// past the bound. A body alone larger than the bound can never be held.
func (b *bodyBudget) take(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// give returns n bytes taken before.
func (b *bodyBudget) give(n int64) { b.used.Add(-n) }
