package sqlitestore_test

import (
	"bytes"
	"database/sql"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
)

// testdata/v1.sqlite was written by sqlitestore at schema version 1, a rowid
// table with a unique key index and an index on expires_at. It was written
// through Open, New, Claim and Complete, with the clock at 2999-01-01. It
// holds a completed record ("idem:v1:completed", 201 {"order":1}, kept for
// an hour). It holds a pending claim ("idem:v1:pending", token
// "tok-pending", a one-minute lease). It also holds a row that expired in
// 2020 ("idem:v1:expired").
var v1Now = time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC)

// copyV1 copies testdata/v1.sqlite to a new temporary file and returns its path.
func copyV1(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "v1.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "idemhook.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMigrateV1(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, db *sql.DB)
	}{
		{"version 1 recorded", func(*testing.T, *sql.DB) {}},
		{"no version recorded", func(t *testing.T, db *sql.DB) {
			if _, err := db.Exec(`DELETE FROM idemhook_schema WHERE component = 'sqlitestore'`); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			db := openDB(t, copyV1(t))
			tt.setup(t, db)
			var logs bytes.Buffer
			clk := func() time.Time { return v1Now }
			s := newStore(t, db, sqlitestore.Config{Now: clk, SweepInterval: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if !strings.Contains(logs.String(), "migrated idem_keys to schema version 2") || !strings.Contains(logs.String(), "records=2") {
				t.Errorf("log: %s", logs.String())
			}
			checkV2Schema(t, db)
			if got := countRows(t, db); got != 2 {
				t.Errorf("%d rows after the migration, want 2 (the expired row is not copied)", got)
			}

			got, err := s.Get(ctx, "idem:v1:completed")
			if err != nil || got == nil || got.State != idemhook.StateCompleted || got.Status != 201 ||
				string(got.Body) != `{"order":1}` || got.Header.Get("Content-Type") != "application/json" || !got.CreatedAt.Equal(v1Now) {
				t.Fatalf("completed record after the migration: %+v, %v", got, err)
			}
			// The pending claim is still owned by its token: a duplicate sees
			// it, and its owner completes it.
			claim := &idemhook.Record{State: idemhook.StatePending, Token: "tok-pending", CreatedAt: v1Now}
			existing, err := s.Claim(ctx, "idem:v1:pending", pending("other"), time.Minute)
			if err != nil || existing == nil || existing.State != idemhook.StatePending || existing.Token != "tok-pending" {
				t.Fatalf("Claim of the pending key after the migration: %+v, %v", existing, err)
			}
			if err := s.Complete(ctx, "idem:v1:pending", claim, completed("{}"), time.Hour); err != nil {
				t.Fatalf("Complete of the migrated claim: %v", err)
			}
			if existing, err := s.Claim(ctx, "idem:v1:expired", pending("new"), time.Minute); err != nil || existing != nil {
				t.Fatalf("Claim of the expired key: %+v, %v", existing, err)
			}

			// Opening the migrated file again changes nothing.
			logs.Reset()
			s.Close()
			s2 := newStore(t, db, sqlitestore.Config{Now: clk, SweepInterval: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if strings.Contains(logs.String(), "migrat") {
				t.Errorf("second New logged a migration: %s", logs.String())
			}
			if got, err := s2.Get(ctx, "idem:v1:pending"); err != nil || got == nil || got.State != idemhook.StateCompleted {
				t.Fatalf("after a second New: %+v, %v", got, err)
			}
		})
	}
}

// checkV2Schema checks that idem_keys is a WITHOUT ROWID table with no
// other index and that version 2 is recorded.
func checkV2Schema(t *testing.T, db *sql.DB) {
	t.Helper()
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idem_keys'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ddl, "WITHOUT ROWID") {
		t.Errorf("idem_keys: %s", ddl)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE tbl_name LIKE 'idem_keys%' AND name <> 'idem_keys'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d other objects on idem_keys (indexes, the old table) after the migration", n)
	}
	var v int
	if err := db.QueryRow(`SELECT version FROM idemhook_schema WHERE component = 'sqlitestore'`).Scan(&v); err != nil || v != 2 {
		t.Errorf("schema version %d, %v; want 2", v, err)
	}
}

// TestNewFileSchema checks the schema of a new file.
func TestNewFileSchema(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "idemhook.db"))
	newStore(t, db, sqlitestore.Config{SweepInterval: -1})
	checkV2Schema(t, db)
}
