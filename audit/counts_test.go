package audit_test

import (
	"cmp"
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/sqlitestore"
)

// expectedCounts counts the entries of written matching f as a Counter
// must: per source and outcome, ordered by source then outcome.
func expectedCounts(written []audit.Entry, f audit.Filter) []audit.Count {
	n := map[[2]string]int64{}
	for _, e := range expected(written, f) {
		n[[2]string{e.Source, e.Outcome}]++
	}
	var out []audit.Count
	for k, v := range n {
		out = append(out, audit.Count{Source: k[0], Outcome: k[1], N: v})
	}
	slices.SortFunc(out, func(a, b audit.Count) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Outcome, b.Outcome))
	})
	return out
}

func TestCounts(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.new(t, time.Now)
			written := dataset(90)
			if err := s.Write(t.Context(), written); err != nil {
				t.Fatal(err)
			}
			c := s.(audit.Counter)
			tests := []struct {
				name string
				give audit.Filter
			}{
				{"all", audit.Filter{}},
				{"since", audit.Filter{Since: base.Add(10 * time.Second)}},
				{"since and until", audit.Filter{Since: base.Add(3 * time.Second), Until: base.Add(9*time.Second + 2*time.Microsecond)}},
				{"source", audit.Filter{Source: "stripe"}},
				{"outcome and route", audit.Filter{Outcome: "replayed", Route: "/webhooks/stone"}},
				{"limit and cursor ignored", audit.Filter{Limit: 1, Cursor: "garbage"}},
				{"no match", audit.Filter{Source: "shopify"}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					got, err := c.Counts(t.Context(), tt.give)
					if err != nil {
						t.Fatal(err)
					}
					want := expectedCounts(written, tt.give)
					if !slices.Equal(got, want) {
						t.Errorf("Counts(%+v)\n got %v\nwant %v", tt.give, got, want)
					}
				})
			}
		})
	}
}

// newSQLiteReader is a SQLite sink reading through its own connection.
func newSQLiteReader(t *testing.T, now func() time.Time) trail {
	t.Helper()
	s, _ := newSQLiteWithReader(t, now)
	return s
}

func newSQLiteWithReader(t *testing.T, now func() time.Time) (*audit.SQLite, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idemhook.db")
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rdb, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	s, err := audit.NewSQLite(db, audit.SQLiteConfig{Now: now, PruneInterval: -1, ReadDB: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, db
}

// TestSQLiteReadDB: with ReadDB, Query and Counts answer while the main
// connection (the one the store shares) is taken, and see what Write
// committed.
func TestSQLiteReadDB(t *testing.T) {
	s, db := newSQLiteWithReader(t, time.Now)
	if err := s.Write(t.Context(), dataset(10)); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context()) // the main database's only connection
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	p, err := s.Query(ctx, audit.Filter{})
	if err != nil || len(p.Entries) != 10 {
		t.Fatalf("Query with the main connection taken: %d entries, %v", len(p.Entries), err)
	}
	c, err := s.Counts(ctx, audit.Filter{})
	if err != nil || len(c) == 0 {
		t.Fatalf("Counts with the main connection taken: %v, %v", c, err)
	}
}
