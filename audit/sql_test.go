package audit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// trail is what every queryable sink offers.
type trail interface {
	audit.Sink
	audit.Querier
}

// pruner is what the SQL sinks add.
type pruner interface {
	Prune(ctx context.Context) (int64, error)
}

type backend struct {
	name string
	new  func(t *testing.T, now func() time.Time) trail
	// appendOrder: the sink returns entries newest appended first, not
	// sorted by time (the Redis stream).
	appendOrder bool
}

func newSQLite(t *testing.T, now func() time.Time) trail {
	t.Helper()
	return newSQLiteNow(t, now)
}

func newSQLiteTB(tb testing.TB) *audit.SQLite { return newSQLiteNow(tb, time.Now) }

func newSQLiteNow(tb testing.TB, now func() time.Time) *audit.SQLite {
	tb.Helper()
	db, err := sqlitestore.Open(filepath.Join(tb.TempDir(), "idemhook.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	s, err := audit.NewSQLite(db, audit.SQLiteConfig{Now: now, PruneInterval: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// postgresPool connects to IDEMHOOK_POSTGRES_URL: the test skips when it is
// unset and fails when the server is unreachable.
func postgresPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if url == "" {
		t.Skip("IDEMHOOK_POSTGRES_URL is unset; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to test the PostgreSQL sink")
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("IDEMHOOK_POSTGRES_URL=%q: %v", url, err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("IDEMHOOK_POSTGRES_URL=%q is set but the server is unreachable: %v", url, err)
	}
	return pool
}

// uniqueTable returns a table name no other test run uses.
func uniqueTable() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "idemhook_audit_test_" + hex.EncodeToString(b)
}

func newPostgres(t *testing.T, now func() time.Time) trail {
	t.Helper()
	pool := postgresPool(t)
	table := uniqueTable()
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("dropping %s: %v", table, err)
		}
	})
	p, err := audit.NewPostgres(t.Context(), pool, audit.PostgresConfig{Table: table, Now: now, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newRing(t *testing.T, _ func() time.Time) trail {
	r, err := audit.NewRing(audit.RingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newStream returns a stream sink on the Redis of IDEMHOOK_REDIS_URL (the
// test skips when it is unset, fails when it is unreachable), on a key of
// its own deleted at the end.
func newStream(t *testing.T, _ func() time.Time) trail {
	t.Helper()
	client := redisClient(t)
	s, err := audit.NewRedisStream(client, audit.RedisStreamConfig{Key: "idemhook:audit:test:" + uniqueTable()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.Background(), s.Key()) })
	return s
}

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	url := os.Getenv("IDEMHOOK_REDIS_URL")
	if url == "" {
		t.Skip("IDEMHOOK_REDIS_URL is unset; set it (e.g. redis://127.0.0.1:6379/0) to test the Redis stream sink")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("IDEMHOOK_REDIS_URL=%q: %v", url, err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	if err := client.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("IDEMHOOK_REDIS_URL=%q is set but the server is unreachable: %v", url, err)
	}
	return client
}

var backends = []backend{
	{name: "SQLite", new: newSQLite},
	{name: "SQLite with ReadDB", new: newSQLiteReader},
	{name: "Postgres", new: newPostgres},
	{name: "Ring", new: newRing},
	{name: "RedisStream", new: newStream, appendOrder: true},
}

// expectedFor is expected in the order of b.
func expectedFor(b backend, written []audit.Entry, f audit.Filter) []audit.Entry {
	if !b.appendOrder {
		return expected(written, f)
	}
	var out []audit.Entry
	for i := len(written) - 1; i >= 0; i-- {
		if e := written[i]; len(expected([]audit.Entry{e}, f)) == 1 {
			out = append(out, expected([]audit.Entry{e}, f)[0])
		}
	}
	return out
}

var base = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// dataset returns n entries over sources, outcomes and routes, several
// sharing one time (so the order falls back to the ID), in write order.
func dataset(n int) []audit.Entry {
	sources := []string{"stone", "stripe", "whatsapp"}
	outcomes := []string{"processed", "replayed", "failed_released", "in_flight_proceeded"}
	out := make([]audit.Entry, n)
	for i := range out {
		out[i] = audit.Entry{
			// Times go forward, three entries per instant; a few go
			// back, as entries from concurrent requests do.
			Time:          base.Add(time.Duration(i/3)*time.Second + time.Duration(i%5/4)*time.Microsecond - time.Duration(i%7/6)*time.Minute),
			Route:         "/webhooks/" + sources[i%3],
			Source:        sources[i%3],
			Key:           fmt.Sprintf("sha256:%064x", i),
			Outcome:       outcomes[i%4],
			Status:        []int{200, 200, 502, 200}[i%4],
			Duration:      time.Duration(i+1) * 1234567 * time.Nanosecond,
			RequestBytes:  int64(100 + i),
			ResponseBytes: int64(i % 10),
			Reason:        []string{"", "", "upstream answered 502", ""}[i%4],
			Instance:      fmt.Sprintf("gw-%d", i%2),
		}
	}
	return out
}

// expected returns the entries of written (in write order) matching f,
// newest first, as a Querier must order them: time descending, then the
// later write first.
func expected(written []audit.Entry, f audit.Filter) []audit.Entry {
	var out []audit.Entry
	for i := len(written) - 1; i >= 0; i-- {
		e := written[i]
		e.Time = time.UnixMicro(e.Time.UnixMicro()).UTC()
		if (f.Source != "" && e.Source != f.Source) || (f.Outcome != "" && e.Outcome != f.Outcome) ||
			(f.Route != "" && e.Route != f.Route) || (!f.Since.IsZero() && e.Time.Before(f.Since)) ||
			(!f.Until.IsZero() && !e.Time.Before(f.Until)) {
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b audit.Entry) int { return b.Time.Compare(a.Time) })
	return out
}

func sameEntries(t *testing.T, what string, got, want []audit.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		g := got[i]
		if g.ID == 0 {
			t.Fatalf("%s: entry %d has no ID", what, i)
		}
		g.ID = 0
		if g != want[i] {
			t.Fatalf("%s: entry %d:\n got %+v\nwant %+v", what, i, g, want[i])
		}
	}
}

// queryAll follows the cursor from the first page to the last.
func queryAll(t *testing.T, q audit.Querier, f audit.Filter) (all []audit.Entry, pages int) {
	t.Helper()
	seen := map[int64]bool{}
	for {
		p, err := q.Query(t.Context(), f)
		if err != nil {
			t.Fatalf("Query(%+v): %v", f, err)
		}
		pages++
		if len(p.Entries) > f.Limit && f.Limit > 0 {
			t.Fatalf("page %d has %d entries, limit %d", pages, len(p.Entries), f.Limit)
		}
		for _, e := range p.Entries {
			if seen[e.ID] {
				t.Fatalf("entry %d returned twice", e.ID)
			}
			seen[e.ID] = true
		}
		all = append(all, p.Entries...)
		if p.Next == "" {
			return all, pages
		}
		if len(p.Entries) == 0 {
			t.Fatal("an empty page with a Next cursor")
		}
		f.Cursor = p.Next
		if pages > 1000 {
			t.Fatal("pagination does not end")
		}
	}
}

func TestQuery(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.new(t, time.Now)
			written := dataset(60)
			// Several batches, as the Recorder writes them.
			for i := 0; i < len(written); i += 25 {
				if err := s.Write(t.Context(), written[i:min(i+25, len(written))]); err != nil {
					t.Fatal(err)
				}
			}
			tests := []struct {
				name string
				give audit.Filter
			}{
				{"all", audit.Filter{}},
				{"source", audit.Filter{Source: "stripe"}},
				{"outcome", audit.Filter{Outcome: "replayed"}},
				{"route", audit.Filter{Route: "/webhooks/stone"}},
				{"source and outcome", audit.Filter{Source: "stone", Outcome: "processed"}},
				{"since", audit.Filter{Since: base.Add(10 * time.Second)}},
				{"until", audit.Filter{Until: base.Add(5 * time.Second)}},
				{"since and until", audit.Filter{Since: base.Add(3 * time.Second), Until: base.Add(9*time.Second + 2*time.Microsecond)}},
				{"sub-microsecond bounds", audit.Filter{Since: base.Add(3*time.Second + 500), Until: base.Add(9*time.Second + 1500)}},
				{"all filters", audit.Filter{Source: "stone", Outcome: "processed", Route: "/webhooks/stone", Since: base.Add(-time.Hour), Until: base.Add(time.Hour)}},
				{"no match", audit.Filter{Source: "shopify"}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					want := expectedFor(b, written, tt.give)
					p, err := s.Query(t.Context(), tt.give)
					if err != nil {
						t.Fatal(err)
					}
					if p.Next != "" {
						t.Errorf("Next = %q on a page holding everything", p.Next)
					}
					sameEntries(t, "one page", p.Entries, want)

					for _, limit := range []int{1, 7, 20} {
						f := tt.give
						f.Limit = limit
						all, pages := queryAll(t, s, f)
						sameEntries(t, fmt.Sprintf("pages of %d", limit), all, want)
						if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
							t.Errorf("pages of %d: %d pages for %d entries", limit, pages, len(want))
						}
					}
				})
			}
		})
	}
}

