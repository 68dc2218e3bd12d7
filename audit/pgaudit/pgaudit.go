// Package pgaudit is the audit sink on PostgreSQL (through pgx): the trail
// is a table, idemhook_audit_deliveries by default, that several gateways
// share. Entries older than the retention (7 days by default) are deleted
// in the background.
//
// The sink is an [audit.Sink], [audit.Querier] and [audit.Counter]. It is
// a package of its own so that package audit compiles no driver.
package pgaudit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/auditpage"
	"github.com/idemhook/idemhook/internal/auditsql"
	"github.com/idemhook/idemhook/internal/periodic"
	"github.com/idemhook/idemhook/internal/pgschema"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultTable is the table a [Sink] writes by default.
const DefaultTable = "idemhook_audit_deliveries"

// Config configures a [Sink]. The zero value means the defaults.
type Config struct {
	// Table is the table name, optionally schema-qualified
	// ("audit.deliveries"). It holds letters, digits and underscores,
	// starting with a letter or underscore. Default: DefaultTable.
	Table string

	// Retention is how long entries are kept. Older ones are deleted every
	// PruneInterval. Default: audit.DefaultRetention (7 days).
	Retention time.Duration

	// PruneInterval is how often old entries are deleted. A negative value
	// disables the background pruning ([Sink.Prune] still works).
	// Default: 10 minutes. Several gateways sharing the table may all
	// prune, because the deletes are idempotent.
	PruneInterval time.Duration

	// Now is the clock deciding what is older than Retention. Default:
	// time.Now.
	Now func() time.Time

	// Logger receives a WARN when a background prune fails. Default: none.
	Logger *slog.Logger
}

// Sink is an [audit.Sink], [audit.Querier] and [audit.Counter] keeping the
// trail in a PostgreSQL table, so that several gateways share one trail.
// Create it with [New].
type Sink struct {
	pool      *pgxpool.Pool
	table     pgx.Identifier
	ident     string // table, quoted for SQL
	retention time.Duration
	now       func() time.Time
	log       *slog.Logger
	q         auditsql.Query
	pruning   *periodic.Task
}

var (
	_ audit.Sink    = (*Sink)(nil)
	_ audit.Querier = (*Sink)(nil)
	_ audit.Counter = (*Sink)(nil)
)

var columns = []string{"time", "route", "source", "key", "outcome", "status", "duration_ns", "request_bytes", "response_bytes", "reason", "instance", "scope"}

