package sqlitestore_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
)

func TestLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	l, err := sqlitestore.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	// flock excludes a second open of the file even in this process, as it
	// does another process.
	if _, err := sqlitestore.Lock(path); !errors.Is(err, sqlitestore.ErrLocked) {
		t.Fatalf("second Lock = %v, want ErrLocked", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := sqlitestore.Lock(path)
	if err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	l2.Unlock()
}

// FreePendingClaims deletes the claims a dead process left and nothing else.
func TestFreePendingClaims(t *testing.T) {
	clk := newClock()
	db := openDB(t, filepath.Join(t.TempDir(), "state.db"))
	s := newStore(t, db, sqlitestore.Config{Now: clk.Now})
	ctx := t.Context()
	const lease = 30 * time.Second
	claim := func(key string) *idemhook.Record {
		rec := &idemhook.Record{State: idemhook.StatePending, Token: "tok-" + key, CreatedAt: clk.Now()}
		if existing, err := s.Claim(ctx, key, rec, lease); err != nil || existing != nil {
			t.Fatalf("claim %s: %v %v", key, existing, err)
		}
		return rec
	}
	claim("pending")
	done := claim("done")
	if err := s.Complete(ctx, "done", done, &idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: []byte("ok")}, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	claim("other")
	clk.Advance(20 * time.Second)
	n, err := s.FreePendingClaims(ctx, lease)
	if err != nil || n != 2 {
		t.Fatalf("FreePendingClaims = %d, %v; want 2", n, err)
	}
	for key, want := range map[string]bool{"pending": false, "other": false, "done": true} {
		rec, err := s.Get(ctx, key)
		if err != nil || (rec != nil) != want {
			t.Errorf("%s after freeing: %v %v, want present=%v", key, rec, err, want)
		}
	}
	if _, err := s.FreePendingClaims(ctx, 0); err == nil {
		t.Error("FreePendingClaims(0) accepted")
	}
}
