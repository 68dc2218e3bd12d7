package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/pgstore"
)

// syncCounter counts the round trips of the connections it dials by
// reading the messages the client sends (PostgreSQL's frontend protocol):
// the client waits for the server's ReadyForQuery after each Sync (the end
// of an extended-protocol exchange: a statement, a pgx.Batch, a prepare)
// and after each simple Query, so each of those is one round trip. It also
// counts the Execute messages: one per statement run.
type syncCounter struct {
	mu       sync.Mutex
	syncs    int // Sync and Query messages: round trips
	executes int
}

func (c *syncCounter) reset() {
	c.mu.Lock()
	c.syncs, c.executes = 0, 0
	c.mu.Unlock()
}

func (c *syncCounter) counts() (roundTrips, executes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncs, c.executes
}

// wrap makes dial's connections counted.
func (c *syncCounter) wrap(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &syncCountedConn{Conn: conn, c: c}, nil
	}
}

// syncCountedConn parses what the client writes into messages: the startup
// message first (a length, no type byte), then a type byte and a length
// each.
type syncCountedConn struct {
	net.Conn
	c       *syncCounter
	started bool
	hdr     []byte // the header read so far of the next message
	skip    int    // the bytes of the current message's body still to come
}

func (cc *syncCountedConn) Write(p []byte) (int, error) {
	cc.scan(p)
	return cc.Conn.Write(p)
}

func (cc *syncCountedConn) scan(p []byte) {
	for len(p) > 0 {
		if cc.skip > 0 {
			n := min(cc.skip, len(p))
			cc.skip -= n
			p = p[n:]
			continue
		}
		want := 5
		if !cc.started {
			want = 4
		}
		n := min(want-len(cc.hdr), len(p))
		cc.hdr = append(cc.hdr, p[:n]...)
		p = p[n:]
		if len(cc.hdr) < want {
			return
		}
		if !cc.started {
			cc.started = true
			cc.skip = int(binary.BigEndian.Uint32(cc.hdr)) - 4
		} else {
			cc.skip = int(binary.BigEndian.Uint32(cc.hdr[1:])) - 4
			cc.c.mu.Lock()
			switch cc.hdr[0] {
			case 'S', 'Q':
				cc.c.syncs++
			case 'E':
				cc.c.executes++
			}
			cc.c.mu.Unlock()
		}
		cc.hdr = cc.hdr[:0]
	}
}

// syncCountedPool returns a pool of one connection whose round trips trips
// counts.
func syncCountedPool(tb testing.TB) (*pgxpool.Pool, *syncCounter) {
	trips := &syncCounter{}
	pool := pgtest.PoolConfig(tb, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		cfg.ConnConfig.DialFunc = trips.wrap(cfg.ConnConfig.DialFunc)
	})
	return pool, trips
}

func batchOps(n int) []idemhook.BatchOp {
	prefix := "idem:rt:" + rand.Text() + ":"
	ops := make([]idemhook.BatchOp, n)
	for i := range ops {
		ops[i] = idemhook.BatchOp{Key: prefix + strconv.Itoa(i), Claim: &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}}
	}
	return ops
}

// TestBatchRoundTrips measures, by the messages the client sends, what a
// batched call of 1,000 ops costs: one round trip (one Sync) running 1,000
// statements (Executes), plus one the first time the connection meets the
// statement, in which pgx prepares it.
func TestBatchRoundTrips(t *testing.T) {
	pool, trips := syncCountedPool(t)
	st := newStore(t, pool, pgstore.Config{})
	ctx := t.Context()
	const n = 1000
	measure := func(what string, maxTrips int, call func(ops []idemhook.BatchOp) error, ops []idemhook.BatchOp) {
		t.Helper()
		trips.reset()
		if err := call(ops); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		rt, execs := trips.counts()
		t.Logf("%s of %d ops: %d round trips, %d statements run", what, len(ops), rt, execs)
		if rt > maxTrips || execs != len(ops) {
			t.Fatalf("%s of %d ops: %d round trips running %d statements; want at most %d running %d", what, len(ops), rt, execs, maxTrips, len(ops))
		}
		for i, op := range ops {
			if op.Err != nil {
				t.Fatalf("%s op %d: %v", what, i, op.Err)
			}
		}
	}
	claim := func(ops []idemhook.BatchOp) error { return st.ClaimBatch(ctx, ops, time.Minute) }
	extend := func(ops []idemhook.BatchOp) error { return st.ExtendBatch(ctx, ops, time.Minute) }
	complete := func(ops []idemhook.BatchOp) error { return st.CompleteBatch(ctx, ops, time.Hour) }
	release := func(ops []idemhook.BatchOp) error { return st.ReleaseBatch(ctx, ops) }

	measure("ClaimBatch, statement not yet prepared", 2, claim, batchOps(n))
	ops := batchOps(n)
	measure("ClaimBatch", 1, claim, ops)
	measure("ExtendBatch, statement not yet prepared", 2, extend, ops)
	measure("ExtendBatch", 1, extend, ops)
	for i := range ops {
		ops[i].Done = &idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: []byte(`{"ok":true}`)}
	}
	half, rest := ops[:n/2], ops[n/2:]
	measure("CompleteBatch, statement not yet prepared", 2, complete, half)
	measure("CompleteBatch", 1, complete, rest)
	rel := batchOps(n)
	measure("ClaimBatch", 1, claim, rel)
	measure("ReleaseBatch, statement not yet prepared", 2, release, rel[:n/2])
	measure("ReleaseBatch", 1, release, rel[n/2:])
	again := append([]idemhook.BatchOp(nil), ops...)
	for i := range again {
		again[i].Claim = &idemhook.Record{State: idemhook.StatePending, Token: rand.Text()}
	}
	measure("ClaimBatch of done keys", 1, claim, again)
	for i, op := range again {
		if op.Existing == nil || op.Existing.State != idemhook.StateCompleted {
			t.Fatalf("ClaimBatch op %d of a done key: found %v", i, op.Existing)
		}
	}
}

