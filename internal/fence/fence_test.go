package fence

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Tokens handed out at once by many goroutines are all distinct, each
// goroutine's increase, and they follow the wall clock.
func TestNextIncreases(t *testing.T) {
	const goroutines, each = 8, 1000
	before := uint64(time.Now().UnixMicro())
	got := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				got[g] = append(got[g], Next())
			}
		})
	}
	wg.Wait()
	var all []uint64
	for g, seq := range got {
		for i := 1; i < len(seq); i++ {
			if seq[i] <= seq[i-1] {
				t.Fatalf("goroutine %d: token %d is %d, not above the one before, %d", g, i, seq[i], seq[i-1])
			}
		}
		all = append(all, seq...)
	}
	slices.Sort(all)
	if n := len(slices.Compact(all)); n != goroutines*each {
		t.Fatalf("%d distinct tokens of %d", n, goroutines*each)
	}
	if all[0] < before {
		t.Fatalf("first token %d is below the clock before the calls, %d", all[0], before)
	}
}

// A clock behind the last token (stepped back) doesn't take the tokens
// down: they go on from the last one.
func TestNextWhenTheClockIsBehind(t *testing.T) {
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	last.Store(ahead)
	if got := Next(); got != ahead+1 {
		t.Fatalf("Next with the clock an hour behind the last token = %d; want %d", got, ahead+1)
	}
	if got := Next(); got != ahead+2 {
		t.Fatalf("Next again = %d; want %d", got, ahead+2)
	}
}
