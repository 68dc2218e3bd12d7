package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"weak"
)

// Raw statements. A first delivery's write and a replay's read are one
// short statement each, and database/sql's path around them cost as much
// CPU as SQLite's work: per call it looks up the statement of the
// connection, converts the arguments (and copies a read's value), and, for
// a context that can end, the driver starts a goroutine to interrupt the
// statement and database/sql another to close its rows. So the hot
// statements run on the driver's connection itself ((*sql.Conn).Raw),
// prepared once per connection, with arguments passed as they are:
//
//   - The writer runs a batch whose writes all have a raw form (a Complete,
//     a Claim in the file, a CompleteBatch) in one Raw call: BEGIN IMMEDIATE, the writes and
//     COMMIT, the three prepared too. Other batches take database/sql's
//     transaction as before. Either way a batch is one transaction and one
//     commit, with the same failure handling (writer.go).
//   - A Claim's read and Get read the live record through a Raw call on the
//     read pool.
//
// A Raw call holds its connection only while it runs, as a database/sql
// statement does, so the audit trail and the queue sharing the connection
// wait for it the same way. The context of the call bounds the wait for a
// connection (db.Conn); the statement itself runs without one: every raw
// statement is a lookup or a write of one key, done in microseconds, and
// never waits for a lock (a writer's statement runs inside its BEGIN
// IMMEDIATE, which took the write lock; a read in WAL mode takes none a
// writer holds). That is what a context could have interrupted.
//
// Only pools opened by Open and OpenReader take this path: their
// connections never expire, and Open's begin IMMEDIATE, which the raw BEGIN
// repeats. A statement prepared on a connection belongs to it; Store.Close
// finalizes them (rawPool.close).

// rawID names a raw statement.
type rawID int

const (
	rawBegin rawID = iota
	rawCommit
	rawRollback
	rawPut      // held Complete: heldStore's putStmt
	rawClaim    // Claim in the file: claimStmt, by its rows changed
	rawGet      // the read in a write: getStmt
	rawComplete // Complete in the file: completeStmt
	rawRead     // a read on the read pool: read
	rawCount
)

// rawSQL is the text of each raw statement. The writes and reads are those
// of fileStore's prepared statements (sqlitestore.go).
var rawSQL = [rawCount]string{
	rawBegin:    `BEGIN IMMEDIATE`,
	rawCommit:   `COMMIT`,
	rawRollback: `ROLLBACK`,
	rawPut:      putSQL,
	rawClaim:    claimSQL,
	rawGet:      getSQL,
	rawComplete: completeSQL,
	rawRead:     getSQL,
}

// ownPools are the pools opened by openPool, which may take the raw path.
// The keys are weak, and a pool's entry goes when it is collected.
var ownPools sync.Map // weak.Pointer[sql.DB] → struct{}

func registerPool(db *sql.DB) {
	k := weak.Make(db)
	ownPools.Store(k, struct{}{})
	runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) { ownPools.Delete(k) }, k)
}

// newRawPool returns the raw statements of db, or nil when db was not
// opened by Open or OpenReader.
func newRawPool(db *sql.DB) *rawPool {
	if _, ok := ownPools.Load(weak.Make(db)); !ok {
		return nil
	}
	return &rawPool{db: db}
}

// rawPool keeps the raw statements of each connection of a pool.
type rawPool struct {
	db     *sql.DB
	mu     sync.Mutex
	conns  []*rawConn // one per driver connection used
	closed bool
}

// errRawClosed is what a raw call returns once the store closed its pool's
// statements.
var errRawClosed = errors.New("sqlitestore: the store is closed")

// with runs f on one connection of the pool, waiting for one under ctx.
func (p *rawPool) with(ctx context.Context, f func(c *rawConn) error) error {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	err = conn.Raw(func(dc any) error {
		c, err := p.conn(dc)
		if err != nil {
			return err
		}
		return f(c)
	})
	conn.Close() //nolint:errcheck // only returns the connection to the pool
	return err
}

