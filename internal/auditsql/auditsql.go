// Package auditsql builds and reads the queries that the SQL audit sinks
// (audit/sqliteaudit and audit/pgaudit) share: the filtered, newest-first
// page and the counts per source and outcome. It also runs their
// background pruning. It imports no driver. Each sink passes what differs
// (the time column, the placeholders, how a time is bound, how a statement
// runs).
package auditsql

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/auditpage"
	"github.com/idemhook/idemhook/internal/periodic"
)

// Query is the SQL of a filtered page, shared by the SQL sinks. Its fields
// hold what differs between them: the column of the time, how a placeholder
// is written and how a time is passed.
type Query struct {
	TimeCol     string                 // the column holding the time
	Placeholder func(n int) string     // the nth argument's placeholder, from 1
	TimeArg     func(micros int64) any // a time in Unix microseconds as an argument
}

// where returns the WHERE clause (with a leading " WHERE", or "") and its
// arguments for f.
func (q Query) where(f audit.Filter) (string, []any, error) {
	var conds []string
	var args []any
	add := func(cond string, vals ...any) {
		for _, v := range vals {
			args = append(args, v)
			cond = strings.Replace(cond, "?", q.Placeholder(len(args)), 1)
		}
		conds = append(conds, cond)
	}
	if f.Source != "" {
		add("source = ?", f.Source)
	}
	if f.Outcome != "" {
		add("outcome = ?", f.Outcome)
	}
	if f.Route != "" {
		add("route = ?", f.Route)
	}
	if !f.Since.IsZero() {
		add(q.TimeCol+" >= ?", q.TimeArg(auditpage.CeilMicros(f.Since)))
	}
	if !f.Until.IsZero() {
		add(q.TimeCol+" < ?", q.TimeArg(auditpage.CeilMicros(f.Until)))
	}
	if f.Cursor != "" {
		p, err := auditpage.Decode(f.Cursor)
		if err != nil {
			return "", nil, err
		}
		add("("+q.TimeCol+" < ? OR ("+q.TimeCol+" = ? AND id < ?))", q.TimeArg(p.Micros), q.TimeArg(p.Micros), p.ID)
	}
	if len(conds) == 0 {
		return "", nil, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// SelectPage returns the SELECT of a page of the entries of table matching
// f, newest first, its arguments, and the page size. The statement fetches
// up to limit+1 rows, the extra one telling whether there is a next page
// (see [Query.Page]).
func (q Query) SelectPage(table string, f audit.Filter) (stmt string, args []any, limit int, err error) {
	where, args, err := q.where(f)
	if err != nil {
		return "", nil, 0, err
	}
	limit = f.PageSize()
	stmt = `SELECT id, ` + q.TimeCol + `, route, source, key, outcome, status, duration_ns, request_bytes, response_bytes, reason, instance, scope
		FROM ` + table + where + ` ORDER BY ` + q.TimeCol + ` DESC, id DESC LIMIT ` + fmt.Sprint(limit+1)
	return stmt, args, limit, nil
}

// SelectCounts returns the SELECT counting the entries of table matching f
// per source and outcome, and its arguments.
func (q Query) SelectCounts(table string, f audit.Filter) (string, []any, error) {
	f.Cursor, f.Limit = "", 0
	where, args, err := q.where(f)
	if err != nil {
		return "", nil, err
	}
	return `SELECT source, outcome, count(*) FROM ` + table + where +
		` GROUP BY source, outcome ORDER BY source, outcome`, args, nil
}

// Rows is what the helpers read of a query's rows. *sql.Rows and pgx.Rows
// both have it.
type Rows interface {
	Next() bool
	Err() error
	Scan(dest ...any) error
}

// Run runs a statement of the sink's database and returns its rows and the
// function that closes them.
type Run func(ctx context.Context, stmt string, args []any) (rows Rows, close func(), err error)

// Page returns a page of the entries of table matching f, newest first.
// run runs the statement of SelectPage, and scan reads one of its rows into
// an Entry.
func (q Query) Page(ctx context.Context, run Run, table string, f audit.Filter, scan func(Rows, *audit.Entry) error) (audit.Page, error) {
	stmt, args, limit, err := q.SelectPage(table, f)
	if err != nil {
		return audit.Page{}, err
	}
	rows, closeRows, err := run(ctx, stmt, args)
	if err != nil {
		return audit.Page{}, fmt.Errorf("audit: query: %w", err)
	}
	defer closeRows()
	out := make([]audit.Entry, 0, min(limit+1, 64))
	for rows.Next() {
		var e audit.Entry
		if err := scan(rows, &e); err != nil {
			return audit.Page{}, fmt.Errorf("audit: query: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return audit.Page{}, fmt.Errorf("audit: query: %w", err)
	}
	out, next := auditpage.Cut(out, limit, func(e *audit.Entry) auditpage.Position {
		return auditpage.Position{Micros: e.Time.UnixMicro(), ID: e.ID}
	})
	return audit.Page{Entries: out, Next: next}, nil
}

// Counts returns the number of entries of table matching f per source and
// outcome, ordered by source then outcome. run runs the statement of
// SelectCounts.
func (q Query) Counts(ctx context.Context, run Run, table string, f audit.Filter) ([]audit.Count, error) {
	stmt, args, err := q.SelectCounts(table, f)
	if err != nil {
		return nil, err
	}
	rows, closeRows, err := run(ctx, stmt, args)
	if err != nil {
		return nil, fmt.Errorf("audit: counts: %w", err)
	}
	defer closeRows()
	var out []audit.Count
	for rows.Next() {
		var c audit.Count
		if err := rows.Scan(&c.Source, &c.Outcome, &c.N); err != nil {
			return nil, fmt.Errorf("audit: counts: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: counts: %w", err)
	}
	return out, nil
}

// DefaultPruneInterval is the PruneInterval of the SQL sinks by default.
const DefaultPruneInterval = 10 * time.Minute

// StartPruning calls prune every interval (DefaultPruneInterval when it is
// 0, never when it is negative) until the task is stopped, logging failures
// to log.
func StartPruning(interval time.Duration, prune func(context.Context) (int64, error), log *slog.Logger) *periodic.Task {
	if interval == 0 {
		interval = DefaultPruneInterval
	}
	return periodic.Start(interval, func(ctx context.Context) error {
		_, err := prune(ctx)
		return err
	}, log, "audit: deleting old entries failed")
}
