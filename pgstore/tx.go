package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhook/idemhook"
)

// CompleteTx completes the delivery d inside the caller's transaction tx.
// It runs the same compare-and-set UPDATE as [Store.Complete], so that the
// record commits together with the handler's business writes, or not at
// all. status, header and body are the response. The record holds the
// route's replay headers (idemhook.RepresentationHeaders and
// Route.ReplayHeaders), each from header or else from what the handler has
// set on its ResponseWriter by then; a name in header that the route does
// not store is an error. Once the handler has returned and the commit is
// confirmed, the middleware sends that record, and replays it to every
// re-delivery: the first answer and the replays are the same, and a header
// the record lacks goes out on neither. See [idemhook.CompleteDelivery]
// and [idemhook.Delivery] for what happens on a rollback.
//
// Call it as the last statement before tx.Commit, because from then on the
// idempotency row is locked by tx until it ends. It returns an error
// wrapping [idemhook.ErrNotOwner] when the delivery no longer owns the claim
// (its lease lapsed and another delivery took the event over). Roll tx back
// then. tx must be on the database of the store's pool.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, d *idemhook.Delivery, status int, header http.Header, body []byte) error {
	if tx == nil {
		return errors.New("pgstore: CompleteTx: nil pgx.Tx")
	}
	return s.completeIn(ctx, pgxTx{tx}, "CompleteTx", d, status, header, body)
}

// CompleteSQLTx is [Store.CompleteTx] for a database/sql transaction, opened
// on a *sql.DB of pgx's stdlib driver (sql.Open("pgx", url), or
// stdlib.OpenDBFromPool on the store's own pool).
func (s *Store) CompleteSQLTx(ctx context.Context, tx *sql.Tx, d *idemhook.Delivery, status int, header http.Header, body []byte) error {
	if tx == nil {
		return errors.New("pgstore: CompleteSQLTx: nil *sql.Tx")
	}
	return s.completeIn(ctx, sqlTx{tx}, "CompleteSQLTx", d, status, header, body)
}

func (s *Store) completeIn(ctx context.Context, db execer, op string, d *idemhook.Delivery, status int, header http.Header, body []byte) error {
	if d == nil {
		return fmt.Errorf("pgstore: %s: nil *idemhook.Delivery (DeliveryFromContext reports false outside a claimed delivery)", op)
	}
	if st, ok := idemhook.DeliveryStore(d).(*Store); !ok || st.ident != s.ident {
		return fmt.Errorf("pgstore: %s: the delivery's claim is held by %T, not by this store's table %s", op, idemhook.DeliveryStore(d), s.table)
	}
	return idemhook.CompleteDelivery(d, status, header, body, func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
		err := s.complete(ctx, db, key, claim, done, ttl)
		if errors.Is(err, idemhook.ErrNotOwner) {
			return fmt.Errorf("pgstore: %s %q: %w", op, key, err)
		}
		return err
	})
}

type pgxTx struct{ tx pgx.Tx }

func (e pgxTx) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := e.tx.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

type sqlTx struct{ tx *sql.Tx }

func (e sqlTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := e.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
