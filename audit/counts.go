package audit

import (
	"context"
	"fmt"
)

// Count is the number of entries of the trail with one source and one
// outcome.
type Count struct {
	Source  string
	Outcome string
	N       int64
}

// Counter counts entries of the trail; the SQL sinks are one. The gateway's
// GET /admin/stats (the console's per-source table) is built on it.
type Counter interface {
	// Counts returns the number of entries matching f per source and
	// outcome, ordered by source then outcome; pairs with no entry are
	// left out. f.Limit and f.Cursor are ignored.
	Counts(ctx context.Context, f Filter) ([]Count, error)
}

var (
	_ Counter = (*SQLite)(nil)
	_ Counter = (*Postgres)(nil)
)

// selectCounts returns the SELECT counting the entries of table matching f
// per source and outcome, and its arguments.
func (q query) selectCounts(table string, f Filter) (string, []any, error) {
	f.Cursor, f.Limit = "", 0
	where, args, err := q.where(f)
	if err != nil {
		return "", nil, err
	}
	return `SELECT source, outcome, count(*) FROM ` + table + where +
		` GROUP BY source, outcome ORDER BY source, outcome`, args, nil
}

// readCounts reads the rows of a statement made by selectCounts.
func readCounts(rs resultSet, scan func(*Count) error) ([]Count, error) {
	var out []Count
	for rs.Next() {
		var c Count
		if err := scan(&c); err != nil {
			return nil, fmt.Errorf("audit: counts: %w", err)
		}
		out = append(out, c)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("audit: counts: %w", err)
	}
	return out, nil
}

// Counts returns the number of entries matching f per source and outcome.
func (s *SQLite) Counts(ctx context.Context, f Filter) ([]Count, error) {
	stmt, args, err := s.q.selectCounts("audit_deliveries", f)
	if err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: counts: %w", err)
	}
	defer rows.Close()
	return readCounts(rows, func(c *Count) error { return rows.Scan(&c.Source, &c.Outcome, &c.N) })
}

// Counts returns the number of entries matching f per source and outcome.
func (p *Postgres) Counts(ctx context.Context, f Filter) ([]Count, error) {
	stmt, args, err := p.q.selectCounts(p.ident, f)
	if err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: counts: %w", err)
	}
	defer rows.Close()
	return readCounts(rows, func(c *Count) error { return rows.Scan(&c.Source, &c.Outcome, &c.N) })
}
