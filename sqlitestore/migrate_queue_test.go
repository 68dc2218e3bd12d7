package sqlitestore_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/queue"
	"github.com/idemhook/idemhook/sqlitestore"
)

// oldQueueSchema is idem_queue as the first releases of the queue made it:
// id a plain rowid, which SQLite gives out again once the largest is
// deleted, and no fence column yet.
const oldQueueSchema = `
CREATE TABLE idem_queue (
	id          INTEGER PRIMARY KEY,
	route       TEXT    NOT NULL,
	key         TEXT    NOT NULL,
	order_key   TEXT,
	state       INTEGER NOT NULL,
	attempt     INTEGER NOT NULL DEFAULT 0,
	base        INTEGER NOT NULL DEFAULT 0,
	since       INTEGER NOT NULL,
	next_at     INTEGER NOT NULL,
	lease_by    TEXT,
	received_at INTEGER NOT NULL,
	reason      TEXT,
	last_status INTEGER,
	last_error  TEXT,
	request     BLOB    NOT NULL
);
CREATE INDEX idem_queue_due ON idem_queue (route, state, next_at);
CREATE INDEX idem_queue_group ON idem_queue (route, order_key, id) WHERE order_key IS NOT NULL;`

// A file whose idem_queue predates ids that are never reused is rebuilt
// when the queue opens: its events keep their ids, requests and states,
// its indexes are back, and the next ids follow the largest kept one, even
// once every event is gone.
func TestMigrateQueueIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemhook.db")
	db := openDB(t, path)
	if _, err := db.Exec(oldQueueSchema); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, id := range []int64{5, 9} {
		req := queue.EncodeRequest(nil, &queue.Event{Method: "POST", Target: "/hook", Body: []byte("old")})
		if _, err := db.Exec(`INSERT INTO idem_queue (id, route, key, state, since, next_at, received_at, request)
			VALUES (?, 'r', ?, 0, ?, ?, ?, ?)`, id, fmt.Sprint("idem:old:", id), now, now, now, req); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	s := newStore(t, db, sqlitestore.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	q := openQueue(t, s)
	if !strings.Contains(logs.String(), "migrated idem_queue") || !strings.Contains(logs.String(), "events=2") {
		t.Errorf("log: %s", logs.String())
	}
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idem_queue'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ddl, "AUTOINCREMENT") || !strings.Contains(ddl, "fence") {
		t.Fatalf("idem_queue after the migration: %s", ddl)
	}
	var objects []string
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE tbl_name LIKE 'idem_queue%' AND type IN ('table', 'index') ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		objects = append(objects, n)
	}
	rows.Close()
	if want := []string{"idem_queue", "idem_queue_attempts", "idem_queue_due", "idem_queue_group", "idem_queue_routes"}; !slices.Equal(objects, want) {
		t.Fatalf("objects after the migration %v; want %v", objects, want)
	}

	evs, err := q.Claim(t.Context(), "r", 10, time.Minute, "w")
	if err != nil || len(evs) != 2 || evs[0].ID != 5 || evs[1].ID != 9 || string(evs[1].Body) != "old" || evs[1].Attempt != 1 {
		t.Fatalf("Claim after the migration = %+v, %v; want events 5 and 9 at attempt 1", evs, err)
	}
	for _, ev := range evs {
		if err := q.Settle(t.Context(), queue.Settlement{Token: ev.Token(), Verdict: queue.Delivered}); err != nil {
			t.Fatal(err)
		}
	}
	// The queue is empty: a rowid would start over at 1.
	last := int64(9)
	for i := range 3 {
		ev, err := acceptOne(t, s, q, fmt.Sprint("idem:new:", i))
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID <= last {
			t.Fatalf("accept %d after the migration got id %d; want above %d", i, ev.ID, last)
		}
		last = ev.ID
		evs, err := q.Claim(t.Context(), "r", 1, time.Minute, "w")
		if err != nil || len(evs) != 1 {
			t.Fatalf("Claim = %v, %v", evs, err)
		}
		if err := q.Settle(t.Context(), queue.Settlement{Token: evs[0].Token(), Verdict: queue.Delivered}); err != nil {
			t.Fatal(err)
		}
	}

	// Opening the migrated file again migrates nothing.
	logs.Reset()
	openQueue(t, s)
	if strings.Contains(logs.String(), "migrated") {
		t.Errorf("a second Queue migrated again: %s", logs.String())
	}
}
