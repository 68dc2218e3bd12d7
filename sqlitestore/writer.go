package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/idemhook/idemhook/internal/gather"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Group commit. Every write of the store (Claim's insert, Complete,
// Release, Extend, Delete) goes to one writer goroutine. The writer takes
// the first write that arrives and, without waiting, every other write
// already waiting to be taken. It runs them in one transaction and commits
// it once. Under load, the cost of a commit is shared by the concurrent
// deliveries. That cost is the WAL write and the file locks, most of a
// write's time. A lone write is committed at once, as before. After a
// batch, the writer yields the processor once (runtime.Gosched), so that
// the callers it woke, and others ready to run, queue their next writes
// for the next batch rather than trickle in behind a commit each. A write's
// caller gets its result only after the commit. So a result means what it
// meant with one commit per write. It is durable against a crash of the
// process (synchronous=NORMAL), not against a power loss.
//
// If any write of a batch fails, the batch is rolled back and each of its
// writes is run again in a transaction of its own, so that one failing
// write never fails or undoes another's.

// maxBatch bounds the writes committed together, so that one transaction
// doesn't hold SQLite's write lock (and the connection) for long.
const maxBatch = 128

// write is one statement run by the writer. run executes it in tx and
// returns its result (rows affected, or 1 when a RETURNING row came back).
// after, when set, runs on the writer's goroutine once the write's outcome
// is known, before its caller gets it: committed reports whether the write
// is in the file. The writes' after functions run in the order the writes
// were committed, so what they change in memory follows the file's order.
type write struct {
	ctx  context.Context
	name string // the operation, for the log: "complete", "queue settle"...
	run  func(ctx context.Context, tx *sql.Tx) (int64, error)
	// raw, when set, is the same write on the raw connection (raw.go). A
	// batch whose writes all have it (or change only memory) runs there.
	raw   rawWrite
	after func(committed bool)
	// inMemory marks a write that changes nothing in the file (it only runs
	// in the writer's order): its commit says nothing of the file's health.
	inMemory bool
	n        int64
	err      error
	done     chan struct{}
}

// rawWrite is a write that runs on the raw connection: runRaw is run's
// twin, with the same outcome.
type rawWrite interface {
	runRaw(c *rawConn) (int64, error)
}

var writePool = sync.Pool{New: func() any { return &write{done: make(chan struct{}, 1)} }}

var errClosed = errors.New("sqlitestore: the store is closed")

// commitHook, set by tests only, runs on the writer's goroutine before each
// commit: where a write has run but is not yet in the file. An error it
// returns fails the commit, as the file's would.
var commitHook atomic.Pointer[func() error]

// writer runs the store's writes, from one goroutine, until it is closed.
type writer struct {
	db      *sql.DB
	raw     *rawPool // db's raw statements; nil when db can't take them
	workers *gather.Workers[*write]
	// health, when set, is told the outcome of every commit the writer
	// tries that says something of the file: nil, or the error of the file
	// or the connection that failed it (see fileFailure). A statement that
	// fails for a reason of its own is not told: it fails its write alone.
	health func(err error)
	log    *slog.Logger // nil: no log
	// ckpt, when set, runs the checkpoints (checkpoint.go), told of
	// every batch.
	ckpt *checkpointer
}

func startWriter(db *sql.DB, raw *rawPool, ckpt *checkpointer, health func(error), log *slog.Logger) *writer {
	w := &writer{db: db, raw: raw, ckpt: ckpt, health: health, log: log}
	w.workers = gather.Start(1, maxBatch, w.run)
	return w
}

func (w *writer) close() { w.workers.Close() }

// do runs one write, named name for the log, through the writer and
// returns its result. Once the
// writer has taken the write, do waits for its commit even if ctx ends
// meanwhile (the transaction is short), so that a caller is never told
// "failed" about a write that was committed.
func (w *writer) do(ctx context.Context, name string, run func(ctx context.Context, tx *sql.Tx) (int64, error)) (int64, error) {
	return w.doThen(ctx, name, run, nil)
}

