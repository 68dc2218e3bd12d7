package pgstore

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/idemhook/idemhook/internal/gather"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group commit ([Config.Batch]). Without it every Claim and Complete is a
// statement and a commit of its own, and a commit waits for its WAL record
// to reach the disk. With a pool of a few connections, concurrent first
// deliveries queue for them, one flush each. With it, Claim's and
// Complete's statements go to a few worker goroutines. Each takes the
// statements waiting at that moment and sends them as one pgx.Batch. That
// is one round trip and one implicit transaction, so one commit and one
// flush for all of them. A lone statement is sent at once. The statements of a batch
// run in key order, so that two batches lock the rows they share in the
// same order and never deadlock. A caller gets its result after the commit.
//
// If the server rejects any statement of a batch (the whole batch is then
// rolled back), each statement runs again on its own, so that one failing
// write never fails or undoes another's. Any other error (the connection
// broke, the batch's deadline passed) is every statement's error, as it
// would have been for a statement of its own. The statement's outcome is
// then unknown.

const (
	batchWorkers = 2  // batches on the wire at once, each on a connection of the pool
	batchMax     = 64 // statements per batch
)

// op is one statement run by the batcher: a query whose value is read
// (Claim, with its fence when fenced; a queue's accept), or a statement
// whose affected rows are counted (Complete).
type op struct {
	ctx    context.Context
	key    []byte
	sql    string
	args   []any
	query  bool
	fenced bool // the query's row holds the fence after the value

	value []byte
	fence int64
	n     int64
	err   error
	done  chan struct{}
}

// scan reads the query's row.
func (o *op) scan(row pgx.Row) error {
	if o.fenced {
		return row.Scan(&o.value, &o.fence)
	}
	return row.Scan(&o.value)
}

type batcher struct {
	pool    *pgxpool.Pool
	workers *gather.Workers[*op]
}

var errClosed = errors.New("pgstore: the store is closed")

func startBatcher(pool *pgxpool.Pool) *batcher {
	b := &batcher{pool: pool}
	b.workers = gather.Start(batchWorkers, batchMax, func(batch []*op) {
		b.exec(batch)
		for _, o := range batch {
			close(o.done)
		}
	})
	return b
}

func (b *batcher) close() { b.workers.Close() }

// do runs o in one of the next batches. Once a worker has taken o, do
// waits for the batch's end even if o's context ends meanwhile, so that a
// caller is never told "failed" about a write that was committed.
func (b *batcher) do(o *op) {
	o.done = make(chan struct{})
	select {
	case b.workers.Queue() <- o:
	case <-o.ctx.Done():
		o.err = o.ctx.Err()
		return
	case <-b.workers.Stopped():
		o.err = errClosed
		return
	}
	<-o.done
}

// exec runs batch as one pgx.Batch, or each of its statements on its own
// when the server rejected one. It runs until the latest deadline of the
// batch's statements (one without: the pool's own timeouts).
func (b *batcher) exec(batch []*op) {
	var deadline gather.Deadline
	live := batch[:0:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.err = err // given up before it ran: never run
			continue
		}
		deadline.Add(o.ctx)
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := deadline.Context()
	defer cancel()
	runBatch(ctx, b.pool, live) //nolint:errcheck // every statement carries its own error
}

// runBatch runs live as one pgx.Batch (one round trip, one implicit
// transaction), its statements in key order (stable: the statements of one
// key in the order given), or the one statement alone. When the server
// rejected a statement, which rolls the batch back, each statement runs
// again on its own. Any other error (the connection broke, ctx ended) is
// every statement's error, and runBatch returns it too: the statements'
// outcome is then unknown.
func runBatch(ctx context.Context, pool *pgxpool.Pool, live []*op) error {
	if len(live) == 1 {
		return runOne(ctx, pool, live[0])
	}
	slices.SortStableFunc(live, func(x, y *op) int { return bytes.Compare(x.key, y.key) })
	var pb pgx.Batch
	for _, o := range live {
		pb.Queue(o.sql, o.args...)
	}
	br := pool.SendBatch(ctx, &pb)
	var failed error
	for _, o := range live {
		if o.query {
			o.err = o.scan(br.QueryRow())
		} else {
			var tag pgconn.CommandTag
			tag, o.err = br.Exec()
			o.n = tag.RowsAffected()
		}
		if o.err != nil && failed == nil {
			failed = o.err
		}
	}
	if err := br.Close(); err != nil && failed == nil {
		failed = err // the commit
	}
	if failed == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(failed, &pgErr) {
		for _, o := range live {
			o.value, o.fence, o.n, o.err = nil, 0, 0, failed
		}
		return failed
	}
	// The server rejected a statement, so it rolled the batch back: run
	// each statement again, alone.
	for _, o := range live {
		o.value, o.fence, o.n, o.err = nil, 0, 0, nil
		runOne(ctx, pool, o) //nolint:errcheck // each statement carries its own error
	}
	return nil
}

// runOne runs o as a statement of its own and returns its error when it
// is not the server's (the connection's, ctx's).
func runOne(ctx context.Context, pool *pgxpool.Pool, o *op) error {
	if o.query {
		o.err = o.scan(pool.QueryRow(ctx, o.sql, o.args...))
	} else {
		tag, err := pool.Exec(ctx, o.sql, o.args...)
		o.n, o.err = tag.RowsAffected(), err
	}
	var pgErr *pgconn.PgError
	if o.err != nil && !errors.As(o.err, &pgErr) && !errors.Is(o.err, pgx.ErrNoRows) {
		return o.err
	}
	return nil
}