// conn returns the statements of the driver connection dc.
func (p *rawPool) conn(dc any) (*rawConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errRawClosed
	}
	for _, c := range p.conns {
		if c.dc == dc {
			return c, nil
		}
	}
	prep, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("sqlitestore: the driver's connection can't prepare statements")
	}
	c := &rawConn{dc: dc, prep: prep}
	p.conns = append(p.conns, c)
	return c, nil
}

// close finalizes the statements of every connection. It takes each of the
// pool's connections in turn (holding those it has), so it must run when
// the store no longer uses the pool.
func (p *rawPool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	left := len(p.conns)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), BusyTimeout)
	defer cancel()
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for tries := p.db.Stats().OpenConnections; left > 0 && tries > 0; tries-- {
		conn, err := p.db.Conn(ctx)
		if err != nil {
			return // the pool is closed (its connections with it) or busy
		}
		held = append(held, conn)
		conn.Raw(func(dc any) error { //nolint:errcheck // nothing fails
			p.mu.Lock()
			defer p.mu.Unlock()
			for i, c := range p.conns {
				if c.dc == dc {
					c.close()
					p.conns = append(p.conns[:i], p.conns[i+1:]...)
					left--
					break
				}
			}
			return nil
		})
	}
}

// rawConn is the raw statements of one driver connection. It is used only
// while that connection is held, so by one goroutine at a time.
type rawConn struct {
	dc    any
	prep  driver.ConnPrepareContext
	stmts [rawCount]driver.Stmt
	args  [5]driver.NamedValue
	dest  [1]driver.Value
}

func (c *rawConn) stmt(id rawID) (driver.Stmt, error) {
	if st := c.stmts[id]; st != nil {
		return st, nil
	}
	st, err := c.prep.PrepareContext(context.Background(), rawSQL[id])
	if err != nil {
		return nil, err
	}
	c.stmts[id] = st
	return st, nil
}

// bind sets the statement's arguments, numbered from 1.
func (c *rawConn) bind(args []any) []driver.NamedValue {
	a := c.args[:len(args)]
	for i, v := range args {
		a[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return a
}

// exec runs statement id with args and returns the rows it changed.
func (c *rawConn) exec(id rawID, args ...any) (int64, error) {
	st, err := c.stmt(id)
	if err != nil {
		return 0, err
	}
	res, err := st.(driver.StmtExecContext).ExecContext(context.Background(), c.bind(args))
	clear(c.args[:])
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// blob runs statement id, a query of one BLOB column, with args, and
// returns the column of its first row; found is false when it has none.
func (c *rawConn) blob(id rawID, args ...any) (value []byte, found bool, err error) {
	st, err := c.stmt(id)
	if err != nil {
		return nil, false, err
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(context.Background(), c.bind(args))
	clear(c.args[:])
	if err != nil {
		return nil, false, err
	}
	nerr := rows.Next(c.dest[:])
	v := c.dest[0]
	c.dest[0] = nil
	cerr := rows.Close()
	switch {
	case errors.Is(nerr, io.EOF):
		return nil, false, cerr
	case nerr != nil:
		return nil, false, nerr
	case cerr != nil:
		return nil, false, cerr
	}
	// As database/sql's Scan into a *[]byte: the driver's bytes (a copy of
	// SQLite's, made by the driver: no second one is needed), nil for NULL.
	switch v := v.(type) {
	case []byte:
		return v, true, nil
	case nil:
		return nil, true, nil
	case string:
		return []byte(v), true, nil
	}
	return nil, false, fmt.Errorf("sqlitestore: the value column holds a %T, not a BLOB", v)
}

// close finalizes the statements.
func (c *rawConn) close() {
	for i, st := range c.stmts {
		if st != nil {
			st.Close()
			c.stmts[i] = nil
		}
	}
}