// TestPaginationWhileWriting: entries written between pages are newer than
// the cursor and don't disturb it: every entry present at the first page is
// returned exactly once.
func TestPaginationWhileWriting(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.new(t, time.Now)
			written := dataset(40)
			if err := s.Write(t.Context(), written); err != nil {
				t.Fatal(err)
			}
			want := expectedFor(b, written, audit.Filter{})
			var got []audit.Entry
			f := audit.Filter{Limit: 6}
			for i := 0; ; i++ {
				p, err := s.Query(t.Context(), f)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, p.Entries...)
				if p.Next == "" {
					break
				}
				f.Cursor = p.Next
				more := dataset(1)
				more[0].Time = base.Add(time.Hour + time.Duration(i)*time.Second)
				if err := s.Write(t.Context(), more); err != nil {
					t.Fatal(err)
				}
			}
			sameEntries(t, "pages", got, want)
		})
	}
}

func TestQueryLimits(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.new(t, time.Now)
			written := dataset(audit.MaxLimit + 50)
			if err := s.Write(t.Context(), written); err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				give     int
				wantLen  int
				wantNext bool
			}{
				{0, audit.DefaultLimit, true},
				{-5, audit.DefaultLimit, true},
				{10, 10, true},
				{audit.MaxLimit, audit.MaxLimit, true},
				{audit.MaxLimit + 500, audit.MaxLimit, true},
			}
			for _, tt := range tests {
				p, err := s.Query(t.Context(), audit.Filter{Limit: tt.give})
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Entries) != tt.wantLen || (p.Next != "") != tt.wantNext {
					t.Errorf("Limit %d: got %d entries, next %q; want %d, next %t", tt.give, len(p.Entries), p.Next, tt.wantLen, tt.wantNext)
				}
			}
			// The last page of exactly Limit entries ends the listing.
			p, err := s.Query(t.Context(), audit.Filter{Limit: 50, Cursor: mustCursorAfter(t, s, audit.MaxLimit)})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Entries) != 50 || p.Next != "" {
				t.Errorf("last page: %d entries, next %q; want 50 and no next", len(p.Entries), p.Next)
			}
		})
	}
}

