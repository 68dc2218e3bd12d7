// Package sqliteaudit is the audit sink on SQLite. The trail is the table
// audit_deliveries of a SQLite database, typically the gateway's store file
// opened with sqlitestore.Open (the gateway's default). Entries older than
// the retention (7 days by default) are deleted in the background.
//
// The sink is an [audit.Sink], [audit.Querier] and [audit.Counter]. It is
// a package of its own so that package audit compiles no driver.
package sqliteaudit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/auditpage"
	"github.com/idemhook/idemhook/internal/auditsql"
	"github.com/idemhook/idemhook/internal/periodic"
	"github.com/idemhook/idemhook/internal/sqlbatch"
	"github.com/idemhook/idemhook/internal/sqlschema"
)

// SchemaVersion is the version of the audit_deliveries table, recorded in
// the table idemhook_schema (shared with package sqlitestore). Version 2
// added the columns reason and instance, version 3 the column scope. Older
// files are upgraded.
const SchemaVersion = 3

// Config configures a [Sink]. The zero value means the defaults.
type Config struct {
	// Retention is how long entries are kept. Older ones are deleted
	// every PruneInterval. Default: audit.DefaultRetention (7 days).
	Retention time.Duration

	// PruneInterval is how often old entries are deleted. A negative value
	// disables the background pruning ([Sink.Prune] still works).
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
	// (Counts over a day of deliveries) would hold it. In WAL mode a
	// reader on its own connection neither waits for the writer nor
	// blocks it. Default: the db given to New.
	ReadDB *sql.DB
}

// Sink is an [audit.Sink], [audit.Querier] and [audit.Counter] keeping the
// trail in the table audit_deliveries of a SQLite database, typically the
// gateway's store file (open it with sqlitestore.Open). Create it with
// [New].
type Sink struct {
	db        *sql.DB
	rdb       *sql.DB // Query and Counts
	retention time.Duration
	now       func() time.Time
	log       *slog.Logger
	q         auditsql.Query
	insert    *sql.Stmt
	pruning   *periodic.Task
	stopOnce  sync.Once
}

var (
	_ audit.Sink    = (*Sink)(nil)
	_ audit.Querier = (*Sink)(nil)
	_ audit.Counter = (*Sink)(nil)
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

// New returns a sink writing to db, creating the table
// audit_deliveries and its indexes if they are missing, and starts the
// pruning of entries older than cfg.Retention. The caller owns db (and
// cfg.ReadDB) and closes it after [Sink.Close].
func New(db *sql.DB, cfg Config) (*Sink, error) {
	if db == nil {
		return nil, errors.New("audit: sqliteaudit.New: nil *sql.DB")
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("audit: sqliteaudit.New: negative retention %v", cfg.Retention)
	}
	s := &Sink{
		db:        db,
		rdb:       cfg.ReadDB,
		retention: cfg.Retention,
		now:       cfg.Now,
		log:       cfg.Logger,
		q: auditsql.Query{
			TimeCol:     "time_us",
			Placeholder: func(int) string { return "?" },
			TimeArg:     func(us int64) any { return us },
		},
	}
	if s.retention == 0 {
		s.retention = audit.DefaultRetention
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rdb == nil {
		s.rdb = db
	}
	if err := sqlschema.Upgrade(context.Background(), db, "audit", SchemaVersion, sqliteSchema, upgradeSQLite); err != nil {
		return nil, err
	}
	insert, err := db.Prepare(`INSERT INTO audit_deliveries
		(time_us, route, source, key, outcome, status, duration_ns, request_bytes, response_bytes, reason, instance, scope)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return nil, fmt.Errorf("audit: prepare insert: %w", err)
	}
	s.insert = insert
	s.pruning = auditsql.StartPruning(cfg.PruneInterval, s.Prune, s.log)
	return s, nil
}

// Close stops the background pruning and releases the prepared statement.
// It does not close the *sql.DB. The sink must not be used after Close
// (close the Recorder writing to it first). It is safe to call more than
// once.
func (s *Sink) Close() error {
	s.stopOnce.Do(func() {
		s.pruning.Stop()
		s.insert.Close()
	})
	return nil
}

// sqliteTxRows is the most entries one transaction of Write inserts. The
// database has a single connection, shared with the store (see
// sqlitestore.Open), and a transaction holds it. Short transactions let the
// store's calls interleave with a large batch instead of waiting for all of
// it. A commit in WAL mode with synchronous=NORMAL doesn't fsync, so the
// extra commits cost little.
const sqliteTxRows = 32

// Write stores entries, in transactions of up to 32 entries. If one fails,
// the entries before it stay written, and the error is a
// *audit.PartialWriteError saying how many.
func (s *Sink) Write(ctx context.Context, entries []audit.Entry) error {
	written := 0
	for written < len(entries) {
		chunk := entries[written:min(len(entries), written+sqliteTxRows)]
		if err := s.writeTx(ctx, chunk); err != nil {
			err = fmt.Errorf("audit: write %d entries: %w", len(entries)-written, err)
			if written > 0 {
				return &audit.PartialWriteError{Written: written, Err: err}
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

func (s *Sink) writeTx(ctx context.Context, entries []audit.Entry) error {
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
func (s *Sink) Query(ctx context.Context, f audit.Filter) (audit.Page, error) {
	return s.q.Page(ctx, s.read, "audit_deliveries", f, func(rows auditsql.Rows, e *audit.Entry) error {
		var us, dur int64
		if err := rows.Scan(&e.ID, &us, &e.Route, &e.Source, &e.Key, &e.Outcome, &e.Status, &dur, &e.RequestBytes, &e.ResponseBytes, &e.Reason, &e.Instance, &e.Scope); err != nil {
			return err
		}
		e.Time = time.UnixMicro(us).UTC()
		e.Duration = time.Duration(dur)
		return nil
	})
}

// read runs a statement of Query or Counts on the read database.
func (s *Sink) read(ctx context.Context, stmt string, args []any) (auditsql.Rows, func(), error) {
	rows, err := s.rdb.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, nil, err
	}
	return rows, func() { rows.Close() }, nil
}

// Prune deletes the entries older than the retention and returns how many
// it deleted. It works in batches, releasing the write lock between them.
func (s *Sink) Prune(ctx context.Context) (int64, error) {
	cutoff := auditpage.CeilMicros(s.now().Add(-s.retention))
	n, err := sqlbatch.Delete(ctx, pruneBatch, func(ctx context.Context, limit int) (sql.Result, error) {
		return s.db.ExecContext(ctx, `DELETE FROM audit_deliveries WHERE id IN
			(SELECT id FROM audit_deliveries WHERE time_us < ? LIMIT ?)`, cutoff, limit)
	})
	if err != nil {
		return n, fmt.Errorf("audit: prune: %w", err)
	}
	return n, nil
}

// Counts returns the number of entries matching f per source and outcome.
func (s *Sink) Counts(ctx context.Context, f audit.Filter) ([]audit.Count, error) {
	return s.q.Counts(ctx, s.read, "audit_deliveries", f)
}
