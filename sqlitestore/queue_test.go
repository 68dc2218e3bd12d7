package sqlitestore_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/queue"
	"github.com/idemhook/idemhook/queue/queuetest"
	"github.com/idemhook/idemhook/sqlitestore"
)

func openQueue(tb testing.TB, s *sqlitestore.Store) *sqlitestore.Queue {
	tb.Helper()
	q, err := s.Queue(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// The queue passes the engine suite with its claims held in memory (the
// gateway's mode) and with its claims in the file (a file shared by
// several processes).
func TestQueueEngine(t *testing.T) {
	t.Run("held", func(t *testing.T) {
		queuetest.Run(t, queuetest.Harness{New: func(tb testing.TB) (idemhook.Store, queue.Engine) {
			s, _ := heldStore(tb, sqlitestore.Config{})
			return s, openQueue(tb, s)
		}})
	})
	t.Run("file", func(t *testing.T) {
		queuetest.Run(t, queuetest.Harness{New: func(tb testing.TB) (idemhook.Store, queue.Engine) {
			s := newStore(tb, openDB(tb, filepath.Join(tb.TempDir(), "q.db")), sqlitestore.Config{})
			return s, openQueue(tb, s)
		}})
	})
}

func newClaim(token string) *idemhook.Record {
	return &idemhook.Record{State: idemhook.StatePending, Token: token, CreatedAt: time.Now()}
}

func acceptOne(t *testing.T, s *sqlitestore.Store, q *sqlitestore.Queue, key string) (*queue.Event, error) {
	t.Helper()
	claim := newClaim("t-" + key)
	if existing, err := s.Claim(t.Context(), key, claim, time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim = %v, %v", existing, err)
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: 202}
	ev := &queue.Event{Route: "r", Key: key, Method: "POST", Target: "/", Body: []byte("{}"), ReceivedAt: time.Now()}
	return ev, q.Accept(t.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev)
}

// A commit that fails takes the key's completion and the event's append
// with it: the provider, answered no 2xx, sends again, and the retry claims
// afresh and is queued once.
func TestQueueAcceptIsOneCommit(t *testing.T) {
	s, _ := heldStore(t, sqlitestore.Config{})
	q := openQueue(t, s)
	claim := newClaim("t-idem:t:a")
	if existing, err := s.Claim(t.Context(), "idem:t:a", claim, time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim = %v, %v", existing, err)
	}
	// Only the accept's commit fails: a commit hook set before the claim
	// would also fail whatever else the store wrote in between (a CI run
	// under load saw the claim refused so: the file can't be written).
	failing := errors.New("disk I/O error")
	sqlitestore.SetCommitHook(t, func() error { return failing })
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: 202}
	ev := &queue.Event{Route: "r", Key: "idem:t:a", Method: "POST", Target: "/", Body: []byte("{}"), ReceivedAt: time.Now()}
	if err := q.Accept(t.Context(), queue.Completion{Key: "idem:t:a", Claim: claim, Done: done, TTL: time.Hour}, ev); !errors.Is(err, failing) {
		t.Fatalf("Accept with a failing commit = %v; want the commit's error", err)
	}
	sqlitestore.SetCommitHook(t, func() error { return nil })
	if st, err := q.Stats(t.Context(), "r"); err != nil || st.Pending() != 0 {
		t.Fatalf("Stats = %+v, %v; want no event queued", st, err)
	}
	if rec, err := s.Get(t.Context(), "idem:t:a"); err != nil || rec == nil || rec.State != idemhook.StatePending {
		t.Fatalf("Get = %+v, %v; want the claim still pending, no record in the file", rec, err)
	}
}

// An attempt running when the process stopped is queued again at the next
// start, and its next attempt has the next number.
func TestQueueRequeuesRunningAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	func() {
		lock, err := sqlitestore.Lock(path)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Unlock()
		db := openDB(t, path)
		defer db.Close()
		s := newStore(t, db, sqlitestore.Config{Lock: lock})
		defer s.Close()
		q := openQueue(t, s)
		if _, err := acceptOne(t, s, q, "idem:t:b"); err != nil {
			t.Fatal(err)
		}
		evs, err := q.Claim(t.Context(), "r", 1, time.Hour, "dead-process")
		if err != nil || len(evs) != 1 || evs[0].Attempt != 1 {
			t.Fatalf("Claim = %+v, %v", evs, err)
		}
	}()
	h := openHeld(t, path, sqlitestore.Config{})
	q := openQueue(t, h.store)
	evs, err := q.Claim(t.Context(), "r", 1, time.Minute, "next-process")
	if err != nil || len(evs) != 1 || evs[0].Attempt != 2 || evs[0].Key != "idem:t:b" {
		t.Fatalf("Claim after restart = %+v, %v; want the event at attempt 2, without waiting out the lease", evs, err)
	}
}

// A file whose queue was made before events had a fence gets the column
// when the queue opens, and its events carry fences from then on.
func TestQueueAddsTheFenceColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	db := openDB(t, path)
	s := newStore(t, db, sqlitestore.Config{})
	openQueue(t, s)
	if _, err := db.Exec(`ALTER TABLE idem_queue DROP COLUMN fence`); err != nil {
		t.Fatal(err)
	}
	q := openQueue(t, s)
	ev, err := acceptOne(t, s, q, "idem:t:fence")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := q.Claim(t.Context(), "r", 1, time.Minute, "w")
	if err != nil || len(evs) != 1 || evs[0].ID != ev.ID || evs[0].Fence == 0 {
		t.Fatalf("Claim = %+v, %v; want the event with a fence", evs, err)
	}
}