// mustCursorAfter returns the cursor following the first n entries.
func mustCursorAfter(t *testing.T, q audit.Querier, n int) string {
	t.Helper()
	p, err := q.Query(t.Context(), audit.Filter{Limit: n})
	if err != nil || p.Next == "" {
		t.Fatalf("Query(Limit %d): next %q, %v", n, p.Next, err)
	}
	return p.Next
}

func TestBadCursor(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.new(t, time.Now)
			for _, cursor := range []string{"%%%", "aGVsbG8", "djE6MTp4", "djI6MTox"} {
				if _, err := s.Query(t.Context(), audit.Filter{Cursor: cursor}); !errors.Is(err, audit.ErrBadCursor) {
					t.Errorf("cursor %q: got %v, want ErrBadCursor", cursor, err)
				}
			}
		})
	}
}

func TestPrune(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clk := fakeclock.New(base)
			s, ok := b.new(t, clk.Now).(pruner)
			if !ok {
				t.Skip("keeps a bounded number of entries, not a retention")
			}
			ages := []time.Duration{8 * 24 * time.Hour, audit.DefaultRetention + time.Microsecond, audit.DefaultRetention, audit.DefaultRetention - time.Hour, time.Minute}
			var written []audit.Entry
			for i, age := range ages {
				written = append(written, audit.Entry{Time: base.Add(-age), Source: "stone", Outcome: "processed", Status: 200, Key: fmt.Sprint(i)})
			}
			if err := s.(audit.Sink).Write(t.Context(), written); err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				advance  time.Duration
				wantGone int64
				wantLeft int
			}{
				{0, 2, 3}, // older than 7 days; the one exactly 7 days old stays
				{0, 0, 3},
				{time.Microsecond, 1, 2},
				{time.Hour, 1, 1},
				{24 * time.Hour, 0, 1},
				{7 * 24 * time.Hour, 1, 0},
			}
			for i, st := range steps {
				clk.Advance(st.advance)
				n, err := s.Prune(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				p, err := s.(audit.Querier).Query(t.Context(), audit.Filter{})
				if err != nil {
					t.Fatal(err)
				}
				if n != st.wantGone || len(p.Entries) != st.wantLeft {
					t.Errorf("step %d: pruned %d, %d left; want %d, %d", i, n, len(p.Entries), st.wantGone, st.wantLeft)
				}
			}
		})
	}
}

