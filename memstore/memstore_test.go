package memstore_test

import (
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/storetest"
)

func newClock() *fakeclock.Clock { return fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

func newStore(tb testing.TB, cfg memstore.Config) *memstore.Store {
	tb.Helper()
	s, err := memstore.New(cfg)
	if err != nil {
		tb.Fatalf("memstore.New: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func harness(clk *fakeclock.Clock, cfg memstore.Config) storetest.Harness {
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
