// Package sqlbatch deletes many rows of a SQLite table in bounded batches,
// so that a large clean-up (expired keys, old audit rows) never holds the
// database's single write lock for long.
package sqlbatch

import (
	"context"
	"database/sql"
)

// Delete runs del, a statement deleting at most limit rows, until a run
// deletes fewer than limit, and returns the total deleted. On an error it
// returns what was deleted before it: each batch commits on its own.
func Delete(ctx context.Context, limit int, del func(ctx context.Context, limit int) (sql.Result, error)) (int64, error) {
	var total int64
	for {
		res, err := del(ctx, limit)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(limit) {
			return total, nil
		}
	}
}
