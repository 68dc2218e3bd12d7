package audit_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkRecorderRecord measures the cost Record adds to a request, from
// every core at once, with a sink that keeps up (the log sink without a
// logger).
func BenchmarkRecorderRecord(b *testing.B) {
	r := audit.NewRecorder(audit.NewLog(nil), audit.RecorderConfig{})
	e := entry(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Record(e)
		}
	})
	b.StopTimer()
	r.Close(b.Context())
	b.ReportMetric(float64(r.Dropped()), "dropped")
}

// BenchmarkSQLiteWrite measures one default-sized batch (256 entries) into
// SQLite, which holds the file's single connection (shared with the store)
// for its duration.
func BenchmarkSQLiteWrite(b *testing.B) {
	s := newSQLiteTB(b)
	batch := dataset(256)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Write(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/256, "µs/entry")
}

// BenchmarkSQLiteQuery measures the first page of 100 entries for a source
// in a trail of 100k entries.
func BenchmarkSQLiteQuery(b *testing.B) {
	s := newSQLiteTB(b)
	batch := dataset(1000)
	for i := range 100 {
		for j := range batch {
			batch[j].Time = base.Add(time.Duration(i*1000+j) * time.Millisecond)
		}
		if err := s.Write(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
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
	s := newSQLiteTB(b)
	batch := dataset(1000)
	for i := range 100 {
		for j := range batch {
			batch[j].Time = base.Add(time.Duration(i*1000+j) * time.Millisecond)
		}
		if err := s.Write(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := s.Counts(b.Context(), audit.Filter{Since: base.Add(-time.Hour)})
		if err != nil || len(c) != 12 {
			b.Fatalf("Counts: %v, %v", c, err)
		}
	}
}

// BenchmarkPostgresCounts is BenchmarkSQLiteCounts on PostgreSQL
// (IDEMHOOK_POSTGRES_URL): the counts of 100k entries.
func BenchmarkPostgresCounts(b *testing.B) {
	url := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if url == "" {
		b.Skip("IDEMHOOK_POSTGRES_URL is unset")
	}
	pool, err := pgxpool.New(b.Context(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	table := uniqueTable()
	defer pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
	p, err := audit.NewPostgres(b.Context(), pool, audit.PostgresConfig{Table: table, PruneInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	batch := dataset(1000)
	for i := range 100 {
		for j := range batch {
			batch[j].Time = base.Add(time.Duration(i*1000+j) * time.Millisecond)
		}
		if err := p.Write(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(b.Context(), "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := p.Counts(b.Context(), audit.Filter{Since: base.Add(-time.Hour)})
		if err != nil || len(c) != 12 {
			b.Fatalf("Counts: %v, %v", c, err)
		}
	}
}
