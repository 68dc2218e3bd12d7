package sqlbatch_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook/internal/sqlbatch"
	"github.com/idemhook/idemhook/sqlitestore"
)

func TestDeleteInBatches(t *testing.T) {
	tests := []struct {
		name        string
		rows        int
		limit       int
		wantDeleted int64
		wantRuns    int
	}{
		{"none", 0, 10, 0, 1},
		{"fewer than a batch", 7, 10, 7, 1},
		{"exact multiple", 20, 10, 20, 3},
		{"several batches", 25, 10, 25, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "b.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, keep INTEGER)`); err != nil {
				t.Fatal(err)
			}
			for range tt.rows {
				db.Exec(`INSERT INTO t (keep) VALUES (0)`) //nolint:errcheck
			}
			db.Exec(`INSERT INTO t (keep) VALUES (1)`) //nolint:errcheck // must survive
			runs := 0
			n, err := sqlbatch.Delete(t.Context(), tt.limit, func(ctx context.Context, limit int) (sql.Result, error) {
				runs++
				return db.ExecContext(ctx, `DELETE FROM t WHERE id IN (SELECT id FROM t WHERE keep = 0 LIMIT ?)`, limit)
			})
			if err != nil || n != tt.wantDeleted || runs != tt.wantRuns {
				t.Fatalf("deleted %d in %d runs (err %v), want %d in %d", n, runs, err, tt.wantDeleted, tt.wantRuns)
			}
			var left int
			db.QueryRow(`SELECT count(*) FROM t`).Scan(&left) //nolint:errcheck
			if left != 1 {
				t.Fatalf("%d rows left, want the 1 kept", left)
			}
		})
	}
}

func TestDeleteStopsAtAnErrorWithWhatItDeleted(t *testing.T) {
	boom := errors.New("disk I/O error")
	runs := 0
	n, err := sqlbatch.Delete(t.Context(), 2, func(context.Context, int) (sql.Result, error) {
		runs++
		if runs == 3 {
			return nil, boom
		}
		return driverResult(2), nil
	})
	if !errors.Is(err, boom) || n != 4 {
		t.Fatalf("Delete = %d, %v; want 4 and the error", n, err)
	}
}

type driverResult int64

func (r driverResult) LastInsertId() (int64, error) { return 0, nil }
func (r driverResult) RowsAffected() (int64, error) { return int64(r), nil }
