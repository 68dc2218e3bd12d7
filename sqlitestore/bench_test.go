package sqlitestore_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/idemhook/idemhook/storetest"
)

// BenchmarkStore measures the middleware's store steps on a database file
// opened with Open (WAL, synchronous=NORMAL, one connection), shared with
// other processes (claims in the file) and held alone (claims in memory,
// Config.Lock, with a read pool and 1 MiB of cached records, as in the
// gateway). The "-sql" rows are the same on pools that Open and OpenReader
// didn't make: every statement through database/sql, none raw (raw.go).
func BenchmarkStore(b *testing.B) {
	for _, sqlPath := range []bool{false, true} {
		suffix := ""
		if sqlPath {
			suffix = "-sql"
		}
		b.Run("shared"+suffix, func(b *testing.B) {
			storetest.Bench(b, storetest.Harness{
				New: func(tb testing.TB) idemhook.Store {
					db, _ := benchPools(tb, filepath.Join(tb.TempDir(), "idemhook.db"), sqlPath)
					s := newStore(tb, db, sqlitestore.Config{}) // reads on db too
					wantStatements(tb, s, sqlPath)
					return s
				},
			})
		})
		b.Run("locked"+suffix, func(b *testing.B) {
			storetest.Bench(b, storetest.Harness{
				New: func(tb testing.TB) idemhook.Store {
					path := filepath.Join(tb.TempDir(), "idemhook.db")
					db, reader := benchPools(tb, path, sqlPath)
					s := newStore(tb, db, sqlitestore.Config{Lock: lockFile(tb, path), Reader: reader, CacheBytes: 1 << 20})
					wantStatements(tb, s, sqlPath)
					return s
				},
			})
		})
	}
}

// benchPools opens the file at path with Open and a read pool with
// OpenReader, whose statements run raw; or, when sqlPath is set, the same
// two with the same settings, on pools that take database/sql's path.
func benchPools(tb testing.TB, path string, sqlPath bool) (db, reader *sql.DB) {
	if sqlPath {
		return sqlitestore.OpenPlain(tb, path), sqlitestore.OpenPlainReader(tb, path)
	}
	return openDB(tb, path), openReader(tb, path)
}

// wantStatements fails the benchmark unless s runs its statements on the
// path it measures: database/sql's when sqlPath is set, else raw.
func wantStatements(tb testing.TB, s *sqlitestore.Store, sqlPath bool) {
	tb.Helper()
	if w, r := s.RawStatements(); w == sqlPath || r == sqlPath {
		tb.Fatalf("raw writes %v, raw reads %v; want both %v", w, r, !sqlPath)
	}
}
