package sqlschema_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/internal/sqlschema"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "schema.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// version returns the recorded schema version of component, or -1 when
// none is recorded.
func version(t *testing.T, db *sql.DB, component string) int {
	t.Helper()
	if !hasTable(t, db, "idemhook_schema") {
		return -1
	}
	var v int
	err := db.QueryRow(`SELECT version FROM idemhook_schema WHERE component = ?`, component).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func hasTable(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

var v1 = []string{`CREATE TABLE IF NOT EXISTS things (id INTEGER PRIMARY KEY)`}

// step is one Migrate call: the version a build knows and its DDL.
type step struct {
	version int
	ddl     []string
}

func TestMigrate(t *testing.T) {
	tests := []struct {
		name string
		// steps run in order on one database. Each is a version and its DDL.
		steps       []step
		wantVersion int
		wantTables  []string
	}{
		{
			name:        "fresh database",
			steps:       []step{{1, v1}},
			wantVersion: 1,
			wantTables:  []string{"idemhook_schema", "things"},
		},
		{
			name:        "same version again is a no-op",
			steps:       []step{{1, v1}, {1, v1}},
			wantVersion: 1,
			wantTables:  []string{"things"},
		},
		{
			name:        "upgrade runs the new DDL and records the new version",
			steps:       []step{{1, v1}, {2, []string{v1[0], `CREATE TABLE IF NOT EXISTS more_things (id INTEGER PRIMARY KEY)`}}},
			wantVersion: 2,
			wantTables:  []string{"things", "more_things"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openDB(t)
			for _, st := range tt.steps {
				if err := sqlschema.Migrate(t.Context(), db, "comp", st.version, st.ddl); err != nil {
					t.Fatalf("Migrate(version %d): %v", st.version, err)
				}
			}
			if got := version(t, db, "comp"); got != tt.wantVersion {
				t.Errorf("recorded version = %d, want %d", got, tt.wantVersion)
			}
			for _, name := range tt.wantTables {
				if !hasTable(t, db, name) {
					t.Errorf("table %s missing", name)
				}
			}
		})
	}
}

func TestMigrateRefusesNewerVersion(t *testing.T) {
	db := openDB(t)
	if err := sqlschema.Migrate(t.Context(), db, "comp", 3, v1); err != nil {
		t.Fatal(err)
	}
	err := sqlschema.Migrate(t.Context(), db, "comp", 2, []string{`CREATE TABLE IF NOT EXISTS older (id INTEGER)`})
	if err == nil {
		t.Fatal("Migrate to an older version: got nil error")
	}
	for _, want := range []string{"comp:", "schema version 3", "knows up to 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if hasTable(t, db, "older") {
		t.Error("the older build's DDL ran on a newer database")
	}
	if got := version(t, db, "comp"); got != 3 {
		t.Errorf("recorded version = %d after the refusal, want 3", got)
	}
}

func TestMigrateComponentsAreIndependent(t *testing.T) {
	db := openDB(t)
	if err := sqlschema.Migrate(t.Context(), db, "a", 5, v1); err != nil {
		t.Fatal(err)
	}
	if err := sqlschema.Migrate(t.Context(), db, "b", 1, []string{`CREATE TABLE IF NOT EXISTS b_things (id INTEGER)`}); err != nil {
		t.Fatalf("component b at version 1 beside a at version 5: %v", err)
	}
	if got := version(t, db, "a"); got != 5 {
		t.Errorf("version of a = %d, want 5", got)
	}
	if got := version(t, db, "b"); got != 1 {
		t.Errorf("version of b = %d, want 1", got)
	}
}

func TestMigrateFailedDDLRollsBack(t *testing.T) {
	db := openDB(t)
	err := sqlschema.Migrate(t.Context(), db, "comp", 1, []string{
		`CREATE TABLE IF NOT EXISTS first (id INTEGER)`,
		`CREATE TABLE broken (`,
	})
	if err == nil || !strings.HasPrefix(err.Error(), "comp: create schema:") {
		t.Fatalf("Migrate with invalid DDL: got %v, want a \"comp: create schema:\" error", err)
	}
	if hasTable(t, db, "first") {
		t.Error("table first exists: the failed migration was not rolled back")
	}
	if got := version(t, db, "comp"); got != -1 {
		t.Errorf("recorded version = %d after a failed migration, want none", got)
	}
}
