// Package sqlbatch deletes many rows of a table in bounded batches, so that a
// large clean-up (expired keys, old audit rows) never holds SQLite's single
// write lock, or many PostgreSQL row locks, for long.
package sqlbatch

import (
	"context"
	"database/sql"
)

// Delete runs del, a statement deleting at most limit rows, until a run
// deletes fewer than limit, and returns the total deleted. On an error it
// returns what was deleted before it: each batch commits on its own.
func Delete(ctx context.Context, limit int, del func(ctx context.Context, limit int) (sql.Result, error)) (int64, error) {
	return DeleteCount(ctx, limit, func(ctx context.Context, limit int) (int64, error) {
		res, err := del(ctx, limit)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// DeleteCount is Delete for a driver that reports the rows a statement
// deleted directly (pgx's command tag) rather than as a sql.Result.
func DeleteCount(ctx context.Context, limit int, del func(ctx context.Context, limit int) (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := del(ctx, limit)
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(limit) {
			return total, nil
		}
	}
}
