package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/idemhook/idemhook/storetest"
)

// newClock returns a fake clock for the stores of a test. It starts off a
// millisecond boundary, so that the rounding of expiries to milliseconds is
// exercised.
func newClock() *fakeclock.Clock { return fakeclock.New(time.Unix(1_800_000_000, 123_456_789)) }

func openDB(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sqlitestore.Open(path)
	if err != nil {
		tb.Fatalf("Open(%q): %v", path, err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func newStore(tb testing.TB, db *sql.DB, cfg sqlitestore.Config) *sqlitestore.Store {
	tb.Helper()
	s, err := sqlitestore.New(db, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// storeKinds are the configurations the conformance suite runs against:
// open makes a store of that kind on a new file, with cfg's clock and
// sweeper settings.
var storeKinds = []struct {
	name string
	open func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store
}{
	// Claims in the file, shared with other processes.
	{"shared", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
		return newStore(tb, openDB(tb, filepath.Join(tb.TempDir(), "idemhook.db")), cfg)
	}},
	// The same, reading through a pool of its own.
	{"reader", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
		path := filepath.Join(tb.TempDir(), "idemhook.db")
		db := openDB(tb, path)
		cfg.Reader = openReader(tb, path)
		return newStore(tb, db, cfg)
	}},
	// As the gateway opens it: the file held alone, claims, recent records
	// and the key filter in memory.
	{"held", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
		s, _ := heldStore(tb, cfg)
		return s
	}},
	// The held mode's parts, one at a time, so that a fault of one fails
	// its own run rather than hide behind another (the cache answers
	// before the key filter is asked, for one). Claims in memory alone: no
	// key filter, no cache, no read pool.
	{"held-claims", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
		return lockedStore(tb, sqlitestore.WithoutKeyFilter(cfg), false)
	}},
	// With the key filter only, built before the suite's first call.
	{"held-filter", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
		s := lockedStore(tb, cfg, false)
		s.WaitKeyFilter()
		return s
	}},
	// With the cache of completed records only.
	{"held-cache", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
		cfg.CacheBytes = 1 << 20
		return lockedStore(tb, sqlitestore.WithoutKeyFilter(cfg), false)
	}},
	// With the read pool only, and so the background checkpointer.
	{"held-reader", func(tb testing.TB, cfg sqlitestore.Config) idemhook.Store {
		return lockedStore(tb, sqlitestore.WithoutKeyFilter(cfg), true)
	}},
}

// lockedStore opens a store on a new file that it holds alone (cfg.Lock),
// with a read pool of its own when reader is set, and no other setting
// but cfg's.
func lockedStore(tb testing.TB, cfg sqlitestore.Config, reader bool) *sqlitestore.Store {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "idemhook.db")
	cfg.Lock = lockFile(tb, path)
	db := openDB(tb, path)
	if reader {
		cfg.Reader = openReader(tb, path)
	}
	return newStore(tb, db, cfg)
}

func TestConformance(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			clk := newClock() // one per Run: a Run advances it between its subtests
			storetest.Run(t, storetest.Harness{
				New: func(tb testing.TB) idemhook.Store {
					return kind.open(tb, sqlitestore.Config{Now: clk.Now, SweepInterval: -1})
				},
				Advance: clk.Advance,
				Corrupt: corrupt,
			})
		})
	}
}

// TestConformanceRealClock runs the suite with the real clock, as the
// gateway does. Expiry is then checked with short real lifetimes.
func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for real expiries; skipped with -short")
	}
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New:     func(tb testing.TB) idemhook.Store { return kind.open(tb, sqlitestore.Config{}) },
				Corrupt: corrupt,
			})
		})
	}
}

// corrupt is a Harness.Corrupt: a value that is no record, written into
// the file.
func corrupt(tb testing.TB, st idemhook.Store, key string) {
	tb.Helper()
	if err := st.(*sqlitestore.Store).PutRaw(tb.Context(), key, []byte{0xff, 0x00}, time.Hour); err != nil {
		tb.Fatal(err)
	}
}

func pending(token string) *idemhook.Record {
	return &idemhook.Record{State: idemhook.StatePending, Token: token, CreatedAt: time.UnixMilli(1_800_000_000_000)}
}