// doThen is do with an after function (see write). after is not called when
// the writer never took the write (do's caller gets ctx's error or
// errClosed); it is called with false when the write was taken but not
// committed.
func (w *writer) doThen(ctx context.Context, name string, run func(ctx context.Context, tx *sql.Tx) (int64, error), after func(committed bool)) (int64, error) {
	return w.submit(ctx, name, run, nil, after, false)
}

// doRaw is doThen for a write that also has a raw form (raw, which may be
// nil).
func (w *writer) doRaw(ctx context.Context, name string, run func(ctx context.Context, tx *sql.Tx) (int64, error), raw rawWrite, after func(committed bool)) (int64, error) {
	return w.submit(ctx, name, run, raw, after, false)
}

// inOrder runs f on the writer's goroutine, in the order of the writes,
// without writing to the file.
func (w *writer) inOrder(ctx context.Context, f func()) error {
	_, err := w.submit(ctx, "in order", func(context.Context, *sql.Tx) (int64, error) {
		f()
		return 0, nil
	}, nil, nil, true)
	return err
}

func (w *writer) submit(ctx context.Context, name string, run func(ctx context.Context, tx *sql.Tx) (int64, error), raw rawWrite, after func(committed bool), inMemory bool) (int64, error) {
	op := writePool.Get().(*write)
	op.ctx, op.name, op.run, op.raw, op.after, op.inMemory, op.n, op.err = ctx, name, run, raw, after, inMemory, 0, nil
	select {
	case w.workers.Queue() <- op:
	case <-ctx.Done():
		writePool.Put(op)
		return 0, ctx.Err()
	case <-w.workers.Stopped():
		writePool.Put(op)
		return 0, errClosed
	}
	<-op.done
	n, err := op.n, op.err
	op.ctx, op.run, op.raw, op.after = nil, nil, nil, nil
	writePool.Put(op)
	return n, err
}

// run commits batch in one transaction. When that fails, each write is
// committed on its own, so that one failing write fails no other.
func (w *writer) run(batch []*write) {
	if !w.commit(batch) && len(batch) > 1 {
		for _, op := range batch {
			w.commit([]*write{op})
		}
	}
	if w.ckpt != nil {
		w.ckpt.wrote(len(batch))
	}
	for _, op := range batch {
		if op.after != nil {
			op.after(op.err == nil)
		}
		op.done <- struct{}{}
	}
	// Let the callers just woken run before taking the next batch: those
	// with another write to make queue it now, and share the next commit
	// instead of each waiting for a commit of its own behind a batch of
	// one. Nothing waits: with no other goroutine ready to run, this
	// returns at once, and the first write queued is taken as before.
	runtime.Gosched()
}

// commit runs batch in one transaction and reports whether it committed.
// When it didn't, every write of batch carries the error.
//
// A commit that fails for the file or the connection (fileFailure) is told
// to health, which then stops claims until a write succeeds. A statement
// that fails for a reason of its own (a constraint, a bad value) fails its
// write alone, with an ERROR naming the operation: run commits the batch's
// other writes without it.
func (w *writer) commit(batch []*write) bool {
	ok, err, stmt := w.try(batch)
	switch {
	case ok:
		if w.health != nil && writesFile(batch) {
			w.health(nil)
		}
	case err == nil: // only contexts that ended
	case fileFailure(err, stmt):
		if w.health != nil {
			w.health(err)
		}
	case len(batch) == 1 && !busy(err) && w.log != nil: // alone: it is its own failure
		w.log.Error("sqlitestore: a write failed; other writes and claims go on", "op", batch[0].name, "err", err)
	}
	return ok
}

// fileFailure reports whether err, which failed a commit (stmt: in one of
// its statements, else in BEGIN or COMMIT), says the file or the
// connection fails: an I/O error, a full disk, a file that can't be
// opened, is corrupt or not a database, read-only or not permitted, no
// memory, a lost connection, or BEGIN or COMMIT failing. SQLITE_BUSY and
// SQLITE_LOCKED (another process holds the file for a moment) don't.
func fileFailure(err error, stmt bool) bool {
	if busy(err) {
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary code
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_CORRUPT,
			sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_NOMEM:
			return true
		}
		return !stmt
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, errRawClosed) {
		return true
	}
	return !stmt
}

