package memstore_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/storetest"
)

// clock is a fake clock that moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := new(clock)
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newStore(tb testing.TB, cfg memstore.Config) *memstore.Store {
	tb.Helper()
	s, err := memstore.New(cfg)
	if err != nil {
		tb.Fatalf("memstore.New: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func harness(clk *clock, cfg memstore.Config) storetest.Harness {
	cfg.Now = clk.Now
	return storetest.Harness{
		New:     func(tb testing.TB) idemhook.Store { return newStore(tb, cfg) },
		Advance: clk.Advance,
	}
}

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		cfg  memstore.Config
	}{
		{"default", memstore.Config{}},
		{"one shard", memstore.Config{Shards: 1}},
		// Small enough that the suite's keys push shards to their bound.
		{"small", memstore.Config{MaxEntries: 4096, Shards: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			storetest.Run(t, harness(newClock(), tt.cfg))
		})
	}
}

func TestConformanceRealClock(t *testing.T) {
	// Without Advance the suite checks expiry with real, short lifetimes.
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, memstore.Config{}) },
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, memstore.Config{}) },
	})
}