func TestNewPostgresTableName(t *testing.T) {
	pool := postgresPool(t)
	for _, table := range []string{"bad-name", "a;drop table x", "1abc", "a.b.c", "x\"y"} {
		if _, err := audit.NewPostgres(t.Context(), pool, audit.PostgresConfig{Table: table}); err == nil {
			t.Errorf("NewPostgres(Table %q): got nil error", table)
		}
	}
	// A schema-qualified name works, and two sinks on one table share it.
	schema := uniqueTable()
	if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	var sinks [2]*audit.Postgres
	var wg sync.WaitGroup
	var errs [2]error
	for i := range sinks {
		wg.Go(func() {
			sinks[i], errs[i] = audit.NewPostgres(t.Context(), pool, audit.PostgresConfig{Table: schema + ".deliveries", PruneInterval: -1})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("NewPostgres concurrently on one table: %v", err)
		}
	}
	if err := sinks[0].Write(t.Context(), dataset(3)); err != nil {
		t.Fatal(err)
	}
	p, err := sinks[1].Query(t.Context(), audit.Filter{})
	if err != nil || len(p.Entries) != 3 {
		t.Fatalf("the second sink sees %d entries, %v; want 3", len(p.Entries), err)
	}
}

func TestNewSQLiteErrors(t *testing.T) {
	if _, err := audit.NewSQLite(nil, audit.SQLiteConfig{}); err == nil {
		t.Error("NewSQLite(nil): got nil error")
	}
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := audit.NewSQLite(db, audit.SQLiteConfig{Retention: -time.Hour}); err == nil {
		t.Error("NewSQLite with a negative retention: got nil error")
	}
	// The store and the trail share one file.
	store, err := sqlitestore.New(db, sqlitestore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, err := audit.NewSQLite(db, audit.SQLiteConfig{PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := db.Exec(`UPDATE idemhook_schema SET version = 99 WHERE component = 'audit'`); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.NewSQLite(db, audit.SQLiteConfig{}); err == nil {
		t.Error("NewSQLite on a newer schema: got nil error")
	}
}

// A file whose trail was made by schema version 1 (no reason, no instance)
// is upgraded in place: its rows stay, with empty reason and instance.
func TestSQLiteUpgradeFromVersion1(t *testing.T) {
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
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
	s, err := audit.NewSQLite(db, audit.SQLiteConfig{PruneInterval: -1})
	if err != nil {
		t.Fatalf("NewSQLite on a version 1 file: %v", err)
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
	if err := db.QueryRow(`SELECT version FROM idemhook_schema WHERE component = 'audit'`).Scan(&version); err != nil || version != audit.SQLiteSchemaVersion {
		t.Fatalf("recorded version %d, %v; want %d", version, err, audit.SQLiteSchemaVersion)
	}
}
