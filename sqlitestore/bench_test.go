package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/idemhook/idemhook/storetest"
)

// BenchmarkStore measures the middleware's store steps on a database file
// opened with Open (WAL, synchronous=NORMAL, one connection), shared with
// other processes (claims in the file) and held alone (claims in memory,
// Config.Lock, as in the gateway).
func BenchmarkStore(b *testing.B) {
	b.Run("shared", func(b *testing.B) {
		storetest.Bench(b, storetest.Harness{
			New: func(tb testing.TB) idemhook.Store {
				db := openDB(tb, filepath.Join(tb.TempDir(), "idemhook.db"))
				return newStore(tb, db, sqlitestore.Config{})
			},
		})
	})
	b.Run("locked", func(b *testing.B) {
		storetest.Bench(b, storetest.Harness{
			New: func(tb testing.TB) idemhook.Store {
				s, _ := heldStore(tb, sqlitestore.Config{})
				return s
			},
		})
	})
}
