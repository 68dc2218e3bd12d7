//go:build unix

package proccpu_test

import (
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/proccpu"
)

// TestUsedGrows burns CPU and checks that Used counts it: it must grow by
// 5 ms within 10 s of busy work, however loaded the machine.
func TestUsedGrows(t *testing.T) {
	start := proccpu.Used()
	if start <= 0 {
		t.Fatalf("Used() = %v at the start, want the CPU already used (> 0)", start)
	}
	x := uint64(1)
	for deadline := time.Now().Add(10 * time.Second); proccpu.Used()-start < 5*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("Used() grew by %v over 10 s of busy work (x=%d), want at least 5 ms", proccpu.Used()-start, x)
		}
		for range 100000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
}