func completed(body string) *idemhook.Record {
	return &idemhook.Record{
		State:     idemhook.StateCompleted,
		CreatedAt: time.UnixMilli(1_800_000_000_000),
		Status:    http.StatusOK,
		Header:    http.Header{"Content-Type": {"application/json"}},
		Body:      []byte(body),
	}
}

func countRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM idem_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSweep(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	s := newStore(t, db, sqlitestore.Config{Now: clk.Now, SweepInterval: -1})

	// Rows expiring at 1s, 2s, ... 5s from now, plus one completed for an hour.
	for i := 1; i <= 5; i++ {
		key := "idem:test:" + string(rune('a'+i))
		if existing, err := s.Claim(ctx, key, pending(key), time.Duration(i)*time.Second); err != nil || existing != nil {
			t.Fatalf("Claim(%q): %v, %v", key, existing, err)
		}
	}
	claim := pending("kept")
	if _, err := s.Claim(ctx, "idem:test:kept", claim, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:test:kept", claim, completed("{}"), time.Hour); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		advance   time.Duration
		wantSwept int64
		wantRows  int
	}{
		{0, 0, 6},
		{999 * time.Millisecond, 0, 6},
		{time.Millisecond, 1, 5}, // exactly 1s: the first lease has ended
		{2 * time.Second, 2, 3},  // 3s
		{time.Minute, 2, 1},
		{time.Minute, 0, 1},
	}
	for i, tt := range tests {
		clk.Advance(tt.advance)
		n, err := s.Sweep(ctx)
		if err != nil {
			t.Fatalf("step %d: Sweep: %v", i, err)
		}
		if n != tt.wantSwept {
			t.Errorf("step %d: Sweep deleted %d rows, want %d", i, n, tt.wantSwept)
		}
		if got := countRows(t, db); got != tt.wantRows {
			t.Errorf("step %d: %d rows left, want %d", i, got, tt.wantRows)
		}
	}
	got, err := s.Get(ctx, "idem:test:kept")
	if err != nil || got == nil || string(got.Body) != "{}" {
		t.Fatalf("the completed record was swept: %v, %v", got, err)
	}
}

