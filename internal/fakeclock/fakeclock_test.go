package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/fakeclock"
)

func TestClock(t *testing.T) {
	start := time.Unix(1_800_000_000, 123_456_789)
	tests := []struct {
		name    string
		advance []time.Duration
		want    time.Time
	}{
		{"not advanced", nil, start},
		{"forwards", []time.Duration{time.Second, time.Millisecond}, start.Add(time.Second + time.Millisecond)},
		{"backwards", []time.Duration{-time.Hour}, start.Add(-time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeclock.New(start)
			for _, d := range tt.advance {
				c.Advance(d)
			}
			if got := c.Now(); !got.Equal(tt.want) {
				t.Errorf("Now() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClockConcurrentAdvance(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := fakeclock.New(start)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(800*time.Millisecond); !got.Equal(want) {
		t.Errorf("after 800 concurrent advances of 1ms: Now() = %v, want %v", got, want)
	}
}
