// Command recordorder records each order sent as a webhook exactly once: the
// order row and the idempotency record commit in one PostgreSQL transaction.
// It is the program of docs/stores.md, whole.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop go run ./examples/exactlyonce/recordorder
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/pgstore"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		event_id text   NOT NULL UNIQUE -- a second line of defence
	)`); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool, pgstore.Config{}) // table idemhook_keys, created if missing
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhook.New(store, idemhook.Options{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{
		Source:        "shop",
		Header:        "Idempotency-Key",
		ReplayHeaders: []string{"Cache-Control"}, // stored and replayed with the body
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/orders", route(recordOrder(pool, store)))

	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080"))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}

// recordOrder inserts the order of a delivery and commits the idempotency
// record in the same transaction.
func recordOrder(pool *pgxpool.Pool, store *pgstore.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		d, claimed := idemhook.DeliveryFromContext(ctx) // the claim this delivery holds
		if !claimed {
			// No claim (a store error while the route fails open, a duplicate
			// that waited past WaitTimeout): no record to commit with the
			// order. Refuse rather than record it on every retry; the
			// provider retries later.
			w.Header().Set("Retry-After", "30")
			http.Error(w, "retry later", http.StatusServiceUnavailable)
			return
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		var id int64
		err = tx.QueryRow(ctx, `INSERT INTO orders (event_id) VALUES ($1) RETURNING id`, d.StoreKey()).Scan(&id)
		if err != nil {
			http.Error(w, "order not recorded", http.StatusInternalServerError)
			return
		}
		// Headers go in the record: one of the route's replay headers set
		// here, or any of them given to CompleteTx. The first answer and
		// every replay carry exactly those.
		w.Header().Set("Cache-Control", "no-store")
		header := http.Header{"Content-Type": {"application/json"}}
		body := fmt.Appendf(nil, `{"order":%d}`+"\n", id)
		if err := store.CompleteTx(ctx, tx, d, http.StatusCreated, header, body); err != nil {
			// idemhook.ErrNotOwner: the lease lapsed and another delivery
			// owns the event now. The rollback undoes the insert.
			http.Error(w, "order not recorded", http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			http.Error(w, "order not recorded", http.StatusInternalServerError)
			return
		}
		// Nothing to write: the middleware sends the committed 201.
	}
}
