package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/pgstore"
)

// New takes a pool the caller owns and checks its configuration before it
// uses the database (the pool connects lazily, so these two need no server).
// With a server, it creates the table if missing and starts the sweeper.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	_, err = pgstore.New(ctx, pool, pgstore.Config{Table: "keys; DROP TABLE orders"})
	fmt.Println(err)
	_, err = pgstore.New(ctx, nil, pgstore.Config{})
	fmt.Println(err)
	// Output:
	// pgstore: New: table "keys; DROP TABLE orders": want letters, digits and underscores, starting with a letter or an underscore, optionally schema.table, each part at most 63 characters
	// pgstore: New: nil *pgxpool.Pool: pass one from pgxpool.New(ctx, "postgres://...")
}

// The SQL New runs for a table, for a team that manages migrations itself
// (it then sets Config.SkipCreate).
func ExampleSchema() {
	ddl, err := pgstore.Schema("webhooks.idemhook_keys")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(ddl)
	// Output:
	// CREATE TABLE IF NOT EXISTS "webhooks"."idemhook_keys" (
	// 	key        bytea       PRIMARY KEY,
	// 	value      bytea       NOT NULL,
	// 	expires_at timestamptz NOT NULL
	// );
	// CREATE INDEX IF NOT EXISTS "idemhook_keys_expires_at_idx" ON "webhooks"."idemhook_keys" (expires_at);
}

// A handler that records an order exactly once. The order row and the
// idempotency record commit in one transaction. If the process dies before
// the commit, neither exists and the provider's retry runs afresh. If it
// dies after, the retry is answered from the committed record.
//
// (No output: it needs a PostgreSQL server. The tests run the same flow
// against the one in IDEMHOOK_POSTGRES_URL.)
func ExampleStore_CompleteTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		log.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "shop", Header: "Idempotency-Key"})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /webhooks/orders", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		d, claimed := idemhook.DeliveryFromContext(ctx)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO orders (event_id) VALUES ($1) RETURNING id`,
				r.Header.Get("Idempotency-Key")).Scan(&id)
			if err != nil {
				return err
			}
			if !claimed { // the store failed and the route fails open: no record to commit
				return nil
			}
			body := fmt.Appendf(nil, `{"order":%d}`, id)
			return store.CompleteTx(ctx, tx, d, http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, body)
		})
		if err != nil {
			// Rolled back, the claim lost (ErrNotOwner) included. A 500
			// makes the provider retry, and the middleware releases the
			// claim so that the retry runs afresh.
			http.Error(w, "order not recorded", http.StatusInternalServerError)
		}
		// Committed: the middleware sends the committed 201 itself.
	})))
}

// The same with database/sql, through pgx's stdlib driver. The *sql.DB may
// be opened with sql.Open("pgx", url) or, as here, on the store's own pool.
//
// (No output: it needs a PostgreSQL server.)
func ExampleStore_CompleteSQLTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()

	handler := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		d, ok := idemhook.DeliveryFromContext(ctx)
		if !ok {
			http.Error(w, "retry later", http.StatusServiceUnavailable)
			return
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, `INSERT INTO refunds (event_key) VALUES ($1)`, d.StoreKey()); err != nil {
			http.Error(w, "refund not recorded", http.StatusInternalServerError)
			return
		}
		if err := store.CompleteSQLTx(ctx, tx, d, http.StatusOK, nil, []byte("refunded\n")); err != nil {
			http.Error(w, "refund not recorded", http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(); err != nil {
			http.Error(w, "refund not recorded", http.StatusInternalServerError)
		}
	}
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		log.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "payments", InFlight: idemhook.InFlightWait})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /webhooks/refunds", route(http.HandlerFunc(handler)))
}
