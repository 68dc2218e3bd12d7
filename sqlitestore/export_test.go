package sqlitestore

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// Mix64 is the key filter's second hash: the benchmarks spread counter
// keys over the key space with it, as body hashes are.
func Mix64(x uint64) uint64 { return mix64(x) }

// SweepFrom exposes one run of the background sweeper to the tests.
func (s *Store) SweepFrom(ctx context.Context, after string, steps int) (int64, string, error) {
	return s.file.sweepFrom(ctx, after, steps)
}

// held is the store's mode when it holds its claims in memory
// (Config.Lock).
func (s *Store) held() *heldStore { return s.mode.(*heldStore) }

// SetClaimReadHook makes f run in every Claim of s, a store holding its
// claims in memory, between its read of the file and its second look at
// the map, until the test ends.
func (s *Store) SetClaimReadHook(tb testing.TB, f func(key string)) {
	h := s.held()
	h.readHook.Store(&f)
	tb.Cleanup(func() { h.readHook.Store(nil) })
}

// Cached reports the number and the cost of the completed records the store
// keeps in memory (Config.CacheBytes).
func (s *Store) Cached() (records, bytes int) {
	h := s.held()
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		records += len(sh.records)
		bytes += sh.bytes
		sh.mu.Unlock()
	}
	return records, bytes
}

// WaitKeyFilter waits for the initial build of the key filter.
func (s *Store) WaitKeyFilter() { <-s.held().building }

// KeyFilterOff waits for the key filter's initial build, then drops the
// filter, so that every Claim reads the file.
func (s *Store) KeyFilterOff() {
	h := s.held()
	<-h.building
	h.filter.current.Store(nil)
}

// WithoutKeyFilter returns cfg for a store that, holding the file alone,
// keeps no key filter: its Claims read the file for every key not in
// memory.
func WithoutKeyFilter(cfg Config) Config {
	cfg.noKeyFilter = true
	return cfg
}

// RunSweeper runs the background sweeper once: the held mode's, which may
// build the key filter again, or the file's.
func (s *Store) RunSweeper(ctx context.Context) error { return s.mode.sweepRun(ctx) }

// RebuildKeyFilter builds the key filter again, as the sweeper does.
func (s *Store) RebuildKeyFilter(ctx context.Context) error { return s.held().buildFilter(ctx) }

// KeyFilterAbsent reports whether the key filter says key has no row.
func (s *Store) KeyFilterAbsent(key string) bool { return s.held().filter.absent(key) }

// SetCommitHook makes f run on the writer's goroutine before each commit,
// until the test ends. An error f returns fails that commit.
func SetCommitHook(tb testing.TB, f func() error) {
	commitHook.Store(&f)
	tb.Cleanup(func() { commitHook.Store(nil) })
}

// FillQueue appends n events of route to q in one statement, queued and
// due in an hour (so that a benchmark's claims don't take them), for a
// benchmark of a deep queue.
func (q *Queue) FillQueue(ctx context.Context, route string, n int) error {
	_, err := q.f.w.do(ctx, "fill queue", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		now := q.f.nowMillis()
		res, err := tx.ExecContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?2)
			INSERT INTO idem_queue (route, key, state, since, next_at, received_at, request)
			SELECT ?1, 'idem:fill:' || x, 0, ?3, ?3 + 3600000, ?3, zeroblob(300) FROM c`, route, n, now)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
	return err
}

// PutRaw writes value under key into the file as it is, live for life by
// the store's clock, through the writer: a test's way to plant a value
// that is no record. A store holding its claims in memory is told the key
// may have a row, so that its claims read the file.
func (s *Store) PutRaw(ctx context.Context, key string, value []byte, life time.Duration) error {
	if h, ok := s.mode.(*heldStore); ok {
		h.filter.added(key)
	}
	_, err := s.file.w.do(ctx, "put raw", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO idem_keys (key, value, expires_at) VALUES (?1, ?2, ?3)`, key, value, s.file.expiry(life))
		return 0, err
	})
	return err
}

// OpenPlain opens the file at path with Open's settings and one
// connection, as a pool Open didn't make: a store on it runs every
// statement through database/sql, none raw (raw.go).
func OpenPlain(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	tb.Cleanup(func() { db.Close() })
	return db
}

// OpenPlainReader is OpenReader's pool on the file at path, as a pool
// OpenReader didn't make: a store reading through it runs its reads
// through database/sql, none raw.
func OpenPlainReader(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", readerDSN(path))
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxOpenConns(maxReaders)
	db.SetMaxIdleConns(maxReaders)
	tb.Cleanup(func() { db.Close() })
	return db
}

// RawStatements reports whether the store's writer and its reads run
// raw statements (raw.go).
func (s *Store) RawStatements() (writes, reads bool) {
	return s.file.w.raw != nil, s.file.rawRead != nil
}

// HoldCheckpoints makes the store's background checkpoints (it has a read
// pool) do nothing until ReleaseCheckpoints.
func (s *Store) HoldCheckpoints()    { s.file.w.ckpt.held.Store(true) }
func (s *Store) ReleaseCheckpoints() { s.file.w.ckpt.held.Store(false) }

// WALBackstop and CheckpointWrites are checkpoint.go's bounds.
const (
	WALBackstop      = walBackstop
	CheckpointWrites = checkpointWrites
)