// BenchmarkClaimBatch1000 is a ClaimBatch of 1,000 new keys, the
// middleware's largest batch, on a pool of one connection whose statement
// is prepared. roundtrips/op is what the connection's messages say (Syncs
// and Queries).
func BenchmarkClaimBatch1000(b *testing.B) {
	pool, trips := syncCountedPool(b)
	st := newStore(b, pool, pgstore.Config{})
	ops := make([]idemhook.BatchOp, 1000)
	claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
	prefix := "idem:bench:" + rand.Text() + ":"
	round := 0
	// Prepare the statement on the connection first: that round trip
	// comes once per connection, not per batch.
	if err := st.ClaimBatch(b.Context(), batchOps(1), time.Minute); err != nil {
		b.Fatal(err)
	}
	trips.reset()
	b.ReportAllocs()
	for b.Loop() {
		round++
		b.StopTimer()
		for i := range ops {
			ops[i] = idemhook.BatchOp{Key: prefix + strconv.Itoa(round) + ":" + strconv.Itoa(i), Claim: claim}
		}
		b.StartTimer()
		if err := st.ClaimBatch(b.Context(), ops, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	rt, _ := trips.counts()
	b.ReportMetric(float64(rt)/float64(round), "roundtrips/op")
}

// TestBatchStatementRejected checks the failure path of a batch: a
// statement the server rejects (here a claim that waits past lock_timeout
// for a row another transaction inserted and holds) rolls the batch back,
// and each op then runs alone, so that the other ops of the batch get
// their own outcome and only the rejected one fails.
func TestBatchStatementRejected(t *testing.T) {
	pool := pgtest.PoolConfig(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = "200ms"
	})
	st := newStore(t, pool, pgstore.Config{})
	ctx := t.Context()
	ops := batchOps(3)
	// Another transaction inserts the middle key and keeps it uncommitted:
	// the batch's INSERT of that key waits for it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // rolled back on purpose
	if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{st.Table()}.Sanitize()+` (key, value, expires_at) VALUES ($1, '\x00'::bytea, now() + interval '1 hour')`, []byte(ops[1].Key)); err != nil {
		t.Fatal(err)
	}
	if err := st.ClaimBatch(ctx, ops, time.Minute); err != nil {
		t.Fatalf("ClaimBatch: %v; want the rejected statement to be its op's error", err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(ops[1].Err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("ClaimBatch op on the locked key: got %v, want lock_timeout (55P03)", ops[1].Err)
	}
	for _, i := range []int{0, 2} {
		if ops[i].Err != nil || ops[i].Existing != nil || ops[i].Fence == 0 {
			t.Fatalf("ClaimBatch op %d beside the rejected one: existing %v, fence %d, err %v; want its claim stored", i, ops[i].Existing, ops[i].Fence, ops[i].Err)
		}
		got, err := st.Get(ctx, ops[i].Key)
		if err != nil || got == nil || got.Token != ops[i].Claim.Token {
			t.Fatalf("Get(%q) after ClaimBatch: %v, %v; want the op's claim", ops[i].Key, got, err)
		}
	}
}

// TestBatchUnreachable checks that a batch that can't reach the server
// fails as a whole: the call's own error, which the middleware applies to
// every op.
func TestBatchUnreachable(t *testing.T) {
	var down atomic.Bool
	pool := pgtest.PoolConfig(t, func(cfg *pgxpool.Config) {
		dial := cfg.ConnConfig.DialFunc
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if down.Load() {
				return nil, errors.New("test: the server is down")
			}
			return dial(ctx, network, addr)
		}
	})
	st := newStore(t, pool, pgstore.Config{})
	ctx := t.Context()
	ops := batchOps(10)
	if err := st.ClaimBatch(ctx, ops, time.Minute); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	pool.Reset() // close every connection: the next call must dial
	for i := range ops {
		ops[i].Done = &idemhook.Record{State: idemhook.StateCompleted, Status: 200}
	}
	for name, call := range map[string]func() error{
		"ClaimBatch":    func() error { return st.ClaimBatch(ctx, batchOps(10), time.Minute) },
		"CompleteBatch": func() error { return st.CompleteBatch(ctx, ops, time.Hour) },
		"ReleaseBatch":  func() error { return st.ReleaseBatch(ctx, ops) },
		"ExtendBatch":   func() error { return st.ExtendBatch(ctx, ops, time.Minute) },
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "the server is down") {
			t.Fatalf("%s with the server down: got %v, want the batch's error", name, err)
		}
	}
	down.Store(false)
	if err := st.CompleteBatch(ctx, ops, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		if op.Err != nil {
			t.Fatalf("CompleteBatch op %d once the server is back: %v; the failed batches must have changed nothing", i, op.Err)
		}
	}
}
