package sqlitestore_test

import (
	"database/sql"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook/internal/testutil"
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
	testutil.Eventually(t, fmt.Sprintf("the database file (%d bytes before) holding %d more records", before, n), func() bool {
		return fileSize(t, path) >= before+int64(n)*64
	})
	h.store.Close()
	if got := autoCheckpoint(t, h.db); got != 1000 {
		t.Fatalf("after Close the writer's wal_autocheckpoint is %d, want SQLite's 1000", got)
	}
}

// The writer's own checkpoint bounds the log, and the background ones never
// keep it from starting over.
//
// A bound on the log's size with the background checkpoints running would
// depend on the machine's speed: the writer's checkpoint past the backstop
// finds a background one busy copying and leaves the log as it is, so the
// log grows past the backstop by whatever the writer commits until that copy
// ends (under load, 13,600 pages against the backstop's 10,000). So the
// bound is checked with the background checkpoints held: the writer's
// checkpoint runs inside the commit that takes the log past the backstop,
// with no other checkpoint to wait for, and the next commit starts the log
// over, so it never holds more than the backstop and one commit's pages,
// however slow the machine. With the background checkpoints running again,
// the log must still start over, again and again, instead of growing with
// the writes; its header's checkpoint sequence counts those restarts.
func TestCheckpointBoundsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	h := openHeld(t, path, sqlitestore.Config{SweepInterval: -1})
	const (
		page = 4096 + 24 // a WAL frame: a page and its header
		// commitPages bounds the pages one commit adds: writeRecords' 16
		// writers have at most 16 writes in a group commit, each a leaf
		// page of idem_keys and, on a split, its new sibling and the
		// parents up to the root (8 pages: more levels than these keys
		// take), and the header page.
		commitPages = 16*8 + 1
	)
	n := 3 * sqlitestore.WALBackstop

	h.store.HoldCheckpoints()
	writeRecords(t, h.store, n)
	size := fileSize(t, path+"-wal")
	if bound := int64(32 + (sqlitestore.WALBackstop+commitPages)*page); size > bound {
		t.Fatalf("with the background checkpoints held, the WAL is %d bytes after %d writes, over %d (%d + %d pages)",
			size, n, bound, sqlitestore.WALBackstop, commitPages)
	}
	held := walSequence(t, path)
	if held < 1 {
		t.Fatalf("with the background checkpoints held, the log did not start over in %d writes: the backstop was not reached", n)
	}

	h.store.ReleaseCheckpoints()
	writeRecords(t, h.store, n)
	restarts := walSequence(t, path) - held
	if restarts < 1 {
		t.Fatalf("with the background checkpoints running, the log did not start over in %d writes", n)
	}
	t.Logf("the WAL: %d bytes at most after %d writes with the background checkpoints held (%d restarts); %d bytes after %d more with them running (%d restarts)",
		size, n, held, fileSize(t, path+"-wal"), n, restarts)
}

// walSequence is the checkpoint sequence number in the header of the WAL
// of the database at path: SQLite adds one each time the log starts over.
func walSequence(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := os.Open(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hdr [32]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		t.Fatal(err)
	}
	return binary.BigEndian.Uint32(hdr[12:16])
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