// insertRows writes n pending records straight into the table, in one
// transaction, row i under the key and expiry (Unix milliseconds) row
// returns.
func insertRows(t *testing.T, db *sql.DB, n int, row func(i int) (key string, expiresAt int64)) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	value, _ := pending("x").MarshalBinary()
	for i := range n {
		key, exp := row(i)
		if _, err := tx.Exec(`INSERT INTO idem_keys (key, value, expires_at) VALUES (?, ?, ?)`, key, value, exp); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestSweepBatches sweeps more rows than one batch deletes.
func TestSweepBatches(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	s := newStore(t, db, sqlitestore.Config{Now: clk.Now, SweepInterval: -1})
	const n = 2500
	insertRows(t, db, n, func(i int) (string, int64) {
		return "idem:bulk:" + strings.Repeat("k", 1+i%7) + string(rune(0x4e00+i)), clk.Now().UnixMilli()
	})
	got, err := s.Sweep(ctx)
	if err != nil || got != n {
		t.Fatalf("Sweep: %d, %v; want %d, nil", got, err, n)
	}
	if rows := countRows(t, db); rows != 0 {
		t.Fatalf("%d rows left after Sweep", rows)
	}
}

// mixedTable makes a store whose table holds n rows, one in three of them
// expired, spread over the key order. It returns the store, its database
// and how many rows have expired.
func mixedTable(t *testing.T, n int) (*sqlitestore.Store, *sql.DB, int) {
	t.Helper()
	clk := newClock()
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	s := newStore(t, db, sqlitestore.Config{Now: clk.Now, SweepInterval: -1})
	now := clk.Now().UnixMilli()
	expired := 0
	insertRows(t, db, n, func(i int) (string, int64) {
		if i%3 == 0 {
			expired++
			return fmt.Sprintf("idem:mixed:%05d", i), now - int64(i)
		}
		return fmt.Sprintf("idem:mixed:%05d", i), now + 60_000
	})
	return s, db, expired
}

// TestSweepMixed sweeps expired rows spread among live ones, over several
// batches, and keeps every live row.
func TestSweepMixed(t *testing.T) {
	ctx := t.Context()
	const n = 3500
	s, db, expired := mixedTable(t, n)
	got, err := s.Sweep(ctx)
	if err != nil || got != int64(expired) {
		t.Fatalf("Sweep: %d, %v; want %d, nil", got, err, expired)
	}
	if rows := countRows(t, db); rows != n-expired {
		t.Fatalf("%d rows left after Sweep, want %d", rows, n-expired)
	}
	if got, err := s.Sweep(ctx); err != nil || got != 0 {
		t.Fatalf("second Sweep: %d, %v; want 0, nil", got, err)
	}
}

// TestSweeperRunsAreBounded: one run of the sweeper reads a bounded number
// of rows and the next goes on where it stopped, so a large table is swept
// over several runs instead of read whole at every interval. Here one step
// (1000 rows) per run: 3500 rows take four runs, and together they delete
// exactly the expired rows (1167 of them: one run without the bound would
// delete them all).
func TestSweeperRunsAreBounded(t *testing.T) {
	ctx := t.Context()
	const n = 3500
	s, db, expired := mixedTable(t, n)
	var total int64
	after, runs := "", 0
	for {
		n, next, err := s.SweepFrom(ctx, after, 1)
		if err != nil {
			t.Fatal(err)
		}
		runs++
		if n > 500 {
			t.Fatalf("run %d deleted %d rows: more than one step of 1000 rows holds", runs, n)
		}
		total += n
		if next == "" {
			break
		}
		if next <= after {
			t.Fatalf("run %d went from %q back to %q", runs, after, next)
		}
		after = next
	}
	if runs != 4 || total != int64(expired) {
		t.Fatalf("%d runs deleted %d rows; want 4 runs and %d rows", runs, total, expired)
	}
	if rows := countRows(t, db); rows != n-expired {
		t.Fatalf("%d rows left, want %d", rows, n-expired)
	}
}

// TestSweeper checks that the background sweeper runs, with the real clock
// and a short interval. The test waits for the rows to go. It doesn't time
// the sweeper.
func TestSweeper(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	s := newStore(t, db, sqlitestore.Config{Now: clk.Now, SweepInterval: 5 * time.Millisecond})
	if _, err := s.Claim(ctx, "idem:test:a", pending("a"), time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for countRows(t, db) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not delete the expired row within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestRestart checks that a duplicate sent after the gateway restarts is
// still replayed. The store and the database are closed and reopened on
// the same file. The completed record is still there. The pending claim is
// too, because its owner may have died and its lease frees it. Both keep
// their expiry.
func TestRestart(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	path := filepath.Join(t.TempDir(), "idemhook.db")

	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, sqlitestore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	claim, done := pending("first"), completed(`{"ok":true}`)
	if _, err := s.Claim(ctx, "idem:stone:evt_1", claim, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:stone:evt_1", claim, done, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	running := pending("running")
	if _, err := s.Claim(ctx, "idem:stone:evt_2", running, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db2 := openDB(t, path)
	s2 := newStore(t, db2, sqlitestore.Config{Now: clk.Now})
	existing, err := s2.Claim(ctx, "idem:stone:evt_1", pending("duplicate"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if existing == nil || existing.State != idemhook.StateCompleted || existing.Status != 200 || string(existing.Body) != `{"ok":true}` ||
		existing.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("after a restart, Claim of a completed key returned %+v, want the stored response", existing)
	}
	existing, err = s2.Claim(ctx, "idem:stone:evt_2", pending("duplicate"), 30*time.Second)
	if err != nil || existing == nil || existing.Token != "running" {
		t.Fatalf("after a restart, Claim of a pending key: %+v, %v; want the pending claim", existing, err)
	}
	// The owner of evt_2 is gone. Its lease frees the key.
	clk.Advance(30 * time.Second)
	if existing, err := s2.Claim(ctx, "idem:stone:evt_2", pending("retry"), 30*time.Second); err != nil || existing != nil {
		t.Fatalf("Claim after the lease of the dead owner: %+v, %v; want the claim stored", existing, err)
	}
	// And the completed record keeps its TTL.
	clk.Advance(24 * time.Hour)
	if got, err := s2.Get(ctx, "idem:stone:evt_1"); err != nil || got != nil {
		t.Fatalf("Get after the TTL: %+v, %v; want nil", got, err)
	}
}

// TestTwoProcesses claims one key from many goroutines through two
// separate *sql.DB on one file, as two gateway processes would. Exactly
// one wins, and no call fails with SQLITE_BUSY.
func TestTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	stores := []*sqlitestore.Store{
		newStore(t, openDB(t, path), sqlitestore.Config{}),
		newStore(t, openDB(t, path), sqlitestore.Config{}),
	}
	const keys, racers = 20, 100
	for k := range keys {
		key := "idem:test:" + string(rune('A'+k))
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, racers)
		for i := range racers {
			wg.Go(func() {
				<-start
				existing, err := stores[i%2].Claim(context.Background(), key, pending(key+string(rune('a'+i%26))), time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if existing == nil {
					wins.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("key %s: Claim: %v", key, err)
		}
		if got := wins.Load(); got != 1 {
			t.Fatalf("key %s: %d claims won, want exactly 1", key, got)
		}
	}
}

func TestCorruptValue(t *testing.T) {
	ctx := t.Context()
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	s := newStore(t, db, sqlitestore.Config{SweepInterval: -1})
	if _, err := db.Exec(`INSERT INTO idem_keys (key, value, expires_at) VALUES ('idem:test:bad', x'ff00', ?)`,
		time.Now().Add(time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "idem:test:bad", pending("a"), time.Minute); !errors.Is(err, idemhook.ErrCorruptRecord) {
		t.Errorf("Claim of a corrupt value: got %v, want ErrCorruptRecord", err)
	}
	if _, err := s.Get(ctx, "idem:test:bad"); !errors.Is(err, idemhook.ErrCorruptRecord) {
		t.Errorf("Get of a corrupt value: got %v, want ErrCorruptRecord", err)
	}
	if err := s.Complete(ctx, "idem:test:bad", pending("a"), completed(""), time.Minute); !errors.Is(err, idemhook.ErrNotOwner) {
		t.Errorf("Complete over a corrupt value: got %v, want ErrNotOwner", err)
	}
	// Delete clears it, so the next delivery can claim the key.
	if ok, err := s.Delete(ctx, "idem:test:bad"); err != nil || !ok {
		t.Fatalf("Delete: %t, %v", ok, err)
	}
	if existing, err := s.Claim(ctx, "idem:test:bad", pending("a"), time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim after Delete: %+v, %v", existing, err)
	}
}

func TestNewRejectsNewerSchema(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	s := newStore(t, db, sqlitestore.Config{SweepInterval: -1})
	s.Close()
	if _, err := db.Exec(`UPDATE idemhook_schema SET version = ? WHERE component = 'sqlitestore'`, sqlitestore.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := sqlitestore.New(db, sqlitestore.Config{SweepInterval: -1})
	if want := fmt.Sprintf("schema version %d", sqlitestore.SchemaVersion+1); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("New on a newer schema: got %v, want a schema version error", err)
	}
}

func TestInvalidInput(t *testing.T) {
	ctx := t.Context()
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	s := newStore(t, db, sqlitestore.Config{SweepInterval: -1})
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"claim nil", func() error { _, err := s.Claim(ctx, "k", nil, time.Second); return err }, "nil record"},
		{"claim zero lease", func() error { _, err := s.Claim(ctx, "k", pending("a"), 0); return err }, "lifetime must be positive"},
		{"complete bad state", func() error { return s.Complete(ctx, "k", pending("a"), &idemhook.Record{}, time.Second) }, "cannot encode"},
		{"extend negative", func() error { return s.Extend(ctx, "k", pending("a"), -time.Second) }, "lifetime must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := sqlitestore.New(nil, sqlitestore.Config{}); err == nil {
		t.Error("New(nil): got nil error")
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{"plain", filepath.Join(dir, "a.db"), ""},
		{"odd characters", filepath.Join(dir, "we?ird #100%.db"), ""},
		{"missing directory", filepath.Join(dir, "nope", "a.db"), "does the directory exist"},
		{"empty", "", "empty path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := sqlitestore.Open(tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Open(%q): got %v, want an error containing %q", tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tt.path, err)
			}
			defer db.Close()
			if _, err := os.Stat(tt.path); err != nil {
				t.Errorf("the database file was not created under its name: %v", err)
			}
			for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "1", "foreign_keys": "1", "busy_timeout": "10000"} {
				var got string
				if err := db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
				}
			}
			if _, err := sqlitestore.New(db, sqlitestore.Config{SweepInterval: -1}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
