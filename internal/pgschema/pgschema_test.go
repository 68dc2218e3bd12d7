package pgschema_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhook/idemhook/internal/pgschema"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

func TestTable(t *testing.T) {
	tests := []struct {
		give string
		want pgx.Identifier // nil: refused
	}{
		{"idemhook_keys", pgx.Identifier{"idemhook_keys"}},
		{"webhooks.Keys", pgx.Identifier{"webhooks", "Keys"}},
		{"_x1", pgx.Identifier{"_x1"}},
		{strings.Repeat("a", 63), pgx.Identifier{strings.Repeat("a", 63)}},
		{"", nil},
		{"1abc", nil},
		{"a-b", nil},
		{"a.b.c", nil},
		{"a b", nil},
		{`x"; DROP TABLE y; --`, nil},
		{strings.Repeat("a", 64), nil},
		{"ünï", nil},
	}
	for _, tt := range tests {
		got, err := pgschema.Table(tt.give)
		if tt.want == nil {
			if err == nil || !strings.Contains(err.Error(), "want letters, digits and underscores, starting with a letter or an underscore") {
				t.Errorf("Table(%q) = %v, %v; want a table-name error", tt.give, got, err)
			}
			if pgschema.Check(tt.give) == nil {
				t.Errorf("Check(%q) = nil; want the error", tt.give)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("Table(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
}

func TestIndexName(t *testing.T) {
	tests := []struct {
		table, what, want string
	}{
		{"idemhook_keys", "expires_at", "idemhook_keys_expires_at_idx"},
		{strings.Repeat("t", 63), "expires_at", strings.Repeat("t", 63-len("_expires_at_idx")) + "_expires_at_idx"},
		{strings.Repeat("t", 58), "time", strings.Repeat("t", 54) + "_time_idx"},
	}
	for _, tt := range tests {
		got := pgschema.IndexName(tt.table, tt.what)
		if got != tt.want || len(got) > 63 {
			t.Errorf("IndexName(%q, %q) = %q, want %q", tt.table, tt.what, got, tt.want)
		}
	}
}

func TestCreate(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Table(t, pool, "idemhook_pgschema_test")
	id := pgx.Identifier{name}
	ddl := []string{
		`CREATE TABLE IF NOT EXISTS ` + id.Sanitize() + ` (id bigint PRIMARY KEY)`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{pgschema.IndexName(name, "id")}.Sanitize() + ` ON ` + id.Sanitize() + ` (id)`,
	}
	// Instances starting together: without the lock, CREATE TABLE IF NOT
	// EXISTS may fail with a unique violation on pg_type.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = pgschema.Create(t.Context(), pool, "test", id, ddl) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Create %d: %v", i, err)
		}
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+id.Sanitize()+` (id) VALUES (1)`); err != nil {
		t.Fatalf("the table Create made: %v", err)
	}

	err := pgschema.Create(t.Context(), pool, "test", id, []string{`CREATE TABLE nonsense (`})
	if err == nil || !strings.HasPrefix(err.Error(), "test: create table "+name+": ") {
		t.Errorf("Create(bad DDL) = %v; want an error prefixed with the component and naming the table", err)
	}
}
