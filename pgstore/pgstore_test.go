package pgstore_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/storetest"
)

// newStore returns a store on a table of its own, dropped when tb ends.
func newStore(tb testing.TB, pool *pgxpool.Pool, cfg pgstore.Config) *pgstore.Store {
	tb.Helper()
	if cfg.Table == "" {
		cfg.Table = pgtest.Table(tb, pool, "idemhook_test")
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = -1
	}
	s, err := pgstore.New(context.Background(), pool, cfg)
	if err != nil {
		tb.Fatalf("pgstore.New: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the whole storetest suite against a real PostgreSQL.
// Expiry follows the database's clock, which can't be moved, so the suite
// checks it with short real lifetimes.
func TestConformance(t *testing.T) {
	pool := pgtest.Pool(t)
	storetest.Run(t, storetest.Harness{
		New:     func(tb testing.TB) idemhook.Store { return newStore(tb, pool, pgstore.Config{}) },
		Corrupt: corruptWith(pool),
	})
}

// corruptWith is a Harness.Corrupt that writes a value that is no record
// into the store's table through pool, live for an hour.
func corruptWith(pool *pgxpool.Pool) func(tb testing.TB, st idemhook.Store, key string) {
	return func(tb testing.TB, st idemhook.Store, key string) {
		tb.Helper()
		table := pgx.Identifier{st.(*pgstore.Store).Table()}.Sanitize()
		if _, err := pool.Exec(tb.Context(), `INSERT INTO `+table+` (key, value, expires_at) VALUES ($1, '\xff00'::bytea, now() + interval '1 hour')`, []byte(key)); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestConformanceBatch runs the conformance suite with Config.Batch, whose
// concurrent claims share a batch and a commit.
func TestConformanceBatch(t *testing.T) {
	pool := pgtest.Pool(t)
	storetest.Run(t, storetest.Harness{
		New:     func(tb testing.TB) idemhook.Store { return newStore(tb, pool, pgstore.Config{Batch: true}) },
		Corrupt: corruptWith(pool),
	})
}

func TestName(t *testing.T) {
	if got := (&pgstore.Store{}).Name(); got != "PostgreSQL" {
		t.Fatalf("Name() = %q, want PostgreSQL", got)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := pgstore.New(t.Context(), nil, pgstore.Config{}); err == nil || !strings.Contains(err.Error(), "nil *pgxpool.Pool") {
		t.Fatalf("New(nil pool): %v", err)
	}
	// The table name is checked before the pool is used, so a pool that
	// could never connect is enough here.
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, name := range []string{"1abc", "a-b", "a.b.c", `x"; DROP TABLE y; --`, strings.Repeat("a", 64), "a b", "ünï"} {
		_, err := pgstore.New(t.Context(), pool, pgstore.Config{Table: name})
		if err == nil || !strings.Contains(err.Error(), "want letters, digits and underscores") {
			t.Errorf("New(Table %q): got %v, want a table-name error", name, err)
		}
	}
	if _, err := pgstore.New(t.Context(), pool, pgstore.Config{SweepBatch: -1}); err == nil || !strings.Contains(err.Error(), "SweepBatch") {
		t.Errorf("New(SweepBatch -1): %v", err)
	}
}

func TestSchema(t *testing.T) {
	got, err := pgstore.Schema("webhooks.Keys")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "webhooks"."Keys" (`, `key        bytea       PRIMARY KEY`,
		`CREATE INDEX IF NOT EXISTS "Keys_expires_at_idx" ON "webhooks"."Keys" (expires_at);`} {
		if !strings.Contains(got, want) {
			t.Errorf("Schema lacks %q:\n%s", want, got)
		}
	}
	if _, err := pgstore.Schema("bad-name"); err == nil {
		t.Error("Schema(bad-name): no error")
	}
}

// TestSchemaIsWhatNewCreates applies Schema's SQL by hand, as a team
// managing its own migrations would, and opens the table with SkipCreate.
// With SkipCreate and no table, New fails and names the table.
func TestSchemaIsWhatNewCreates(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "idemhook_migrated")
	if _, err := pgstore.New(t.Context(), pool, pgstore.Config{Table: table, SkipCreate: true}); err == nil || !strings.Contains(err.Error(), table) {
		t.Fatalf("New(SkipCreate) without the table: %v", err)
	}
	ddl, err := pgstore.Schema(table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), ddl); err != nil {
		t.Fatalf("applying Schema(%q): %v\n%s", table, err, ddl)
	}
	s := newStore(t, pool, pgstore.Config{Table: table, SkipCreate: true})
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "t1", CreatedAt: time.UnixMilli(1)}
	if existing, err := s.Claim(t.Context(), "k", claim, time.Hour); err != nil || existing != nil {
		t.Fatalf("Claim: %v, %v", existing, err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// TestConcurrentCreate opens one table from many stores at once, as gateways
// starting together do. The advisory lock keeps CREATE TABLE IF NOT EXISTS
// from racing.
func TestConcurrentCreate(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "idemhook_create")
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			s, err := pgstore.New(t.Context(), pool, pgstore.Config{Table: table, SweepInterval: -1})
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent New: %v", err)
		}
	}
}

// TestSweep deletes expired rows in batches and leaves live ones.
func TestSweep(t *testing.T) {
	pool := pgtest.Pool(t)
	s := newStore(t, pool, pgstore.Config{SweepBatch: 7})
	ctx := t.Context()
	for i := range 30 {
		claim := &idemhook.Record{State: idemhook.StatePending, Token: "tok", CreatedAt: time.UnixMilli(int64(i + 1))}
		lease := time.Hour
		if i < 25 {
			lease = time.Millisecond
		}
		if _, err := s.Claim(ctx, "k"+string(rune('a'+i)), claim, lease); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	n, err := s.Sweep(ctx)
	if err != nil || n != 25 {
		t.Fatalf("Sweep: %d, %v; want 25 deleted", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+`"`+s.Table()+`"`).Scan(&left); err != nil || left != 5 {
		t.Fatalf("rows left: %d, %v; want 5", left, err)
	}
}

// TestBackgroundSweep checks the sweeper runs on its own.
func TestBackgroundSweep(t *testing.T) {
	pool := pgtest.Pool(t)
	s := newStore(t, pool, pgstore.Config{SweepInterval: 20 * time.Millisecond})
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "tok", CreatedAt: time.UnixMilli(1)}
	if _, err := s.Claim(t.Context(), "gone", claim, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM "`+s.Table()+`"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired row was not swept within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDuplicateClaimWritesNothing checks that a Claim that finds a live
// record (a replay, or a duplicate of a running delivery) is a read. The row
// keeps its version (same ctid and xmin). So a duplicate never costs a
// write, a WAL flush or a row lock.
func TestDuplicateClaimWritesNothing(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	ctx := t.Context()
	version := func(key string) string {
		var v string
		if err := pool.QueryRow(ctx, `SELECT ctid::text || '/' || xmin::text FROM "`+st.Table()+`" WHERE key = $1`, []byte(key)).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "first", CreatedAt: time.UnixMilli(1)}
	for _, complete := range []bool{false, true} {
		key := fmt.Sprintf("dup-%t", complete)
		if existing, err := st.Claim(ctx, key, claim, time.Hour); err != nil || existing != nil {
			t.Fatalf("Claim: %v %v", existing, err)
		}
		if complete {
			done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.UnixMilli(2), Status: 200}
			if err := st.Complete(ctx, key, claim, done, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		before := version(key)
		for range 5 {
			other := &idemhook.Record{State: idemhook.StatePending, Token: "dup", CreatedAt: time.UnixMilli(3)}
			if existing, err := st.Claim(ctx, key, other, time.Hour); err != nil || existing == nil {
				t.Fatalf("duplicate Claim: %v %v", existing, err)
			}
		}
		if after := version(key); after != before {
			t.Fatalf("completed=%t: a duplicate Claim rewrote the row (version %s, then %s)", complete, before, after)
		}
	}
}

// counter counts what a pool sends to PostgreSQL: statements, through pgx's
// tracer, and network round trips, as the writes on the connections (pgx
// sends each statement, with its Bind and Execute, in one write and then
// waits for the answer).
type counter struct {
	statements, writes atomic.Int64
	mu                 sync.Mutex
	sql                []string
}

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	c.mu.Lock()
	c.sql = append(c.sql, strings.Fields(data.SQL)[0])
	c.mu.Unlock()
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *counter) reset() {
	c.statements.Store(0)
	c.writes.Store(0)
	c.mu.Lock()
	c.sql = nil
	c.mu.Unlock()
}

type countingConn struct {
	net.Conn
	c *counter
}

func (cc countingConn) Write(p []byte) (int, error) {
	cc.c.writes.Add(1)
	return cc.Conn.Write(p)
}

func countedPool(t *testing.T) (*pgxpool.Pool, *counter) {
	c := &counter{}
	pool := pgtest.PoolConfig(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = c
		cfg.MaxConns = 1 // one connection, prepared once
		dial := cfg.ConnConfig.DialFunc
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{conn, c}, nil
		}
	})
	return pool, c
}

// TestRoundTripsPerDelivery counts, with pgx's tracer and on the wire, what
// the middleware sends to PostgreSQL per delivery once the connection's
// statements are prepared. A first delivery is 2 statements in 2 round
// trips (the claim and the complete). A replay is 1 (the claim, which finds
// the record). With the record completed in the handler's transaction, the
// middleware's own statements are the claim and the Get that sees the
// commit. The CompleteTx UPDATE rides in the handler's transaction, between
// its BEGIN and COMMIT.
func TestRoundTripsPerDelivery(t *testing.T) {
	pool, c := countedPool(t)
	st := newStore(t, pool, pgstore.Config{})
	mw, err := idemhook.New(st, idemhook.Options{})
	if err != nil {
		t.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "rt"})
	if err != nil {
		t.Fatal(err)
	}
	inTx := false
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !inTx {
			w.Write([]byte(`{"ok":true}`)) //nolint:errcheck
			return
		}
		ctx := r.Context()
		d, _ := idemhook.DeliveryFromContext(ctx)
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return st.CompleteTx(ctx, tx, d, http.StatusOK, nil, []byte(`{"ok":true}`))
		}); err != nil {
			t.Error(err)
		}
	}))
	send := func(body string) (statements, writes int64, sql string) {
		c.reset()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.statements.Load(), c.writes.Load(), strings.Join(c.sql, ",")
	}
	// Warm up: prepare every statement on the one connection.
	send(`{"warm":1}`)
	send(`{"warm":1}`)
	inTx = true
	send(`{"warm":2}`)
	inTx = false

	for _, tt := range []struct {
		name                  string
		tx                    bool
		body                  string
		statements, roundTrip int64
		sql                   string
	}{
		{"first delivery", false, `{"id":1}`, 2, 2, "WITH,UPDATE"},
		{"replay", false, `{"id":1}`, 1, 1, "WITH"},
		{"first delivery, completed in the handler's transaction", true, `{"id":2}`, 5, 5, "WITH,begin,UPDATE,commit,SELECT"},
		{"replay of it", true, `{"id":2}`, 1, 1, "WITH"},
	} {
		inTx = tt.tx
		statements, writes, sql := send(tt.body)
		t.Logf("%s: %d statements, %d round trips (%s)", tt.name, statements, writes, sql)
		if statements != tt.statements || writes != tt.roundTrip || sql != tt.sql {
			t.Errorf("%s: %d statements in %d round trips (%s), want %d in %d (%s)", tt.name, statements, writes, sql, tt.statements, tt.roundTrip, tt.sql)
		}
	}
}

// TestExpiryOnTheDatabaseClock checks that a lease or a TTL is stored as the
// database's time plus the lifetime. The Go process's clock (which the store
// never reads) can be hours off without changing when a claim lapses.
func TestExpiryOnTheDatabaseClock(t *testing.T) {
	pool := pgtest.Pool(t)
	st := newStore(t, pool, pgstore.Config{})
	ctx := t.Context()
	remaining := func(key string) time.Duration {
		var us int64
		err := pool.QueryRow(ctx, `SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1e6)::bigint FROM "`+st.Table()+`" WHERE key = $1`, []byte(key)).Scan(&us)
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
	// CreatedAt from a clock two hours ahead, as a skewed gateway sets it.
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "skewed", CreatedAt: time.Now().Add(2 * time.Hour)}
	if _, err := st.Claim(ctx, "k", claim, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := remaining("k"); r <= 80*time.Second || r > 90*time.Second {
		t.Fatalf("after a 90s lease the row has %v left by the database's clock", r)
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now().Add(-2 * time.Hour), Status: 200}
	if err := st.Complete(ctx, "k", claim, done, time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := remaining("k"); r <= 59*time.Minute || r > time.Hour {
		t.Fatalf("after a 1h TTL the row has %v left by the database's clock", r)
	}
}

// TestFenceIsTheDatabaseClock checks that a claim's fence is the database's
// clock in microseconds at the claim, whatever the process's clock says,
// on both paths: every gateway sharing the table reads the same clock.
func TestFenceIsTheDatabaseClock(t *testing.T) {
	pool := pgtest.Pool(t)
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%t", batch), func(t *testing.T) {
			st := newStore(t, pool, pgstore.Config{Batch: batch})
			ctx := t.Context()
			dbNow := func() uint64 {
				var us int64
				if err := pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint`).Scan(&us); err != nil {
					t.Fatal(err)
				}
				return uint64(us)
			}
			// CreatedAt from a clock two hours ahead, as a skewed gateway sets it.
			claim := &idemhook.Record{State: idemhook.StatePending, Token: "skewed", CreatedAt: time.Now().Add(2 * time.Hour)}
			before := dbNow()
			existing, fence, err := st.ClaimFenced(ctx, "k", claim, time.Minute)
			after := dbNow()
			if err != nil || existing != nil {
				t.Fatalf("ClaimFenced = %v, %v", existing, err)
			}
			if fence < before || fence > after {
				t.Fatalf("fence %d; want the database's clock at the claim, between %d and %d", fence, before, after)
			}
		})
	}
}

// TestBatchOneRejected checks that, with Config.Batch, a statement the
// server rejects fails alone. The claims sent with it still succeed.
func TestBatchOneRejected(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "idemhook_batch")
	s := newStore(t, pool, pgstore.Config{Table: table, Batch: true})
	if _, err := pool.Exec(t.Context(), `ALTER TABLE `+pgx.Identifier{table}.Sanitize()+
		` ADD CONSTRAINT refuse_bad CHECK (key <> 'idem:test:bad'::bytea)`); err != nil {
		t.Fatal(err)
	}
	const n = 32
	errs := make([]error, n)
	existing := make([]*idemhook.Record, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("idem:test:%02d", i)
			if i == n/2 {
				key = "idem:test:bad"
			}
			<-start
			existing[i], errs[i] = s.Claim(t.Context(), key, &idemhook.Record{State: idemhook.StatePending, Token: key}, time.Minute)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if i == n/2 {
			if errs[i] == nil {
				t.Errorf("Claim of the refused key succeeded")
			}
			continue
		}
		if errs[i] != nil || existing[i] != nil {
			t.Errorf("Claim %d: %v, %v; want nil, nil", i, existing[i], errs[i])
		}
	}
	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&rows); err != nil || rows != n-1 {
		t.Fatalf("%d rows, %v; want %d", rows, err, n-1)
	}
}
