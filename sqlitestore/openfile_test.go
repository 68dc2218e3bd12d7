package sqlitestore_test

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/syncbuf"
	"github.com/idemhook/idemhook/sqlitestore"
)

// OpenFile takes the lock, frees the claims a dead process left, keeps a
// second process out, and Close releases the file.
func TestOpenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ctx := t.Context()
	const lease = 30 * time.Second

	// A process that shares the file (no lock) leaves a pending claim.
	db := openDB(t, path)
	s := newStore(t, db, sqlitestore.Config{})
	rec := &idemhook.Record{State: idemhook.StatePending, Token: "tok", CreatedAt: time.Now()}
	if existing, err := s.Claim(ctx, "dead", rec, lease); err != nil || existing != nil {
		t.Fatalf("claim: %v %v", existing, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	var logs syncbuf.Buffer // the key filter's build logs from its own goroutine
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	f, err := sqlitestore.OpenFile(ctx, path, sqlitestore.FileConfig{Config: sqlitestore.Config{Logger: logger, CacheBytes: 1 << 20}, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if f.Lock == nil || f.Freed != 1 {
		t.Fatalf("Lock = %v, Freed = %d; want a lock and 1", f.Lock, f.Freed)
	}
	if got, err := f.Store.Get(ctx, "dead"); err != nil || got != nil {
		t.Fatalf("the dead claim after OpenFile: %v %v", got, err)
	}
	if !strings.Contains(logs.String(), "this process holds the file alone") || !strings.Contains(logs.String(), "freed_pending_claims=1") {
		t.Errorf("log = %q", logs.String())
	}

	_, err = sqlitestore.OpenFile(ctx, path, sqlitestore.FileConfig{Lease: lease})
	if !errors.Is(err, sqlitestore.ErrLocked) || !strings.HasSuffix(err.Error(), "; one gateway process per SQLite file: stop the other one, or give this one another path") {
		t.Fatalf("second OpenFile = %v, want ErrLocked with the advice", err)
	}

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := sqlitestore.Lock(path)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	l.Unlock()
}

func TestOpenFileRefuses(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	// Lock and Reader are OpenFile's.
	l, err := sqlitestore.Lock(filepath.Join(dir, "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if _, err := sqlitestore.OpenFile(ctx, filepath.Join(dir, "a.db"), sqlitestore.FileConfig{Config: sqlitestore.Config{Lock: l}, Lease: time.Second}); err == nil {
		t.Error("OpenFile accepted Config.Lock")
	}
	// A step that fails closes what the steps before opened: the lock too.
	path := filepath.Join(dir, "b.db")
	if _, err := sqlitestore.OpenFile(ctx, path, sqlitestore.FileConfig{}); err == nil || !strings.Contains(err.Error(), "sqlite store "+path+": ") {
		t.Fatalf("OpenFile without a lease = %v, want the store's error", err)
	}
	l2, err := sqlitestore.Lock(path)
	if err != nil {
		t.Fatalf("Lock after a failed OpenFile: %v", err)
	}
	l2.Unlock()
}

// OpenWriter takes the lock and opens the writer, for a file beside the
// store's; a second process is kept out, and Close releases the file.
func TestOpenWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	w, err := sqlitestore.OpenWriter(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Lock == nil || w.Store != nil {
		t.Fatalf("Lock = %v, Store = %v; want a lock and no store", w.Lock, w.Store)
	}
	if _, err := w.DB.ExecContext(t.Context(), "CREATE TABLE t (x)"); err != nil {
		t.Fatalf("the writer: %v", err)
	}
	_, err = sqlitestore.OpenWriter(path, nil)
	if !errors.Is(err, sqlitestore.ErrLocked) || !strings.HasSuffix(err.Error(), "; one gateway process per SQLite file: stop the other one, or give this one another path") {
		t.Fatalf("second OpenWriter = %v, want ErrLocked with the advice", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, err := sqlitestore.OpenWriter(path, nil)
	if err != nil {
		t.Fatalf("OpenWriter after Close: %v", err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
}
