package sqlitestore

import "context"

// SweepFrom exposes one run of the background sweeper to the tests.
func (s *Store) SweepFrom(ctx context.Context, after string, steps int) (int64, string, error) {
	return s.sweepFrom(ctx, after, steps)
}
