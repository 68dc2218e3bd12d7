package sqliteaudit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/audittest"
	"github.com/idemhook/idemhook/audit/sqliteaudit"
	"github.com/idemhook/idemhook/internal/fakeclock"
)

// writeBatches writes each batch with its own Write, as the Recorder
// hands them over, and returns every entry in write order.
func writeBatches(t *testing.T, s audit.Sink, batches ...[]audit.Entry) []audit.Entry {
	t.Helper()
	var all []audit.Entry
	for _, b := range batches {
		if err := s.Write(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// newSegmentSink is newSink writing every batch to a segment of its own.
func newSegmentSink(tb testing.TB, now func() time.Time) (*sqliteaudit.Sink, *sql.DB) {
	s, db := newSink(tb, now, false)
	sqliteaudit.NoAppend(s)
	return s, db
}

// segments returns the entries of every segment of db, oldest first.
func segments(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.Query(`SELECT entries FROM audit_segments ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// eachLayout runs test on a sink writing every batch to a segment of its
// own (segments overlapping as batches do) and on one appending small
// batches to the last segment (the default).
func eachLayout(t *testing.T, test func(t *testing.T, s *sqliteaudit.Sink)) {
	t.Run("segment per batch", func(t *testing.T) {
		s, _ := newSegmentSink(t, time.Now)
		test(t, s)
	})
	t.Run("appending", func(t *testing.T) {
		s, _ := newSink(t, time.Now, false)
		test(t, s)
	})
}

// at returns an entry at Base plus us microseconds.
func at(us int64, source, key string) audit.Entry {
	return audit.Entry{Time: audittest.Base.Add(time.Duration(us) * time.Microsecond), Route: "/webhooks/" + source,
		Source: source, Key: key, Outcome: "processed", Status: 200, Instance: "gw-1"}
}

// checkQueries checks Query through pages of several sizes, and Counts,
// with no filter and each of filters, against what was written.
func checkQueries(t *testing.T, s *sqliteaudit.Sink, written []audit.Entry, filters ...audit.Filter) {
	t.Helper()
	for _, f := range append([]audit.Filter{{}}, filters...) {
		want := audittest.Expected(written, f)
		all := f
		all.Limit = audit.MaxLimit
		got, _ := audittest.QueryAll(t, s, all)
		audittest.SameEntries(t, fmt.Sprintf("%+v, pages of %d", f, all.Limit), got, want)
		for _, limit := range []int{1, 2, 3, 7, 50} {
			// Pages of about 1% of the entries at least, so that a large
			// set takes a few hundred queries, not thousands.
			limit = min(limit*(1+len(want)/100), audit.MaxLimit)
			f.Limit = limit
			got, pages := audittest.QueryAll(t, s, f)
			audittest.SameEntries(t, fmt.Sprintf("%+v, pages of %d", f, limit), got, want)
			if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
				t.Errorf("%+v: %d pages for %d entries", f, pages, len(want))
			}
		}
		tally := audit.NewTally(f)
		for _, e := range written {
			tally.Add(e)
		}
		c, err := s.Counts(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		if want := tally.Counts(); !slices.Equal(c, want) {
			t.Errorf("Counts(%+v)\n got %v\nwant %v", f, c, want)
		}
	}
}

// TestOverlappingBatches: batches whose times overlap (a later batch
// holding older entries than an earlier one, several entries at one
// microsecond across batches) come back newest first, the later write
// first at equal times, on one page and across pages.
func TestOverlappingBatches(t *testing.T) {
	eachLayout(t, func(t *testing.T, s *sqliteaudit.Sink) {
		written := writeBatches(t, s,
			[]audit.Entry{at(10, "stone", "a1"), at(20, "stripe", "a2"), at(15, "stone", "a3"), at(20, "stone", "a4")},
			[]audit.Entry{at(5, "stone", "b1"), at(25, "stripe", "b2"), at(20, "stone", "b3")},    // spans the first
			[]audit.Entry{at(20, "stone", "c1"), at(20, "stripe", "c2")},                          // inside both, at their ties
			[]audit.Entry{at(1, "stripe", "d1")},                                                  // older than everything
			[]audit.Entry{at(30, "stone", "e1"), at(-5, "stone", "e2"), at(20, "whatsapp", "e3")}, // spans them all
		)
		checkQueries(t, s, written,
			audit.Filter{Source: "stone"},
			audit.Filter{Source: "stripe"},
			audit.Filter{Source: "whatsapp"},
			audit.Filter{Since: audittest.Base.Add(15 * time.Microsecond)},
			audit.Filter{Until: audittest.Base.Add(20 * time.Microsecond)},
			audit.Filter{Since: audittest.Base.Add(20 * time.Microsecond), Until: audittest.Base.Add(21 * time.Microsecond)},
		)
	})
}

// TestManyOverlappingBatches: a hundred batches of random sizes with
// times going forward but jittered backwards (some by minutes), so that
// segments overlap in many ways, and more segments than Query reads at
// once.
func TestManyOverlappingBatches(t *testing.T) {
	eachLayout(t, func(t *testing.T, s *sqliteaudit.Sink) {
		rng := rand.New(rand.NewPCG(1, 2))
		sources := []string{"stone", "stripe", "whatsapp"}
		var batches [][]audit.Entry
		var us int64
		for i := range 120 {
			b := make([]audit.Entry, 1+rng.IntN(12))
			for j := range b {
				us += rng.Int64N(3) // often the same microsecond
				t := us
				if rng.IntN(10) == 0 {
					t -= rng.Int64N(200) // from a slower request
				}
				if rng.IntN(100) == 0 {
					t -= 60_000_000
				}
				b[j] = at(t, sources[rng.IntN(3)], fmt.Sprintf("%d-%d", i, j))
				b[j].Outcome = []string{"processed", "replayed"}[rng.IntN(2)]
			}
			batches = append(batches, b)
		}
		written := writeBatches(t, s, batches...)
		checkQueries(t, s, written,
			audit.Filter{Source: "stripe"},
			audit.Filter{Source: "stone", Outcome: "replayed"},
			audit.Filter{Route: "/webhooks/whatsapp", Since: audittest.Base.Add(time.Duration(us/3) * time.Microsecond)},
			audit.Filter{Since: audittest.Base.Add(time.Duration(us/4) * time.Microsecond), Until: audittest.Base.Add(time.Duration(us/2) * time.Microsecond)},
		)
	})
}

// TestCursorAcrossSegments: pages the size of a batch, and of a batch and
// one, cut between and inside segments, including at times several
// segments share.
func TestCursorAcrossSegments(t *testing.T) {
	eachLayout(t, func(t *testing.T, s *sqliteaudit.Sink) {
		var batches [][]audit.Entry
		for i := range 6 {
			b := make([]audit.Entry, 5)
			for j := range b {
				// Every batch has entries at the instants 100 and 200, and
				// one of its own.
				b[j] = at([]int64{100, 200, int64(300 + i), 200, 100}[j], "stone", fmt.Sprintf("%d-%d", i, j))
			}
			batches = append(batches, b)
		}
		written := writeBatches(t, s, batches...)
		want := audittest.Expected(written, audit.Filter{})
		for _, limit := range []int{4, 5, 6, 10, 29, 30} {
			got, pages := audittest.QueryAll(t, s, audit.Filter{Limit: limit})
			audittest.SameEntries(t, fmt.Sprintf("pages of %d", limit), got, want)
			if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
				t.Errorf("pages of %d: %d pages", limit, pages)
			}
		}
	})
}

// TestPruneSegmentBoundary: Prune deletes the batches wholly older than
// the retention, rewrites the one straddling it without its old entries
// (the others keep their IDs, so a cursor taken before the prune still
// works) and counts every entry it removed once. More batches than one
// prune statement deletes.
func TestPruneSegmentBoundary(t *testing.T) {
	clk := fakeclock.New(audittest.Base)
	s, _ := newSegmentSink(t, clk.Now)
	cutoff := audittest.Base.Add(-audit.DefaultRetention)
	var batches [][]audit.Entry
	for i := range 150 { // wholly older
		batches = append(batches, []audit.Entry{at(-int64(audit.DefaultRetention/time.Microsecond)-int64(1000+i), "stone", fmt.Sprint("old", i))})
	}
	us := func(d time.Duration) int64 { return cutoff.Add(d).Sub(audittest.Base).Microseconds() }
	straddling := []audit.Entry{
		at(us(time.Minute), "stone", "s0"), at(us(-time.Microsecond), "stripe", "s1"), at(us(0), "stone", "s2"),
		at(us(-time.Hour), "stone", "s3"), at(us(time.Hour), "stripe", "s4"),
	}
	batches = append(batches, straddling, []audit.Entry{at(0, "stone", "new0"), at(-1, "stripe", "new1")})
	written := writeBatches(t, s, batches...)

	before, err := s.Query(t.Context(), audit.Filter{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n != 152 {
		t.Errorf("Prune deleted %d entries, want 150 old batches + 2 of the straddling one", n)
	}
	kept := audittest.Expected(written, audit.Filter{Since: cutoff})
	if len(kept) != 5 {
		t.Fatalf("%d entries kept, want 5", len(kept))
	}
	checkQueries(t, s, kept, audit.Filter{Source: "stone"}, audit.Filter{Since: cutoff.Add(-time.Hour)})
	// The first page is the same entries with the same IDs, and its cursor
	// leads to the rest.
	after, err := s.Query(t.Context(), audit.Filter{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before.Entries, after.Entries) || before.Next != after.Next {
		t.Errorf("first page before the prune\n%+v\nafter\n%+v", before, after)
	}
	rest, err := s.Query(t.Context(), audit.Filter{Cursor: before.Next})
	if err != nil {
		t.Fatal(err)
	}
	audittest.SameEntries(t, "after the cursor", rest.Entries, kept[3:])
	if n, err := s.Prune(t.Context()); n != 0 || err != nil {
		t.Errorf("Prune again: %d, %v; want 0", n, err)
	}
	// s2, exactly at the limit, goes a microsecond later, and s0 a minute
	// later.
	clk.Advance(time.Microsecond)
	if n, err := s.Prune(t.Context()); n != 1 || err != nil {
		t.Errorf("Prune a microsecond later: %d, %v; want 1 (s2)", n, err)
	}
	clk.Advance(time.Minute)
	if n, err := s.Prune(t.Context()); n != 1 || err != nil {
		t.Errorf("Prune a minute later: %d, %v; want 1 (s0)", n, err)
	}
	checkQueries(t, s, kept[:3])
}

// legacyFile returns a file whose trail was made by schema version 3 (one
// row per entry in audit_deliveries, with its three indexes), holding
// rows.
func legacyFile(t *testing.T, rows []audit.Entry) *sql.DB {
	t.Helper()
	db := openFile(t, filepath.Join(t.TempDir(), "v3.db"))
	for _, q := range []string{
		`CREATE TABLE idemhook_schema (component TEXT PRIMARY KEY NOT NULL, version INTEGER NOT NULL)`,
		`INSERT INTO idemhook_schema VALUES ('audit', 3)`,
		`CREATE TABLE audit_deliveries (id INTEGER PRIMARY KEY, time_us INTEGER NOT NULL, route TEXT NOT NULL,
			source TEXT NOT NULL, key TEXT NOT NULL, outcome TEXT NOT NULL, status INTEGER NOT NULL,
			duration_ns INTEGER NOT NULL, request_bytes INTEGER NOT NULL, response_bytes INTEGER NOT NULL,
			reason TEXT NOT NULL DEFAULT '', instance TEXT NOT NULL DEFAULT '', scope TEXT NOT NULL DEFAULT '')`,
		`CREATE INDEX audit_deliveries_time ON audit_deliveries (time_us)`,
		`CREATE INDEX audit_deliveries_source_time ON audit_deliveries (source, time_us)`,
		`CREATE INDEX audit_deliveries_outcome_time ON audit_deliveries (outcome, time_us)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rows {
		if _, err := tx.Exec(`INSERT INTO audit_deliveries (time_us, route, source, key, outcome, status, duration_ns,
			request_bytes, response_bytes, reason, instance, scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.Time.UnixMicro(), e.Route, e.Source, e.Key, e.Outcome, e.Status, int64(e.Duration),
			e.RequestBytes, e.ResponseBytes, e.Reason, e.Instance, e.Scope); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestUpgradeFromVersion3: the rows of a version 3 trail (more than one
// segment's worth, some at one microsecond, some out of order) all come
// back after New, in their order, with every field, and the entries
// written after come first.
func TestUpgradeFromVersion3(t *testing.T) {
	old := audittest.Dataset(2500)
	for i := range old {
		old[i].Scope = fmt.Sprintf("/t/%d", i%3)
	}
	db := legacyFile(t, old)
	s, err := sqliteaudit.New(db, sqliteaudit.Config{PruneInterval: -1})
	if err != nil {
		t.Fatalf("New on a version 3 file: %v", err)
	}
	defer s.Close()
	newer := audittest.Dataset(10)
	for i := range newer {
		newer[i].Time = newer[i].Time.Add(24 * time.Hour)
	}
	written := writeBatches(t, s, newer)
	written = append(slices.Clone(old), written...)
	checkQueries(t, s, written, audit.Filter{Source: "stripe"}, audit.Filter{Outcome: "replayed", Until: audittest.Base.Add(time.Hour)})
	var version int
	if err := db.QueryRow(`SELECT version FROM idemhook_schema WHERE component = 'audit'`).Scan(&version); err != nil || version != sqliteaudit.SchemaVersion {
		t.Fatalf("recorded version %d, %v; want %d", version, err, sqliteaudit.SchemaVersion)
	}
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'audit_deliveries%'`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("%d tables or indexes of audit_deliveries left (%v), want none", tables, err)
	}
}

// TestUpgradeResumes: a migration interrupted (the version already
// recorded, the rows not yet moved still in audit_deliveries) finishes at
// the next New, and the entries moved before stay.
func TestUpgradeResumes(t *testing.T) {
	old := audittest.Dataset(1500)
	db := legacyFile(t, old)
	s, err := sqliteaudit.New(db, sqliteaudit.Config{PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Back to where a migration stopped after its first transaction: the
	// first 1024 rows in a segment, the others still rows.
	if _, err := db.Exec(`DELETE FROM audit_segments WHERE id > (SELECT min(id) FROM audit_segments)`); err != nil {
		t.Fatal(err)
	}
	var moved int
	if err := db.QueryRow(`SELECT entries FROM audit_segments`).Scan(&moved); err != nil || moved != 1024 {
		t.Fatalf("the first segment holds %d entries (%v), want 1024", moved, err)
	}
	if _, err := db.Exec(`CREATE TABLE audit_deliveries (id INTEGER PRIMARY KEY, time_us INTEGER NOT NULL, route TEXT NOT NULL,
		source TEXT NOT NULL, key TEXT NOT NULL, outcome TEXT NOT NULL, status INTEGER NOT NULL,
		duration_ns INTEGER NOT NULL, request_bytes INTEGER NOT NULL, response_bytes INTEGER NOT NULL,
		reason TEXT NOT NULL DEFAULT '', instance TEXT NOT NULL DEFAULT '', scope TEXT NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	for i, e := range old[moved:] {
		if _, err := db.Exec(`INSERT INTO audit_deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, moved+1+i,
			e.Time.UnixMicro(), e.Route, e.Source, e.Key, e.Outcome, e.Status, int64(e.Duration),
			e.RequestBytes, e.ResponseBytes, e.Reason, e.Instance, e.Scope); err != nil {
			t.Fatal(err)
		}
	}
	s, err = sqliteaudit.New(db, sqliteaudit.Config{PruneInterval: -1})
	if err != nil {
		t.Fatalf("New resuming the migration: %v", err)
	}
	defer s.Close()
	checkQueries(t, s, old, audit.Filter{Source: "whatsapp"})
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'audit_deliveries'`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("audit_deliveries left (%d, %v)", tables, err)
	}
}

// TestAppendToLastSegment: small batches fill the last segment up to 256
// entries instead of making one each; a cursor taken before an append
// still leads to exactly the rest; a batch that doesn't fit goes to a new
// segment, whole; and a last segment Prune rewrote meanwhile is left
// alone.
func TestAppendToLastSegment(t *testing.T) {
	clk := fakeclock.New(audittest.Base)
	s, db := newSink(t, clk.Now, false)
	data := audittest.Dataset(600)
	written := writeBatches(t, s, data[:3], data[3:5])
	first, err := s.Query(t.Context(), audit.Filter{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	written = append(written, writeBatches(t, s, data[5:250], data[250:260])...)
	if got := segments(t, db); !slices.Equal(got, []int{250, 10}) {
		t.Errorf("segments of %v entries, want [250 10]", got)
	}
	checkQueries(t, s, written, audit.Filter{Source: "stone"})
	// The entries after the first page's last one in the order, which the
	// appends put some (the Dataset's late ones) before and after.
	all := audittest.Expected(written, audit.Filter{})
	cut := slices.IndexFunc(all, func(e audit.Entry) bool { return e.Key == first.Entries[1].Key })
	rest, _ := audittest.QueryAll(t, s, audit.Filter{Limit: 7, Cursor: first.Next})
	audittest.SameEntries(t, "after a cursor taken before the appends", rest, all[cut+1:])
	if len(rest) <= 3 {
		t.Errorf("%d entries after the cursor: the test wants appended ones among them", len(rest))
	}

	// A full batch gets a segment of its own, and the next small one
	// starts another.
	written = append(written, writeBatches(t, s, data[260:560], data[560:562])...)
	if got := segments(t, db); !slices.Equal(got, []int{250, 10, 300, 2}) {
		t.Errorf("segments of %v entries, want [250 10 300 2]", got)
	}

	// The last segment straddles the retention's limit: Prune rewrites it
	// without its old entry, and the next batch goes to a new segment.
	old := data[562]
	old.Time = audittest.Base.Add(-audit.DefaultRetention - time.Second)
	writeBatches(t, s, []audit.Entry{old})
	if n, err := s.Prune(t.Context()); n != 1 || err != nil {
		t.Fatalf("Prune: %d, %v; want 1", n, err)
	}
	written = append(written, writeBatches(t, s, data[563:565])...)
	if got := segments(t, db); !slices.Equal(got, []int{250, 10, 300, 2, 2}) {
		t.Errorf("segments of %v entries, want [250 10 300 2 2]", got)
	}
	checkQueries(t, s, written, audit.Filter{Source: "whatsapp"})

	// Another sink on the file writes: the next batch doesn't join the
	// older tail, whose IDs are below the other sink's entries. All four
	// entries are at one instant, so that their order is their IDs'.
	for i := range data[565:569] {
		data[565+i].Time = audittest.Base.Add(time.Hour)
	}
	other, err := sqliteaudit.New(db, sqliteaudit.Config{PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	written = append(written, writeBatches(t, other, data[565:567])...)
	written = append(written, writeBatches(t, s, data[567:569])...)
	if got := segments(t, db); !slices.Equal(got, []int{250, 10, 300, 2, 2, 2, 2}) {
		t.Errorf("segments of %v entries, want [250 10 300 2 2 2 2]", got)
	}
	checkQueries(t, s, written)
}

// TestPagesWhileWritingAndPruning: a reader paging through a window keeps
// getting every entry of it exactly once, in order, while a writer adds
// batches outside the window, half of them older than the retention
// (appending to the last segment and starting new ones), and Prune keeps
// deleting and rewriting those segments, last one included; on the file's
// main connection and on a reader's.
func TestPagesWhileWritingAndPruning(t *testing.T) {
	clk := fakeclock.New(audittest.Base)
	cutoff := audittest.Base.Add(-audit.DefaultRetention)
	for _, reader := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReadDB %t", reader), func(t *testing.T) {
			s, _ := newSink(t, clk.Now, reader)
			// Batches mixing entries to prune (a second past the limit)
			// with entries to keep, in the window [cutoff, Base).
			data := audittest.Dataset(2000)
			for i := range data {
				data[i].Time = cutoff.Add(time.Duration(i) * time.Second)
				if i%5 == 0 {
					data[i].Time = cutoff.Add(-time.Second)
				}
			}
			var written []audit.Entry
			for i := 0; i < len(data); i += 40 {
				written = append(written, writeBatches(t, s, data[i:i+40])...)
			}
			window := audit.Filter{Since: cutoff, Until: audittest.Base}
			want := audittest.Expected(written, window)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var prunes, writes atomic.Int64
			errs := make(chan error, 2)
			go func() { // the writer: old entries and entries after the window
				more := audittest.Dataset(10)
				for i := 0; ctx.Err() == nil; i++ {
					for j := range more {
						more[j].Time = audittest.Base.Add(time.Duration(i*10+j) * time.Millisecond)
						if j%2 == 0 {
							more[j].Time = cutoff.Add(-time.Duration(i*10+j+1) * time.Millisecond)
						}
					}
					if err := s.Write(ctx, more[:1+i%10]); err != nil {
						errs <- fmt.Errorf("Write: %w", err)
						return
					}
					writes.Add(1)
				}
				errs <- nil
			}()
			go func() { // the pruner
				for ctx.Err() == nil {
					if _, err := s.Prune(ctx); err != nil && ctx.Err() == nil {
						errs <- fmt.Errorf("Prune: %w", err)
						return
					}
					prunes.Add(1)
				}
				errs <- nil
			}()
			for round := 0; round < 3 || prunes.Load() < 20 || writes.Load() < 20; round++ {
				f := window
				f.Limit = []int{7, 100, 333}[round%3]
				got, _ := audittest.QueryAll(t, s, f)
				audittest.SameEntries(t, fmt.Sprintf("round %d, pages of %d", round, f.Limit), got, want)
				if round > 1000 {
					t.Fatalf("%d prunes and %d writes in 1000 rounds", prunes.Load(), writes.Load())
				}
			}
			cancel()
			for range 2 {
				if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
			}
			if _, err := s.Prune(t.Context()); err != nil {
				t.Fatal(err)
			}
			if p, err := s.Query(t.Context(), audit.Filter{Until: cutoff}); err != nil || len(p.Entries) != 0 {
				t.Errorf("after a last Prune, %d entries older than the retention (%v)", len(p.Entries), err)
			}
			c, err := s.Counts(t.Context(), window)
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, x := range c {
				n += x.N
			}
			if n != int64(len(want)) {
				t.Errorf("Counts of the window: %d, want %d", n, len(want))
			}
		})
	}
}

// TestFilterAcrossSegments: a filter on a source or outcome that some
// segments lack, or hold only as part of a longer name ("stone" in
// "stoner"), finds exactly its entries.
func TestFilterAcrossSegments(t *testing.T) {
	eachLayout(t, func(t *testing.T, s *sqliteaudit.Sink) {
		with := func(e audit.Entry, outcome string) audit.Entry {
			e.Outcome = outcome
			return e
		}
		written := writeBatches(t, s,
			[]audit.Entry{at(1, "stoner", "a1"), at(2, "stoner", "a2"), with(at(3, "stoner", "a3"), "unprocessed")},
			[]audit.Entry{with(at(4, "stone", "b1"), "unprocessed"), at(5, "stone", "b2")},
			[]audit.Entry{at(6, "whatsapp", "c1")},
			[]audit.Entry{with(at(0, "tone", "d1"), "processe")},
		)
		checkQueries(t, s, written,
			audit.Filter{Source: "stone"}, audit.Filter{Source: "stoner"}, audit.Filter{Source: "tone"}, audit.Filter{Source: "ston"},
			audit.Filter{Outcome: "processed"}, audit.Filter{Outcome: "unprocessed"}, audit.Filter{Outcome: "processe"},
			audit.Filter{Source: "stone", Outcome: "processed"}, audit.Filter{Source: "stoner", Outcome: "unprocessed"},
			audit.Filter{Source: "shopify"}, audit.Filter{Outcome: "replayed"}, audit.Filter{Route: "/webhooks/tone"},
		)
	})
}
