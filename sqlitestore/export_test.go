package sqlitestore

import (
	"context"
	"testing"
)

// SweepFrom exposes one run of the background sweeper to the tests.
func (s *Store) SweepFrom(ctx context.Context, after string, steps int) (int64, string, error) {
	return s.sweepFrom(ctx, after, steps)
}

// SetClaimReadHook makes f run in every Claim of a store holding its claims
// in memory, between its read of the file and its second look at the map,
// until the test ends.
func SetClaimReadHook(tb testing.TB, f func(s *Store, key string)) {
	claimReadHook.Store(&f)
	tb.Cleanup(func() { claimReadHook.Store(nil) })
}

// Cached reports the number and the cost of the completed records the store
// keeps in memory (Config.CacheBytes).
func (s *Store) Cached() (records, bytes int) {
	for i := range s.held.shards {
		sh := &s.held.shards[i]
		sh.mu.Lock()
		records += len(sh.records)
		bytes += sh.bytes
		sh.mu.Unlock()
	}
	return records, bytes
}
