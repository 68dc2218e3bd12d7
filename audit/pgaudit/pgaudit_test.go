package pgaudit_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/audittest"
	"github.com/idemhook/idemhook/audit/pgaudit"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// newSink returns a sink on a table of its own, on the server of
// IDEMHOOK_POSTGRES_URL (the test skips when it is unset, fails when it is
// unreachable), with the clock now and no background pruning. The table is
// dropped when tb ends.
func newSink(tb testing.TB, now func() time.Time) *pgaudit.Sink {
	tb.Helper()
	pool := pgtest.Pool(tb)
	table := pgtest.Table(tb, pool, "idemhook_audit_test")
	p, err := pgaudit.New(tb.Context(), pool, pgaudit.Config{Table: table, Now: now, PruneInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	audittest.Run(t, audittest.Harness{
		New: func(t *testing.T, now func() time.Time) audittest.Trail { return newSink(t, now) },
	})
}

func TestNewTableName(t *testing.T) {
	pool := pgtest.Pool(t)
	for _, table := range []string{"bad-name", "a;drop table x", "1abc", "a.b.c", "x\"y"} {
		if _, err := pgaudit.New(t.Context(), pool, pgaudit.Config{Table: table}); err == nil {
			t.Errorf("New(Table %q): got nil error", table)
		}
	}
	// A schema-qualified name works, and two sinks on one table share it.
	schema := "idemhook_audit_test_" + strings.ToLower(rand.Text()[:12])
	if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	var sinks [2]*pgaudit.Sink
	var wg sync.WaitGroup
	var errs [2]error
	for i := range sinks {
		wg.Go(func() {
			sinks[i], errs[i] = pgaudit.New(t.Context(), pool, pgaudit.Config{Table: schema + ".deliveries", PruneInterval: -1})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("New concurrently on one table: %v", err)
		}
	}
	if err := sinks[0].Write(t.Context(), audittest.Dataset(3)); err != nil {
		t.Fatal(err)
	}
	p, err := sinks[1].Query(t.Context(), audit.Filter{})
	if err != nil || len(p.Entries) != 3 {
		t.Fatalf("the second sink sees %d entries, %v; want 3", len(p.Entries), err)
	}
}

// BenchmarkPostgresCounts is sqliteaudit's BenchmarkSQLiteCounts on
// PostgreSQL (IDEMHOOK_POSTGRES_URL): the counts of 100k entries.
func BenchmarkPostgresCounts(b *testing.B) {
	pool := pgtest.Pool(b)
	table := pgtest.Table(b, pool, "idemhook_audit_bench")
	p, err := pgaudit.New(b.Context(), pool, pgaudit.Config{Table: table, PruneInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	audittest.Fill(b, p, 100_000)
	if _, err := pool.Exec(b.Context(), "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := p.Counts(b.Context(), audit.Filter{Since: audittest.Base.Add(-time.Hour)})
		if err != nil || len(c) != 12 {
			b.Fatalf("Counts: %v, %v", c, err)
		}
	}
}