// New returns a sink writing to the table cfg.Table through pool,
// creating the table and its indexes if they are missing, and starts the
// pruning of entries older than cfg.Retention. The caller owns pool and
// closes it after [Sink.Close].
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Sink, error) {
	if pool == nil {
		return nil, errors.New("audit: pgaudit.New: nil *pgxpool.Pool")
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	table, err := pgschema.Table(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("audit: pgaudit.New: %w", err)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("audit: pgaudit.New: negative retention %v", cfg.Retention)
	}
	p := &Sink{
		pool:      pool,
		table:     table,
		retention: cfg.Retention,
		now:       cfg.Now,
		log:       cfg.Logger,
		q: auditsql.Query{
			TimeCol:     "time",
			Placeholder: func(n int) string { return fmt.Sprintf("$%d", n) },
			TimeArg:     func(us int64) any { return time.UnixMicro(us).UTC() },
		},
	}
	p.ident = p.table.Sanitize()
	if p.retention == 0 {
		p.retention = audit.DefaultRetention
	}
	if p.now == nil {
		p.now = time.Now
	}
	if err := p.createTable(ctx); err != nil {
		return nil, err
	}
	p.pruning = auditsql.StartPruning(cfg.PruneInterval, p.Prune, p.log)
	return p, nil
}

// createTable creates the table and indexes if missing (see pgschema.Create
// for why several gateways starting together don't race).
func (p *Sink) createTable(ctx context.Context) error {
	base := p.table[len(p.table)-1]
	ddl := []string{
		`CREATE TABLE IF NOT EXISTS ` + p.ident + ` (
			id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			time           timestamptz NOT NULL,
			route          text NOT NULL,
			source         text NOT NULL,
			key            text NOT NULL,
			outcome        text NOT NULL,
			status         integer NOT NULL,
			duration_ns    bigint NOT NULL,
			request_bytes  bigint NOT NULL,
			response_bytes bigint NOT NULL,
			reason         text NOT NULL DEFAULT '',
			instance       text NOT NULL DEFAULT '',
			scope          text NOT NULL DEFAULT ''
		)`,
		// Tables made before reason, instance and scope existed.
		`ALTER TABLE ` + p.ident + ` ADD COLUMN IF NOT EXISTS reason text NOT NULL DEFAULT ''`,
		`ALTER TABLE ` + p.ident + ` ADD COLUMN IF NOT EXISTS instance text NOT NULL DEFAULT ''`,
		`ALTER TABLE ` + p.ident + ` ADD COLUMN IF NOT EXISTS scope text NOT NULL DEFAULT ''`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{pgschema.IndexName(base, "time")}.Sanitize() + ` ON ` + p.ident + ` (time, id)`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{pgschema.IndexName(base, "source")}.Sanitize() + ` ON ` + p.ident + ` (source, time, id)`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{pgschema.IndexName(base, "outcome")}.Sanitize() + ` ON ` + p.ident + ` (outcome, time, id)`,
	}
	return pgschema.Create(ctx, p.pool, "audit", p.table, ddl)
}

// Close stops the background pruning. It does not close the pool. It is
// safe to call more than once.
func (p *Sink) Close() error {
	p.pruning.Stop()
	return nil
}

// Write stores entries with one COPY.
func (p *Sink) Write(ctx context.Context, entries []audit.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	_, err := p.pool.CopyFrom(ctx, p.table, columns, pgx.CopyFromSlice(len(entries), func(i int) ([]any, error) {
		e := &entries[i]
		return []any{time.UnixMicro(e.Time.UnixMicro()).UTC(), e.Route, e.Source, e.Key, e.Outcome, int32(e.Status),
			int64(e.Duration), e.RequestBytes, e.ResponseBytes, e.Reason, e.Instance, e.Scope}, nil
	}))
	if err != nil {
		return fmt.Errorf("audit: write %d entries: %w", len(entries), err)
	}
	return nil
}

// Query returns a page of the entries matching f, newest first.
func (p *Sink) Query(ctx context.Context, f audit.Filter) (audit.Page, error) {
	return p.q.Page(ctx, p.read, p.ident, f, func(rows auditsql.Rows, e *audit.Entry) error {
		var status int32
		var dur int64
		if err := rows.Scan(&e.ID, &e.Time, &e.Route, &e.Source, &e.Key, &e.Outcome, &status, &dur, &e.RequestBytes, &e.ResponseBytes, &e.Reason, &e.Instance, &e.Scope); err != nil {
			return err
		}
		e.Time = e.Time.UTC()
		e.Status = int(status)
		e.Duration = time.Duration(dur)
		return nil
	})
}

// read runs a statement of Query or Counts.
func (p *Sink) read(ctx context.Context, stmt string, args []any) (auditsql.Rows, func(), error) {
	rows, err := p.pool.Query(ctx, stmt, args...)
	if err != nil {
		return nil, nil, err
	}
	return rows, rows.Close, nil
}

// Prune deletes the entries older than the retention and returns how many
// it deleted.
func (p *Sink) Prune(ctx context.Context) (int64, error) {
	cutoff := time.UnixMicro(auditpage.CeilMicros(p.now().Add(-p.retention))).UTC()
	tag, err := p.pool.Exec(ctx, `DELETE FROM `+p.ident+` WHERE time < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("audit: prune: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Counts returns the number of entries matching f per source and outcome.
func (p *Sink) Counts(ctx context.Context, f audit.Filter) ([]audit.Count, error) {
	return p.q.Counts(ctx, p.read, p.ident, f)
}
