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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/pgtest"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/storetest"
)

// BenchmarkStore measures the middleware's store steps (storetest.Bench:
// a claim plus a complete; a claim that finds a stored response) on the
// PostgreSQL of IDEMHOOK_POSTGRES_URL, with pgxpool's default pool.
func BenchmarkStore(b *testing.B) {
	pool := pgtest.Pool(b)
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newStore(tb, pool, pgstore.Config{}) },
	})
}

// BenchmarkCompleteTx is a first delivery whose record commits in the
// handler's transaction: Claim, then BEGIN, CompleteTx, COMMIT, then the Get
// by which the middleware sees the commit. Its "plain" sibling is the same
// transaction without CompleteTx followed by the middleware's Complete: what
// a handler with its own transaction costs today.
func BenchmarkCompleteTx(b *testing.B) {
	pool := pgtest.Pool(b)
	st := newStore(b, pool, pgstore.Config{})
	for _, tx := range []bool{false, true} {
		name := "plain"
		if tx {
			name = "in-tx"
		}
		b.Run(name, func(b *testing.B) {
			var n atomic.Int64
			mw, err := idemhook.New(st, idemhook.Options{})
			if err != nil {
				b.Fatal(err)
			}
			route, err := mw.Route(idemhook.Route{Source: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				d, _ := idemhook.DeliveryFromContext(ctx)
				err := pgx.BeginFunc(ctx, pool, func(t pgx.Tx) error {
					if !tx {
						return nil
					}
					return st.CompleteTx(ctx, t, d, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, []byte(`{"ok":true}`))
				})
				if err != nil {
					b.Error(err)
				}
				if !tx {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"ok":true}`)) //nolint:errcheck
				}
			}))
			prefix := fmt.Sprintf(`{"run":%q,"n":`, b.Name())
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(fmt.Sprint(prefix, n.Add(1), "}"))))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
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
// statements are prepared: a first delivery is 2 statements in 2 round trips
// (the claim and the complete), a replay 1 (the claim, which finds the
// record). With the record completed in the handler's transaction, the
// middleware's own statements are the claim and the Get that sees the
// commit; the CompleteTx UPDATE rides in the handler's transaction, between
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

	for _, tc := range []struct {
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
		inTx = tc.tx
		statements, writes, sql := send(tc.body)
		t.Logf("%s: %d statements, %d round trips (%s)", tc.name, statements, writes, sql)
		if statements != tc.statements || writes != tc.roundTrip || sql != tc.sql {
			t.Errorf("%s: %d statements in %d round trips (%s), want %d in %d (%s)", tc.name, statements, writes, sql, tc.statements, tc.roundTrip, tc.sql)
		}
	}
}
