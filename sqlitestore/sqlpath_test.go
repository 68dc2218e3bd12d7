package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/idemhook/idemhook/storetest"
)

// The stores on pools from Open and OpenReader run their first
// deliveries' writes and their replays' reads as raw statements on the
// driver's connection; stores on other pools run them through
// database/sql, as they did before (raw.go). TestConformance covers the
// first; TestConformanceDatabaseSQL runs the suite on the second, so that
// both stay one store.

func TestRawStatementsOnlyOnOpensPools(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	s := newStore(t, openDB(t, path), sqlitestore.Config{SweepInterval: -1, Reader: openReader(t, path)})
	if w, r := s.RawStatements(); !w || !r {
		t.Errorf("store on Open's and OpenReader's pools: raw writes %v, raw reads %v; want both", w, r)
	}
	plain := newStore(t, sqlitestore.OpenPlain(t, filepath.Join(t.TempDir(), "plain.db")), sqlitestore.Config{SweepInterval: -1})
	if w, r := plain.RawStatements(); w || r {
		t.Errorf("store on a pool Open didn't make: raw writes %v, raw reads %v; want neither", w, r)
	}
}

func TestConformanceDatabaseSQL(t *testing.T) {
	kinds := []struct {
		name string
		open func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store
	}{
		{"shared", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
			return newStore(tb, sqlitestore.OpenPlain(tb, filepath.Join(tb.TempDir(), "idemhook.db")), cfg)
		}},
		{"held", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
			path := filepath.Join(tb.TempDir(), "idemhook.db")
			cfg.Lock = lockFile(tb, path)
			cfg.CacheBytes = 1 << 20
			return newStore(tb, sqlitestore.OpenPlain(tb, path), cfg)
		}},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			clk := newClock()
			storetest.Run(t, storetest.Harness{
				New: func(tb testing.TB) idemhook.Store {
					s := kind.open(tb, sqlitestore.Config{Now: clk.Now, SweepInterval: -1})
					if w, r := s.(*sqlitestore.Store).RawStatements(); w || r {
						tb.Fatalf("raw writes %v, raw reads %v on a pool Open didn't make", w, r)
					}
					return s
				},
				Advance: clk.Advance,
				Corrupt: corrupt,
			})
		})
	}
}
