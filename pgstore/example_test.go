package pgstore_test

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
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
// dies after, the retry is answered from the committed record: the same
// answer, headers and body, as the first one got.
//
// Without a claim (the store failed and the route fails open, or a
// duplicate waited past WaitTimeout) there is no record to commit with the
// order, and recording it anyway would record it again on every retry. So
// the handler does nothing and answers 503 with Retry-After: the provider
// retries later, when the store answers again.
//
// It runs on the PostgreSQL server of DATABASE_URL (the tests set it).
func ExampleStore_CompleteTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		event_id text   NOT NULL
	)`); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		log.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "shop", Header: "Idempotency-Key", ReplayHeaders: []string{"Cache-Control"}})
	if err != nil {
		log.Fatal(err)
	}
	recordOrder := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		d, claimed := idemhook.DeliveryFromContext(ctx)
		if !claimed {
			w.Header().Set("Retry-After", "30")
			http.Error(w, "retry later", http.StatusServiceUnavailable)
			return
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO orders (event_id) VALUES ($1) RETURNING id`,
				r.Header.Get("Idempotency-Key")).Scan(&id)
			if err != nil {
				return err
			}
			// One of the route's ReplayHeaders: stored with the record,
			// sent with the first answer and with every replay.
			w.Header().Set("Cache-Control", "no-store")
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
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/orders", route(http.HandlerFunc(recordOrder)))

	event := "evt_" + rand.Text() // a new event on every run
	deliver := func(h http.Handler) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/orders", strings.NewReader(`{"sku":"book"}`))
		req.Header.Set("Idempotency-Key", event)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first, again := deliver(mux), deliver(mux)
	fmt.Println("first:", first.Code, first.Header().Get("Content-Type"), first.Header().Get("Cache-Control"))
	fmt.Println("replayed:", again.Header().Get(idemhook.ReplayedHeader), again.Code, again.Header().Get("Content-Type"), again.Header().Get("Cache-Control"),
		"same body:", again.Body.String() == first.Body.String())
	// The handler without the middleware's claim, as during a store outage.
	outage := deliver(http.HandlerFunc(recordOrder))
	fmt.Println("without a claim:", outage.Code, "Retry-After:", outage.Header().Get("Retry-After"))
	var orders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE event_id = $1`, event).Scan(&orders); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders for the event:", orders)
	// Output:
	// first: 201 application/json no-store
	// replayed: true 201 application/json no-store same body: true
	// without a claim: 503 Retry-After: 30
	// orders for the event: 1
}

// The same with database/sql, through pgx's stdlib driver. The *sql.DB may
// be opened with sql.Open("pgx", url) or, as here, on the store's own pool.
//
// It runs on the PostgreSQL server of DATABASE_URL (the tests set it).
func ExampleStore_CompleteSQLTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS refunds (event_key text NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	refund := func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		d, claimed := idemhook.DeliveryFromContext(ctx)
		if !claimed { // no record to commit with the refund: the provider retries later
			w.Header().Set("Retry-After", "30")
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
	h := route(http.HandlerFunc(refund))

	event := `{"id":"re_` + rand.Text() + `"}` // a new event on every run: keyed by its body's hash
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/refunds", strings.NewReader(event)))
		fmt.Printf("%d %q replayed: %q\n", rec.Code, rec.Body, rec.Header().Get(idemhook.ReplayedHeader))
	}
	// Output:
	// 200 "refunded\n" replayed: ""
	// 200 "refunded\n" replayed: "true"
}

// TestMain points the Examples that need a server at the tests' one: they
// read DATABASE_URL, as a service would. Without IDEMHOOK_POSTGRES_URL they
// are skipped, as the tests are.
func TestMain(m *testing.M) {
	flag.Parse()
	if url := os.Getenv(pgtest.EnvVar); url != "" {
		os.Setenv("DATABASE_URL", url) //nolint:errcheck // only fails for an invalid name
	} else {
		skip := "^(ExampleStore_CompleteTx|ExampleStore_CompleteSQLTx)$"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			panic(err)
		}
		fmt.Fprintln(os.Stderr, "pgstore: "+pgtest.EnvVar+" is unset: the Examples that need PostgreSQL are skipped")
	}
	os.Exit(m.Run())
}
