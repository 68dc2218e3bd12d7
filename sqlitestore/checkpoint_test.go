package sqlitestore_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook/internal/gatewaytest"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/idemhook/idemhook/storetest"
)

// autoCheckpoint is the wal_autocheckpoint of db's connection (the
// writer's: Open's pool has one).
func autoCheckpoint(t *testing.T, db *sql.DB) int {
	t.Helper()
	var pages int
	if err := db.QueryRowContext(t.Context(), "PRAGMA wal_autocheckpoint").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	return pages
}

// fileSize is the size of the file at path.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// With a read pool, the checkpoints run in the background: the writer's
// connection checkpoints only past WALBackstop pages, and the records reach
// the database file itself long before the log holds that many. Close gives
// the writer's connection SQLite's default back.
func TestBackgroundCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	h := openHeld(t, path, sqlitestore.Config{SweepInterval: -1})
	if got := autoCheckpoint(t, h.db); got != sqlitestore.WALBackstop {
		t.Fatalf("the writer's wal_autocheckpoint is %d, want %d", got, sqlitestore.WALBackstop)
	}
	before := fileSize(t, path)
	// A page or so per write, the log stays far below the backstop: only
	// the background checkpoints copy these records into the file.
	n := 3 * sqlitestore.CheckpointWrites
	if n >= sqlitestore.WALBackstop/2 {
		t.Fatalf("%d writes would reach the writer's own checkpoint", n)
	}
	writeRecords(t, h.store, n)
	// More than a key and its record's bytes for each write.
	gatewaytest.Eventually(t, fmt.Sprintf("the database file (%d bytes before) holding %d more records", before, n), func() bool {
		return fileSize(t, path) >= before+int64(n)*64
	})
	h.store.Close()
	if got := autoCheckpoint(t, h.db); got != 1000 {
		t.Fatalf("after Close the writer's wal_autocheckpoint is %d, want SQLite's 1000", got)
	}
}

// Whatever the load, the log stays under the backstop (and the pages
// SQLite's last commit adds past it): the writer's own checkpoint copies
// what the background ones left, and the log starts over.
func TestCheckpointBoundsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	h := openHeld(t, path, sqlitestore.Config{SweepInterval: -1})
	n := 6 * sqlitestore.WALBackstop
	writeRecords(t, h.store, n)
	const page, slack = 4096 + 24, sqlitestore.WALBackstop / 4 // a WAL frame; the commits that land while the last checkpoint runs
	if got, bound := fileSize(t, path+"-wal"), int64(sqlitestore.WALBackstop+slack)*page; got > bound {
		t.Fatalf("the WAL is %d bytes after %d writes, over %d (%d pages)", got, n, bound, sqlitestore.WALBackstop+slack)
	}
}

// Without a read pool there is no connection to checkpoint on beside the
// writer's: SQLite's own checkpoint stays.
func TestNoReaderKeepsAutoCheckpoint(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	newStore(t, db, sqlitestore.Config{SweepInterval: -1})
	if got := autoCheckpoint(t, db); got != 1000 {
		t.Fatalf("wal_autocheckpoint is %d without a read pool, want SQLite's 1000", got)
	}
}

// writeRecords completes n new keys, spread over the key space as body
// hashes are, from 16 goroutines.
func writeRecords(t *testing.T, st *sqlitestore.Store, n int) {
	t.Helper()
	prefix := cpuBenchPrefix()
	errs := make(chan error, 16)
	for g := range 16 {
		go func() {
			claim, done := storetest.BenchRecords()
			for i := g; i < n; i += 16 {
				key := prefix + fmt.Sprintf("%016x", sqlitestore.Mix64(uint64(i)))
				if err := storetest.DeliverFirst(t.Context(), st, key, claim, done); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
