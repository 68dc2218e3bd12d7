package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemhook/idemhook/internal/periodic"
	"github.com/idemhook/idemhook/internal/sqlbatch"
	"github.com/idemhook/idemhook/internal/sqlschema"
)

// SQLiteSchemaVersion is the version of the audit_deliveries table, recorded
// in the table idemhook_schema (shared with package sqlitestore). Version 2
// added the columns reason and instance, version 3 the column scope; older
// files are upgraded.
const SQLiteSchemaVersion = 3

// SQLiteConfig configures a [SQLite] sink. The zero value means the
// defaults.
type SQLiteConfig struct {
	// Retention is how long entries are kept; older ones are deleted
	// every PruneInterval. Default: DefaultRetention (7 days).
	Retention time.Duration

	// PruneInterval is how often old entries are deleted. A negative value
	// disables the background pruning ([SQLite.Prune] still works).
	// Default: 10 minutes.
	PruneInterval time.Duration

	// Now is the clock deciding what is older than Retention. Default:
	// time.Now.
	Now func() time.Time

	// Logger receives a WARN when a background prune fails. Default: none.
	Logger *slog.Logger

	// ReadDB, when set, is the database Query and Counts read from: a
	// second sqlitestore.Open of the same file. The file's main *sql.DB
	// has a single connection, shared with the store, and a long read
	// (Counts over a day of deliveries) would hold it; in WAL mode a
	// reader on its own connection neither waits for the writer nor
	// blocks it. Default: the db given to NewSQLite.
	ReadDB *sql.DB
}

// SQLite is a [Sink] and [Querier] keeping the trail in the table
// audit_deliveries of a SQLite database, typically the gateway's store file
// (open it with sqlitestore.Open). Create it with [NewSQLite].
type SQLite struct {
	db        *sql.DB
	rdb       *sql.DB // Query and Counts
	retention time.Duration
	now       func() time.Time
	log       *slog.Logger
	q         query
	insert    *sql.Stmt
	pruning   *periodic.Task
	stopOnce  sync.Once
}

var (
	_ Sink    = (*SQLite)(nil)
	_ Querier = (*SQLite)(nil)
)

var sqliteSchema = []string{
	`CREATE TABLE IF NOT EXISTS audit_deliveries (
		id             INTEGER PRIMARY KEY,
		time_us        INTEGER NOT NULL, -- Unix microseconds
		route          TEXT NOT NULL,
		source         TEXT NOT NULL,
		key            TEXT NOT NULL,
		outcome        TEXT NOT NULL,
		status         INTEGER NOT NULL,
		duration_ns    INTEGER NOT NULL,
		request_bytes  INTEGER NOT NULL,
		response_bytes INTEGER NOT NULL,
		reason         TEXT NOT NULL DEFAULT '',
		instance       TEXT NOT NULL DEFAULT '',
		scope          TEXT NOT NULL DEFAULT ''
	)`,
	// An index on time_us holds the rowid (id) too, so it serves the
	// newest-first order (time_us DESC, id DESC) and the cursor.
	`CREATE INDEX IF NOT EXISTS audit_deliveries_time ON audit_deliveries (time_us)`,
	`CREATE INDEX IF NOT EXISTS audit_deliveries_source_time ON audit_deliveries (source, time_us)`,
	`CREATE INDEX IF NOT EXISTS audit_deliveries_outcome_time ON audit_deliveries (outcome, time_us)`,
}

// pruneBatch bounds the rows one prune statement deletes, so that a large
// backlog doesn't hold SQLite's write lock for long.
const pruneBatch = 5000

