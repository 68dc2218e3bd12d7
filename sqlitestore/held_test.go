package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
)

// lockFile takes the lock of the database file at path for the test.
func lockFile(tb testing.TB, path string) *sqlitestore.FileLock {
	tb.Helper()
	l, err := sqlitestore.Lock(path)
	if err != nil {
		tb.Fatalf("Lock(%q): %v", path, err)
	}
	tb.Cleanup(func() { l.Unlock() })
	return l
}

// openReader opens a read pool on the file at path for the test.
func openReader(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	r, err := sqlitestore.OpenReader(path)
	if err != nil {
		tb.Fatalf("OpenReader(%q): %v", path, err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// heldStore opens a store on a new file as the gateway does: holding the
// file's lock, so that it keeps pending claims in memory, reading through a
// pool of its own, and keeping recent records in memory (1 MiB unless cfg
// says).
func heldStore(tb testing.TB, cfg sqlitestore.Config) (*sqlitestore.Store, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "idemhook.db")
	return openHeld(tb, path, cfg).store, path
}

// held is a store opened by openHeld, with the pools a test may act on.
type held struct {
	store  *sqlitestore.Store
	db     *sql.DB // the store's database: its one connection is the writer's
	reader *sql.DB // Config.Reader
}

// openHeld is heldStore on the file at path, which may hold records
// already.
func openHeld(tb testing.TB, path string, cfg sqlitestore.Config) held {
	tb.Helper()
	cfg.Lock = lockFile(tb, path)
	h := held{db: openDB(tb, path)}
	h.reader = openReader(tb, path)
	cfg.Reader = h.reader
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = 1 << 20
	}
	h.store = newStore(tb, h.db, cfg)
	return h
}

// With the lock, a pending claim is never written to the file: only the
// completed record is.
func TestHeldClaimsStayOutOfTheFile(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	s, path := heldStore(t, sqlitestore.Config{Now: clk.Now, SweepInterval: -1})
	db := openDB(t, path) // a second connection pool, to look at the file itself

	claim := pending("owner")
	if existing, err := s.Claim(ctx, "idem:test:a", claim, time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim: %+v, %v", existing, err)
	}
	if n := countRows(t, db); n != 0 {
		t.Fatalf("after Claim the file holds %d rows, want 0", n)
	}
	if got, err := s.Get(ctx, "idem:test:a"); err != nil || got == nil || got.Token != "owner" {
		t.Fatalf("Get of the held claim: %+v, %v", got, err)
	}
	if err := s.Extend(ctx, "idem:test:a", claim, time.Hour); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	clk.Advance(time.Minute) // past the first lease, within the extended one
	if existing, err := s.Claim(ctx, "idem:test:a", pending("other"), time.Minute); err != nil || existing == nil || existing.Token != "owner" {
		t.Fatalf("Claim after the first lease, within the extended one: %+v, %v", existing, err)
	}
	if err := s.Complete(ctx, "idem:test:a", claim, completed(`{"ok":true}`), time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if n := countRows(t, db); n != 1 {
		t.Fatalf("after Complete the file holds %d rows, want 1", n)
	}
	if err := s.Complete(ctx, "idem:test:a", claim, completed(`{"again":true}`), time.Hour); err != idemhook.ErrNotOwner {
		t.Fatalf("a second Complete: %v, want ErrNotOwner", err)
	}

	// A released claim leaves nothing behind.
	second := pending("second")
	if _, err := s.Claim(ctx, "idem:test:b", second, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "idem:test:b", pending("not the owner")); err != idemhook.ErrNotOwner {
		t.Fatalf("Release with another token: %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, "idem:test:b", second); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := countRows(t, db); n != 1 {
		t.Fatalf("after Release the file holds %d rows, want 1", n)
	}
	if existing, err := s.Claim(ctx, "idem:test:b", pending("third"), time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim after Release: %+v, %v", existing, err)
	}

	// Delete frees a held claim, and says it was there.
	if live, err := s.Delete(ctx, "idem:test:b"); err != nil || !live {
		t.Fatalf("Delete of a held claim: %v, %v; want true", live, err)
	}
	if existing, err := s.Claim(ctx, "idem:test:b", pending("fourth"), time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim after Delete: %+v, %v", existing, err)
	}

	// The sweeper drops a claim whose lease lapsed (its owner never came
	// back), as Claim would.
	clk.Advance(2 * time.Minute)
	if got, err := s.Get(ctx, "idem:test:b"); err != nil || got != nil {
		t.Fatalf("Get after the lease: %+v, %v; want nil", got, err)
	}
}

// Racing claims of a new key, whose winner completes it at once: every
// other claim must see the winner's pending claim or its completed record,
// never a free key. The windows where a second execution could slip in are
// the moment a claim leaves memory for the file, and a claim that read the
// file just before a record was committed there.
func TestHeldClaimsOneWinnerPerKey(t *testing.T) {
	s, _ := heldStore(t, sqlitestore.Config{})
	ctx := context.Background()
	const keys, racers = 300, 8
	for k := range keys {
		key := fmt.Sprintf("idem:test:race-%d", k)
		var wins atomic.Int64
		var completedAt atomic.Bool
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				for n := 0; ; n++ {
					afterComplete := completedAt.Load()
					claim := pending(fmt.Sprintf("racer-%d-%d", i, n))
					existing, err := s.Claim(ctx, key, claim, time.Hour)
					if err != nil {
						t.Errorf("%s: Claim: %v", key, err)
						return
					}
					if existing == nil { // won: run the "handler" and complete at once
						wins.Add(1)
						if err := s.Complete(ctx, key, claim, completed(`{"ok":true}`), time.Hour); err != nil {
							t.Errorf("%s: Complete: %v", key, err)
						}
						completedAt.Store(true)
						return
					}
					if existing.State == idemhook.StateCompleted {
						return
					}
					if afterComplete {
						t.Errorf("%s: a Claim begun after Complete returned found the pending claim %q", key, existing.Token)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("%s: %d claims won, want exactly 1", key, n)
		}
	}
}

func TestLockMustBeTheFilesOwn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "idemhook.db")
	db := openDB(t, path)
	lock := lockFile(t, path)

	other := lockFile(t, filepath.Join(dir, "other.db"))
	if _, err := sqlitestore.New(db, sqlitestore.Config{Lock: other}); err == nil || !strings.Contains(err.Error(), "other.db") {
		t.Errorf("New with the lock of another file: %v", err)
	}
	mem := openDB(t, ":memory:")
	if _, err := sqlitestore.New(mem, sqlitestore.Config{Lock: lock}); err == nil || !strings.Contains(err.Error(), "has no file") {
		t.Errorf("New of an in-memory database with a lock: %v", err)
	}

	first := newStore(t, db, sqlitestore.Config{Lock: lock})
	if _, err := sqlitestore.New(db, sqlitestore.Config{Lock: lock}); err == nil || !strings.Contains(err.Error(), "one Store per file") {
		t.Errorf("a second Store with the lock of the first: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	newStore(t, db, sqlitestore.Config{Lock: lock}) // the first is closed: the lock is free for another

	released := lockFile(t, filepath.Join(dir, "released.db"))
	released.Unlock()
	if _, err := sqlitestore.New(openDB(t, filepath.Join(dir, "released.db")), sqlitestore.Config{Lock: released}); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("New with a released lock: %v", err)
	}
}

// After a restart, a process that held its claims in memory finds the keys
// it completed replayed and the ones it was running free at once.
func TestRestartHeldClaims(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	path := filepath.Join(t.TempDir(), "idemhook.db")
	lock := lockFile(t, path)
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, sqlitestore.Config{Now: clk.Now, Lock: lock})
	if err != nil {
		t.Fatal(err)
	}
	claim := pending("first")
	if _, err := s.Claim(ctx, "idem:stone:evt_1", claim, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:stone:evt_1", claim, completed(`{"ok":true}`), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "idem:stone:evt_2", pending("running"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db.Close()

	s2 := newStore(t, openDB(t, path), sqlitestore.Config{Now: clk.Now, Lock: lock})
	if existing, err := s2.Claim(ctx, "idem:stone:evt_1", pending("duplicate"), 30*time.Second); err != nil || existing == nil || string(existing.Body) != `{"ok":true}` {
		t.Fatalf("after a restart, Claim of a completed key: %+v, %v; want the stored response", existing, err)
	}
	if existing, err := s2.Claim(ctx, "idem:stone:evt_2", pending("retry"), 30*time.Second); err != nil || existing != nil {
		t.Fatalf("after a restart, Claim of the key that was running: %+v, %v; want it free", existing, err)
	}
}

// A claim that read the file just before another claim of the key was taken
// and completed must find that record, not take the key: the completion
// happens, on cue, between the first claim's read of the file and its
// second look at the map.
func TestHeldClaimSeesARecordCompletedWhileItReadTheFile(t *testing.T) {
	ctx := t.Context()
	s, _ := heldStore(t, sqlitestore.Config{SweepInterval: -1})
	s.KeyFilterOff() // the filter would spare the read this test is about
	var fired atomic.Bool
	s.SetClaimReadHook(t, func(key string) {
		if !fired.CompareAndSwap(false, true) {
			return
		}
		other := pending("other")
		if existing, err := s.Claim(ctx, key, other, time.Hour); err != nil || existing != nil {
			t.Errorf("the other Claim: %+v, %v; want it to win", existing, err)
			return
		}
		if err := s.Complete(ctx, key, other, completed(`{"by":"other"}`), time.Hour); err != nil {
			t.Errorf("the other Complete: %v", err)
		}
	})
	existing, err := s.Claim(ctx, "idem:test:late", pending("first"), time.Hour)
	if !fired.Load() {
		t.Fatal("the hook never ran")
	}
	if err != nil || existing == nil || string(existing.Body) != `{"by":"other"}` {
		t.Fatalf("Claim that read the file before the other's record was committed: %+v, %v; want the other's record", existing, err)
	}
}

func TestOpenReader(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "idemhook.db")
	db := openDB(t, path)
	newStore(t, db, sqlitestore.Config{SweepInterval: -1})
	r := openReader(t, path)
	if _, err := r.Exec(`DELETE FROM idem_keys`); err == nil {
		t.Error("a write through the reader pool succeeded; want it refused (query_only)")
	}

	// A file that Open never set to WAL is refused: its reads would block
	// the writer.
	plain := filepath.Join(dir, "plain.db")
	pdb, err := sql.Open("sqlite", plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pdb.Exec(`CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	pdb.Close()
	if r, err := sqlitestore.OpenReader(plain); err == nil || !strings.Contains(err.Error(), "want wal") {
		if r != nil {
			r.Close()
		}
		t.Errorf("OpenReader of a file not in WAL mode: %v", err)
	}
	if _, err := sqlitestore.OpenReader(":memory:"); err == nil {
		t.Error("OpenReader(\":memory:\") succeeded; want an error")
	}

	// A reader of another file is refused by New.
	other := filepath.Join(dir, "other.db")
	openDB(t, other)
	if _, err := sqlitestore.New(db, sqlitestore.Config{Reader: openReader(t, other)}); err == nil || !strings.Contains(err.Error(), "other.db") {
		t.Errorf("New with the reader of another file: %v", err)
	}
}

// With a reader pool, a replay is answered while a transaction holds the
// one connection of the store's database (the writer's commit, an audit
// batch): without it, the Get would wait for the connection.
func TestReaderAnswersBesideAWrite(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idemhook.db")
	db := openDB(t, path)
	s := newStore(t, db, sqlitestore.Config{SweepInterval: -1, Reader: openReader(t, path)})
	claim := pending("owner")
	if _, err := s.Claim(ctx, "idem:test:r", claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:test:r", claim, completed(`{"ok":true}`), time.Hour); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil) // takes db's only connection, and the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO idem_keys (key, value, expires_at) VALUES ('idem:test:other', x'00', 0)`); err != nil {
		t.Fatal(err)
	}
	within, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s.Get(within, "idem:test:r")
	if err != nil || got == nil || string(got.Body) != `{"ok":true}` {
		t.Fatalf("Get while a transaction holds the database's connection: %+v, %v", got, err)
	}
	existing, err := s.Claim(within, "idem:test:r", pending("duplicate"), time.Minute)
	if err != nil || existing == nil || existing.State != idemhook.StateCompleted {
		t.Fatalf("Claim of a completed key while a transaction holds the connection: %+v, %v", existing, err)
	}
}

// With CacheBytes, a recent record is answered from memory: with the reader
// pool closed under the store, Get and Claim of a cached key still answer,
// and the read of a key that isn't cached fails.
func TestCacheAnswersRecentRecords(t *testing.T) {
	ctx := t.Context()
	h := openHeld(t, filepath.Join(t.TempDir(), "idemhook.db"), sqlitestore.Config{SweepInterval: -1, CacheBytes: 1 << 20})
	s, reader := h.store, h.reader
	claim := pending("owner")
	if _, err := s.Claim(ctx, "idem:test:cached", claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:test:cached", claim, completed(`{"ok":true}`), time.Hour); err != nil {
		t.Fatal(err)
	}
	reader.Close()
	if got, err := s.Get(ctx, "idem:test:cached"); err != nil || got == nil || string(got.Body) != `{"ok":true}` {
		t.Fatalf("Get of a cached record with the reader closed: %+v, %v", got, err)
	}
	if existing, err := s.Claim(ctx, "idem:test:cached", pending("duplicate"), time.Minute); err != nil || existing == nil || existing.State != idemhook.StateCompleted {
		t.Fatalf("Claim of a cached record with the reader closed: %+v, %v", existing, err)
	}
	if _, err := s.Get(ctx, "idem:test:not-cached"); err == nil {
		t.Fatal("Get of a key that isn't cached, with the reader closed, succeeded: the test would not tell a cached answer from a read")
	}
}

// The cache keeps to its budget, dropping records as new ones come, and
// each dropped record is still read from the file.
func TestCacheKeepsToItsBudget(t *testing.T) {
	ctx := t.Context()
	const budget = 64 << 10
	s, _ := heldStore(t, sqlitestore.Config{SweepInterval: -1, CacheBytes: budget})
	const n = 2000
	for i := range n {
		key := fmt.Sprintf("idem:test:budget-%d", i)
		claim := pending(key)
		if _, err := s.Claim(ctx, key, claim, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, key, claim, completed(fmt.Sprintf(`{"n":%d}`, i)), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	records, bytes := s.Cached()
	if records == 0 || records >= n || bytes > budget {
		t.Fatalf("cache after %d records: %d records, %d bytes; want some but not all, within %d bytes", n, records, bytes, budget)
	}
	for i := range n {
		key := fmt.Sprintf("idem:test:budget-%d", i)
		got, err := s.Get(ctx, key)
		if err != nil || got == nil || string(got.Body) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("Get %s: %+v, %v", key, got, err)
		}
	}
}

func TestCacheNeedsTheLock(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	if _, err := sqlitestore.New(db, sqlitestore.Config{CacheBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "together with Lock") {
		t.Fatalf("New with CacheBytes and no lock: %v", err)
	}
}

// The key filter knows the keys a file held when the store opened it: with
// the reader pool closed under the store, a Claim of a new key still wins
// (the filter says the file can't hold it), while a Claim of a key of the
// file must read it, and fails.
func TestKeyFilterKnowsTheFilesKeys(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idemhook.db")
	func() { // an earlier process, without the lock, writes the records
		db, err := sqlitestore.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		old, err := sqlitestore.New(db, sqlitestore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		for i := range 1000 {
			key := fmt.Sprintf("idem:test:old-%d", i)
			if i == 0 {
				key = "" // the first key in key order, which "after ''" would skip
			}
			claim := pending(key)
			if _, err := old.Claim(ctx, key, claim, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := old.Complete(ctx, key, claim, completed(`{"old":true}`), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}()

	h := openHeld(t, path, sqlitestore.Config{SweepInterval: -1})
	s, reader := h.store, h.reader
	s.WaitKeyFilter()
	for i := range 1000 {
		key := fmt.Sprintf("idem:test:old-%d", i)
		if i == 0 {
			key = ""
		}
		if s.KeyFilterAbsent(key) {
			t.Fatalf("the key filter says %q, a key of the file, is absent", key)
		}
	}
	reader.Close()
	for i := range 100 {
		key := fmt.Sprintf("idem:test:new-%d", i)
		if existing, err := s.Claim(ctx, key, pending(key), time.Minute); err != nil || existing != nil {
			t.Fatalf("Claim of the new key %s with the reader closed: %+v, %v; want it taken without a read", key, existing, err)
		}
	}
	if _, err := s.Claim(ctx, "idem:test:old-7", pending("duplicate"), time.Minute); err == nil {
		t.Fatal("Claim of a key of the file succeeded with the reader closed: it did not read the file")
	}
}

// A store that keeps no key filter (the conformance suite's held-claims,
// held-cache and held-reader) reads the file in every Claim of a new key,
// after a run of its sweeper too, which doesn't build the filter for it.
// The same store with the filter reads it in none.
func TestWithoutKeyFilterClaimsReadTheFile(t *testing.T) {
	for _, tt := range []struct {
		name   string
		filter bool
		reads  int32
	}{
		{"without", false, 2},
		{"with", true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := sqlitestore.Config{SweepInterval: -1}
			if !tt.filter {
				cfg = sqlitestore.WithoutKeyFilter(cfg)
			}
			s := lockedStore(t, cfg, false)
			if tt.filter {
				s.WaitKeyFilter()
			}
			var reads atomic.Int32
			s.SetClaimReadHook(t, func(string) { reads.Add(1) })
			claimNew := func(key string) {
				t.Helper()
				if existing, err := s.Claim(t.Context(), key, pending(key), time.Minute); err != nil || existing != nil {
					t.Fatalf("Claim(%s) of a new key: %+v, %v", key, existing, err)
				}
			}
			claimNew("idem:test:a")
			if err := s.RunSweeper(t.Context()); err != nil {
				t.Fatal(err)
			}
			claimNew("idem:test:b")
			if n := reads.Load(); n != tt.reads {
				t.Errorf("two Claims of new keys read the file %d times, want %d", n, tt.reads)
			}
		})
	}
}

// A key completed while the filter is rebuilt is in the new filter: the
// rebuild puts the new filter in place on the writer's goroutine before it
// scans the file, so a record is either in the scan or added to the new
// filter by its Complete.
func TestKeyFilterRebuildMissesNoCompletedKey(t *testing.T) {
	ctx := t.Context()
	s, _ := heldStore(t, sqlitestore.Config{SweepInterval: -1})
	s.WaitKeyFilter()
	var wg sync.WaitGroup
	keys := make([][]string, 8)
	for w := range keys {
		wg.Go(func() {
			for n := range 300 {
				key := fmt.Sprintf("idem:test:w%d-%d", w, n)
				claim := pending(key)
				if _, err := s.Claim(ctx, key, claim, time.Minute); err != nil {
					t.Error(err)
					return
				}
				if err := s.Complete(ctx, key, claim, completed(`{"ok":true}`), time.Hour); err != nil {
					t.Error(err)
					return
				}
				keys[w] = append(keys[w], key)
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	rebuilds := 0
	for running := true; running; rebuilds++ {
		select {
		case <-finished:
			running = false // one more rebuild, with every key in the file
		default:
		}
		if err := s.RebuildKeyFilter(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rebuilds", rebuilds)
	total := 0
	for _, ks := range keys {
		for _, key := range ks {
			if s.KeyFilterAbsent(key) {
				t.Fatalf("the rebuilt filter says %s, a completed key, is absent", key)
			}
		}
		total += len(ks)
	}
	if total != 8*300 {
		t.Fatalf("%d keys completed, want %d", total, 8*300)
	}
}

// A rebuild of the key filter that starts while a Complete's write has run
// but is not committed must still end with the key in the new filter. The
// rebuild is started, on cue, just before that commit. It can only put its
// filter in place after the commit (its swap is a write, behind this one),
// so its scan sees the record. Were the swap done at once, the scan would
// miss the record and the Complete would have added the key to the old
// filter only.
func TestKeyFilterRebuildDuringACommit(t *testing.T) {
	ctx := t.Context()
	s, _ := heldStore(t, sqlitestore.Config{SweepInterval: -1})
	s.WaitKeyFilter()
	var fired atomic.Bool
	rebuilt := make(chan error, 1)
	sqlitestore.SetCommitHook(t, func() error {
		if !fired.CompareAndSwap(false, true) {
			return nil
		}
		go func() { rebuilt <- s.RebuildKeyFilter(ctx) }()
		select { // a swap done at once would finish the rebuild here
		case err := <-rebuilt:
			rebuilt <- err
		case <-time.After(200 * time.Millisecond):
		}
		return nil
	})
	claim := pending("owner")
	if _, err := s.Claim(ctx, "idem:test:during", claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:test:during", claim, completed(`{"ok":true}`), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := <-rebuilt; err != nil {
		t.Fatal(err)
	}
	if s.KeyFilterAbsent("idem:test:during") {
		t.Fatal("the filter rebuilt during the Complete's commit says its key is absent")
	}
}

// Once a write to the file fails, Claim fails with it (its claim would
// otherwise be taken in memory, and the delivery's record be lost after its
// handler ran), until a write succeeds again: the store's probe write clears
// the failure by itself.
func TestFailedWriteFailsClaimsUntilAWriteSucceeds(t *testing.T) {
	ctx := t.Context()
	h := openHeld(t, filepath.Join(t.TempDir(), "idemhook.db"), sqlitestore.Config{SweepInterval: -1})
	s, db := h.store, h.db
	s.WaitKeyFilter()
	claim := pending("owner")
	if _, err := s.Claim(ctx, "idem:test:a", claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA query_only = 1"); err != nil { // db's one connection: the writer's
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:test:a", claim, completed(`{"ok":true}`), time.Hour); err == nil {
		t.Fatal("Complete on a read-only connection succeeded")
	}
	if _, err := s.Claim(ctx, "idem:test:b", pending("b"), time.Minute); err == nil || !strings.Contains(err.Error(), "can't be written") {
		t.Fatalf("Claim after a failed write: %v; want it refused", err)
	}
	if _, err := db.Exec("PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		existing, err := s.Claim(ctx, "idem:test:b", pending("b"), time.Minute)
		if err == nil && existing == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim 10s after the file took writes again: %+v, %v", existing, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A Delete whose write fails takes nothing away: the claim it removed from
// memory, on the writer's goroutine, is put back when its commit fails, so
// its owner still completes it.
func TestFailedDeleteKeepsTheClaim(t *testing.T) {
	ctx := t.Context()
	s, _ := heldStore(t, sqlitestore.Config{SweepInterval: -1})
	s.WaitKeyFilter()
	claim := pending("owner")
	if _, err := s.Claim(ctx, "idem:test:del", claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	fail.Store(true)
	sqlitestore.SetCommitHook(t, func() error {
		if fail.Swap(false) {
			return errors.New("injected: the commit failed")
		}
		return nil
	})
	if _, err := s.Delete(ctx, "idem:test:del"); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Delete whose commit fails: %v; want the commit's error", err)
	}
	if got, err := s.Get(ctx, "idem:test:del"); err != nil || got == nil || got.Token != "owner" {
		t.Fatalf("Get after the failed Delete: %+v, %v; want the claim still held", got, err)
	}
	if err := s.Complete(ctx, "idem:test:del", claim, completed(`{"ok":true}`), time.Hour); err != nil {
		t.Fatalf("Complete by the owner after the failed Delete: %v", err)
	}
}
