package sqliteaudit_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/audittest"
	"github.com/idemhook/idemhook/audit/sqliteaudit"
	"github.com/idemhook/idemhook/sqlitestore"
)

// openFile opens the SQLite file at path as the gateway does, until the
// test ends.
func openFile(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sqlitestore.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// newSink returns a sink on a new file, with the clock now and no
// background pruning, and the file's main database. With reader, the sink
// reads through a connection of its own (Config.ReadDB).
func newSink(tb testing.TB, now func() time.Time, reader bool) (*sqliteaudit.Sink, *sql.DB) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "idemhook.db")
	db := openFile(tb, path)
	cfg := sqliteaudit.Config{Now: now, PruneInterval: -1}
	if reader {
		cfg.ReadDB = openFile(tb, path)
	}
	s, err := sqliteaudit.New(db, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, db
}

// TestReadDB: with ReadDB, Query and Counts answer while the main
// connection (the one the store shares) is taken, and see what Write
// committed.
func TestReadDB(t *testing.T) {
	s, db := newSink(t, time.Now, true)
	if err := s.Write(t.Context(), audittest.Dataset(10)); err != nil {
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

func TestConformance(t *testing.T) {
	audittest.Run(t, audittest.Harness{
		New: func(t *testing.T, now func() time.Time) audittest.Trail {
			s, _ := newSink(t, now, false)
			return s
		},
	})
}

func TestConformanceReadDB(t *testing.T) {
	audittest.Run(t, audittest.Harness{
		New: func(t *testing.T, now func() time.Time) audittest.Trail {
			s, _ := newSink(t, now, true)
			return s
		},
	})
}

// TestRecorder runs the recorder into the real SQLite sink.
func TestRecorder(t *testing.T) {
	s, _ := newSink(t, time.Now, false)
	r := audit.NewRecorder(s, audit.RecorderConfig{BatchSize: 64})
	written := audittest.Dataset(500)
	for _, e := range written {
		r.Record(e)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, _ := audittest.QueryAll(t, s, audit.Filter{Limit: audit.MaxLimit})
	audittest.SameEntries(t, "recorded", got, audittest.Expected(written, audit.Filter{}))
}

func TestNewErrors(t *testing.T) {
	if _, err := sqliteaudit.New(nil, sqliteaudit.Config{}); err == nil {
		t.Error("New(nil): got nil error")
	}
	db := openFile(t, filepath.Join(t.TempDir(), "a.db"))
	if _, err := sqliteaudit.New(db, sqliteaudit.Config{Retention: -time.Hour}); err == nil {
		t.Error("New with a negative retention: got nil error")
	}
	// The store and the trail share one file.
	store, err := sqlitestore.New(db, sqlitestore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, err := sqliteaudit.New(db, sqliteaudit.Config{PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := db.Exec(`UPDATE idemhook_schema SET version = 99 WHERE component = 'audit'`); err != nil {
		t.Fatal(err)
	}
	if _, err := sqliteaudit.New(db, sqliteaudit.Config{}); err == nil {
		t.Error("New on a newer schema: got nil error")
	}
}

// A file whose trail was made by schema version 1 (no reason, no instance)
// is upgraded in place: its rows stay, with empty reason and instance.
func TestUpgradeFromVersion1(t *testing.T) {
	db := openFile(t, filepath.Join(t.TempDir(), "v1.db"))
	for _, q := range []string{
		`CREATE TABLE idemhook_schema (component TEXT PRIMARY KEY NOT NULL, version INTEGER NOT NULL)`,
		`INSERT INTO idemhook_schema VALUES ('audit', 1)`,
		`CREATE TABLE audit_deliveries (id INTEGER PRIMARY KEY, time_us INTEGER NOT NULL, route TEXT NOT NULL,
			source TEXT NOT NULL, key TEXT NOT NULL, outcome TEXT NOT NULL, status INTEGER NOT NULL,
			duration_ns INTEGER NOT NULL, request_bytes INTEGER NOT NULL, response_bytes INTEGER NOT NULL)`,
		`INSERT INTO audit_deliveries VALUES (1, 1796000000000000, '/wh', 'stone', 'k1', 'processed', 200, 5, 1, 2)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s, err := sqliteaudit.New(db, sqliteaudit.Config{PruneInterval: -1})
	if err != nil {
		t.Fatalf("New on a version 1 file: %v", err)
	}
	defer s.Close()
	if err := s.Write(t.Context(), []audit.Entry{{Time: time.UnixMicro(1796000000000001), Route: "/wh", Source: "stone",
		Key: "k2", Outcome: "signature_invalid", Status: 401, Reason: "stripe: no valid signature", Instance: "gw-1"}}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Query(t.Context(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 2 || p.Entries[0].Reason != "stripe: no valid signature" || p.Entries[0].Instance != "gw-1" ||
		p.Entries[1].Key != "k1" || p.Entries[1].Reason != "" {
		t.Fatalf("after the upgrade: %+v", p.Entries)
	}
	var version int
	if err := db.QueryRow(`SELECT version FROM idemhook_schema WHERE component = 'audit'`).Scan(&version); err != nil || version != sqliteaudit.SchemaVersion {
		t.Fatalf("recorded version %d, %v; want %d", version, err, sqliteaudit.SchemaVersion)
	}
}

// BenchmarkSQLiteWrite measures one default-sized batch (256 entries) into
// SQLite, which holds the file's single connection (shared with the store)
// for its duration.
func BenchmarkSQLiteWrite(b *testing.B) { benchWrite(b, 256, time.Hour) }

// BenchmarkSQLiteWriteSmall measures batches of 8 entries, what the
// Recorder of a quieter gateway hands over every 200 ms.
func BenchmarkSQLiteWriteSmall(b *testing.B) { benchWrite(b, 8, time.Second) }

// benchWrite writes batches of n entries, each batch step later than the
// last: time goes forward, as in the gateway, so the trail grows at its
// newest end.
func benchWrite(b *testing.B, n int, step time.Duration) {
	s, _ := newSink(b, time.Now, false)
	batch := audittest.Dataset(n)
	b.ReportAllocs()
	for b.Loop() {
		for i := range batch {
			batch[i].Time = batch[i].Time.Add(step)
		}
		if err := s.Write(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/entry")
}

// BenchmarkSQLiteQuery measures the first page of 100 entries for a source
// in a trail of 100k entries.
func BenchmarkSQLiteQuery(b *testing.B) {
	s, _ := newSink(b, time.Now, false)
	audittest.Fill(b, s, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		p, err := s.Query(b.Context(), audit.Filter{Source: "stone", Outcome: "processed"})
		if err != nil || len(p.Entries) != audit.DefaultLimit {
			b.Fatalf("Query: %d entries, %v", len(p.Entries), err)
		}
	}
}

// BenchmarkSQLiteCounts measures what GET /admin/stats asks of the trail
// for its day window (the console polls it): the counts per source and
// outcome of 100k entries, every entry of the trail within the window.
func BenchmarkSQLiteCounts(b *testing.B) {
	s, _ := newSink(b, time.Now, false)
	audittest.Fill(b, s, 100_000)
	b.ReportAllocs()
	for b.Loop() {
		c, err := s.Counts(b.Context(), audit.Filter{Since: audittest.Base.Add(-time.Hour)})
		if err != nil || len(c) != 12 {
			b.Fatalf("Counts: %v, %v", c, err)
		}
	}
}
