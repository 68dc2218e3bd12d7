package sqlitestore_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/syncbuf"
	"github.com/idemhook/idemhook/queue"
	"github.com/idemhook/idemhook/sqlitestore"
)

// A write that fails for a reason of its own (here a queue statement that
// a constraint refuses: a trigger aborts the attempt's record) fails that
// operation alone, with an ERROR naming it, and claims go on. A write that
// fails for the file (the writer's connection made read-only: SQLITE_READONLY)
// stops claims until a write succeeds again.
func TestOnlyAFailingFileStopsClaims(t *testing.T) {
	ctx := t.Context()
	var logs syncbuf.Buffer
	h := openHeld(t, filepath.Join(t.TempDir(), "idemhook.db"), sqlitestore.Config{SweepInterval: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s, db := h.store, h.db
	s.WaitKeyFilter()
	q := openQueue(t, s)
	running := func(key string) *queue.Event {
		t.Helper()
		if _, err := acceptOne(t, s, q, key); err != nil {
			t.Fatal(err)
		}
		evs, err := q.Claim(ctx, "r", 1, time.Minute, "w")
		if err != nil || len(evs) != 1 {
			t.Fatalf("Claim = %v, %v", evs, err)
		}
		return evs[0]
	}
	settle := func(ev *queue.Event) error {
		return q.Settle(ctx, queue.Settlement{Token: ev.Token(), Verdict: queue.Retry, NextAt: time.Now().Add(time.Hour),
			Attempt: queue.Attempt{Attempt: ev.Attempt, Started: time.Now(), Status: 503, Worker: "w"}})
	}

	if _, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON idem_queue_attempts BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	if err := settle(running("idem:test:constraint")); err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("Settle refused by a constraint: %v; want the constraint's error", err)
	}
	if existing, err := s.Claim(ctx, "idem:test:after-constraint", pending("a"), time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim after a queue statement failed alone: %+v, %v; want a new claim", existing, err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, `op="queue settle"`) || strings.Contains(l, "claims fail") {
		t.Errorf("log after the statement failed: %s\nwant one ERROR naming op=\"queue settle\", and claims not stopped", l)
	}
	if _, err := db.Exec(`DROP TRIGGER refuse`); err != nil {
		t.Fatal(err)
	}

	ev := running("idem:test:readonly")
	if _, err := db.Exec("PRAGMA query_only = 1"); err != nil { // db's one connection: the writer's
		t.Fatal(err)
	}
	if err := settle(ev); err == nil {
		t.Fatal("Settle on a read-only connection succeeded")
	}
	if _, err := s.Claim(ctx, "idem:test:after-readonly", pending("b"), time.Minute); err == nil || !strings.Contains(err.Error(), "can't be written") {
		t.Fatalf("Claim after the file refused a write: %v; want it refused", err)
	}
	if _, err := db.Exec("PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		existing, err := s.Claim(ctx, "idem:test:after-readonly", pending("b"), time.Minute)
		if err == nil && existing == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim 10s after the file took writes again: %+v, %v", existing, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