// busy reports whether err is SQLITE_BUSY or SQLITE_LOCKED.
func busy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// writesFile reports whether batch holds a write to the file.
func writesFile(batch []*write) bool {
	for _, op := range batch {
		if !op.inMemory {
			return true
		}
	}
	return false
}

// try is commit, returning also the error of the database when one failed
// the batch (nil when only contexts that ended kept it from committing),
// and whether a write's statement failed it (else BEGIN or COMMIT did).
func (w *writer) try(batch []*write) (bool, error, bool) {
	if w.raw != nil && allRaw(batch) {
		return w.tryRaw(batch)
	}
	ctx := context.Background() // each write checks its own context first
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		for _, op := range batch {
			op.n, op.err = 0, err
		}
		return false, err, false
	}
	ok := true
	var failed error
	for _, op := range batch {
		if err := op.ctx.Err(); err != nil {
			op.n, op.err = 0, err // given up before it ran: never run
			continue
		}
		op.n, op.err = op.run(op.ctx, tx)
		if op.err != nil {
			ok = false
			if op.ctx.Err() == nil { // not its caller giving up meanwhile
				failed = op.err
			}
			break
		}
	}
	if ok {
		var err error
		if hook := commitHook.Load(); hook != nil {
			err = (*hook)()
		}
		if err == nil {
			if err = tx.Commit(); err == nil {
				return true, nil, false
			}
		} else {
			tx.Rollback() //nolint:errcheck // the hook's error is the one to report
		}
		for _, op := range batch {
			if op.err == nil {
				op.n, op.err = 0, err
			}
		}
		return false, err, false
	}
	tx.Rollback() //nolint:errcheck // the failed write's error is the one to report
	return false, failed, true
}

// allRaw reports whether every write of batch has a raw form or changes
// only memory.
func allRaw(batch []*write) bool {
	for _, op := range batch {
		if op.raw == nil && !op.inMemory {
			return false
		}
	}
	return true
}

// tryRaw is try on the raw connection (raw.go): the same transaction, with
// the same outcomes, in one Raw call. The statements run without the
// writes' contexts, as a write's context ending doesn't stop its commit
// anyway (each write checks its own context first, as in try).
func (w *writer) tryRaw(batch []*write) (bool, error, bool) {
	ok, stmt := true, false
	var failed error
	err := w.raw.with(context.Background(), func(c *rawConn) error {
		if _, err := c.exec(rawBegin); err != nil {
			return err
		}
		for _, op := range batch {
			if err := op.ctx.Err(); err != nil {
				op.n, op.err = 0, err // given up before it ran: never run
				continue
			}
			if op.raw != nil {
				op.n, op.err = op.raw.runRaw(c)
			} else {
				op.n, op.err = op.run(op.ctx, nil) // changes only memory
			}
			if op.err != nil {
				ok = false
				if op.ctx.Err() == nil { // not its caller giving up meanwhile
					failed = op.err
				}
				break
			}
		}
		if !ok {
			c.exec(rawRollback) //nolint:errcheck // the failed write's error is the one to report
			stmt = true
			return nil
		}
		var err error
		if hook := commitHook.Load(); hook != nil {
			err = (*hook)()
		}
		if err == nil {
			if _, err = c.exec(rawCommit); err == nil {
				return nil
			}
		}
		// A failed COMMIT may leave the transaction open (SQLITE_BUSY):
		// roll it back, as database/sql's Commit does. When the commit
		// ended it already, the ROLLBACK fails, harmlessly.
		c.exec(rawRollback) //nolint:errcheck // the commit's error is the one to report
		for _, op := range batch {
			if op.err == nil {
				op.n, op.err = 0, err
			}
		}
		ok, failed = false, err
		return nil
	})
	if err != nil { // no connection, or BEGIN failed: nothing ran
		for _, op := range batch {
			op.n, op.err = 0, err
		}
		return false, err, false
	}
	return ok, failed, stmt
}