// NewSQLite returns a sink writing to db, creating the table
// audit_deliveries and its indexes if they are missing, and starts the
// pruning of entries older than cfg.Retention. The caller owns db (and
// cfg.ReadDB) and closes it after [SQLite.Close].
func NewSQLite(db *sql.DB, cfg SQLiteConfig) (*SQLite, error) {
	if db == nil {
		return nil, errors.New("audit: NewSQLite: nil *sql.DB")
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("audit: NewSQLite: negative retention %v", cfg.Retention)
	}
	s := &SQLite{
		db:        db,
		rdb:       cfg.ReadDB,
		retention: cfg.Retention,
		now:       cfg.Now,
		log:       cfg.Logger,
		q: query{
			timeCol:     "time_us",
			placeholder: func(int) string { return "?" },
			timeArg:     func(us int64) any { return us },
		},
	}
	if s.retention == 0 {
		s.retention = DefaultRetention
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rdb == nil {
		s.rdb = db
	}
	if err := sqlschema.Upgrade(context.Background(), db, "audit", SQLiteSchemaVersion, sqliteSchema, upgradeSQLite); err != nil {
		return nil, err
	}
	insert, err := db.Prepare(`INSERT INTO audit_deliveries
		(time_us, route, source, key, outcome, status, duration_ns, request_bytes, response_bytes, reason, instance, scope)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return nil, fmt.Errorf("audit: prepare insert: %w", err)
	}
	s.insert = insert
	s.pruning = startPruning(cfg.PruneInterval, s.Prune, s.log)
	return s, nil
}

// defaultPruneInterval is the PruneInterval of the SQL sinks by default.
const defaultPruneInterval = 10 * time.Minute

// startPruning calls prune every interval (defaultPruneInterval when it is
// 0, never when it is negative) until the task is stopped, logging failures
// to log.
func startPruning(interval time.Duration, prune func(context.Context) (int64, error), log *slog.Logger) *periodic.Task {
	if interval == 0 {
		interval = defaultPruneInterval
	}
	return periodic.Start(interval, func(ctx context.Context) error {
		_, err := prune(ctx)
		return err
	}, log, "audit: deleting old entries failed")
}

// Close stops the background pruning and releases the prepared statement.
// It does not close the *sql.DB. The sink must not be used after Close
// (close the Recorder writing to it first). It is safe to call more than
// once.
func (s *SQLite) Close() error {
	s.stopOnce.Do(func() {
		s.pruning.Stop()
		s.insert.Close()
	})
	return nil
}

// sqliteTxRows is the most entries one transaction of Write inserts. The
// database has a single connection, shared with the store (see
// sqlitestore.Open), and a transaction holds it: short transactions let the
// store's calls interleave with a large batch instead of waiting for all of
// it. A commit in WAL mode with synchronous=NORMAL doesn't fsync, so the
// extra commits cost little.
const sqliteTxRows = 32

// Write stores entries, in transactions of up to 32 entries: if one fails,
// the entries before it stay written, and the error is a
// *PartialWriteError saying how many.
func (s *SQLite) Write(ctx context.Context, entries []Entry) error {
	written := 0
	for written < len(entries) {
		chunk := entries[written:min(len(entries), written+sqliteTxRows)]
		if err := s.writeTx(ctx, chunk); err != nil {
			err = fmt.Errorf("audit: write %d entries: %w", len(entries)-written, err)
			if written > 0 {
				return &PartialWriteError{Written: written, Err: err}
			}
			return err
		}
		written += len(chunk)
	}
	return nil
}

// upgradeSQLite adds the columns of the later versions to an older table.
func upgradeSQLite(ctx context.Context, tx *sql.Tx, from int) error {
	var qs []string
	switch from {
	case 0:
		return nil // new: the CREATE TABLE has them
	case 1:
		qs = append(qs,
			`ALTER TABLE audit_deliveries ADD COLUMN reason TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE audit_deliveries ADD COLUMN instance TEXT NOT NULL DEFAULT ''`)
		fallthrough
	case 2:
		qs = append(qs, `ALTER TABLE audit_deliveries ADD COLUMN scope TEXT NOT NULL DEFAULT ''`)
	}
	for _, q := range qs {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (s *SQLite) writeTx(ctx context.Context, entries []Entry) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt := tx.StmtContext(ctx, s.insert)
	defer stmt.Close()
	for _, e := range entries {
		if _, err := stmt.ExecContext(ctx, e.Time.UnixMicro(), e.Route, e.Source, e.Key, e.Outcome,
			e.Status, int64(e.Duration), e.RequestBytes, e.ResponseBytes, e.Reason, e.Instance, e.Scope); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Query returns a page of the entries matching f, newest first.
func (s *SQLite) Query(ctx context.Context, f Filter) (Page, error) {
	stmt, args, limit, err := s.q.selectPage("audit_deliveries", f)
	if err != nil {
		return Page{}, err
	}
	rows, err := s.rdb.QueryContext(ctx, stmt, args...)
	if err != nil {
		return Page{}, fmt.Errorf("audit: query: %w", err)
	}
	defer rows.Close()
	return readPage(rows, limit, func(e *Entry) error {
		var us, dur int64
		if err := rows.Scan(&e.ID, &us, &e.Route, &e.Source, &e.Key, &e.Outcome, &e.Status, &dur, &e.RequestBytes, &e.ResponseBytes, &e.Reason, &e.Instance, &e.Scope); err != nil {
			return err
		}
		e.Time = time.UnixMicro(us).UTC()
		e.Duration = time.Duration(dur)
		return nil
	})
}

// Prune deletes the entries older than the retention and returns how many
// it deleted. It works in batches, releasing the write lock between them.
func (s *SQLite) Prune(ctx context.Context) (int64, error) {
	cutoff := ceilMicros(s.now().Add(-s.retention))
	n, err := sqlbatch.Delete(ctx, pruneBatch, func(ctx context.Context, limit int) (sql.Result, error) {
		return s.db.ExecContext(ctx, `DELETE FROM audit_deliveries WHERE id IN
			(SELECT id FROM audit_deliveries WHERE time_us < ? LIMIT ?)`, cutoff, limit)
	})
	if err != nil {
		return n, fmt.Errorf("audit: prune: %w", err)
	}
	return n, nil
}
