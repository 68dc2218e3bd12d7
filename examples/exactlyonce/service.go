package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/pgstore"
)

// config is what main reads from its flags.
type config struct {
	addr     string
	dbURL    string
	inFlight string        // wait | reject
	lease    time.Duration // 0: idemhook's default
	// keysTable and ordersTable name the tables (tests use their own).
	keysTable, ordersTable string
	// hook, when set, is called at the points of a delivery where a crash
	// matters (see service.at). The crash tests stop the process there.
	hook func(point string)
	// onStoreCall, when set, is the middleware's Options.OnStoreCall: the
	// tests count the claims with it.
	onStoreCall func(idemhook.StoreCallInfo)
}

// run serves until ctx ends, printing "listening on ADDR" once it accepts
// connections.
func run(ctx context.Context, cfg config, stdout io.Writer) error {
	pool, err := pgxpool.New(ctx, cfg.dbURL)
	if err != nil {
		return fmt.Errorf("exactlyonce: %w", err)
	}
	defer pool.Close()
	svc, err := newService(ctx, pool, cfg)
	if err != nil {
		return err
	}
	defer svc.close()
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("exactlyonce: %w", err)
	}
	srv := &http.Server{Handler: svc.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown) //nolint:errcheck
	}()
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// service records orders sent as webhooks.
type service struct {
	pool   *pgxpool.Pool
	store  *pgstore.Store
	orders string // the orders table, quoted
	route  func(http.Handler) http.Handler
	hook   func(string)
	runs   atomic.Int64 // handler executions that reached the database
}

func newService(ctx context.Context, pool *pgxpool.Pool, cfg config) (*service, error) {
	if cfg.ordersTable == "" {
		cfg.ordersTable = "orders"
	}
	store, err := pgstore.New(ctx, pool, pgstore.Config{Table: cfg.keysTable})
	if err != nil {
		return nil, err
	}
	s := &service{pool: pool, store: store, orders: pgx.Identifier{cfg.ordersTable}.Sanitize(), hook: cfg.hook}
	// No UNIQUE on event_id, on purpose: here one row per event comes from
	// the transaction alone, which the tests prove. A real service would
	// add one as a second line of defence.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.orders+` (
		id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		event_id text   NOT NULL,
		sku      text   NOT NULL,
		qty      int    NOT NULL
	)`); err != nil {
		store.Close()
		return nil, fmt.Errorf("exactlyonce: create orders table: %w", err)
	}
	mw, err := idemhook.New(store, idemhook.Options{
		// A burst of concurrent deliveries queues for the pool's few
		// connections. The default 250ms deadline, meant to spot a dead
		// store fast, would count that queue as an outage.
		StoreTimeout: 2 * time.Second,
		Lease:        cfg.lease,
		OnStoreCall:  cfg.onStoreCall,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	inFlight := idemhook.InFlightWait
	if cfg.inFlight == "reject" {
		inFlight = idemhook.InFlightReject
	}
	s.route, err = mw.Route(idemhook.Route{
		Source:   "shop",
		Header:   "Idempotency-Key",
		InFlight: inFlight,
		// Stored with the answer, so that every replay has it too.
		ReplayHeaders: []string{"Cache-Control"},
		// Without the store there is no record to commit with the order:
		// refuse (503) rather than risk recording it twice.
		OnStoreError: idemhook.StoreErrorClosed,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	return s, nil
}

func (s *service) close() { s.store.Close() }

func (s *service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/orders", s.route(http.HandlerFunc(s.recordOrder)))
	return mux
}

// at marks a point where a crash matters.
func (s *service) at(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

type orderEvent struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// recordOrder inserts the order and commits the idempotency record with it.
func (s *service) recordOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d, claimed := idemhook.DeliveryFromContext(ctx)
	if !claimed {
		// A duplicate that waited past WaitTimeout for a first delivery
		// still running: without the claim, recording the order could do
		// it twice. The provider retries later and gets the answer.
		w.Header().Set("Retry-After", "5")
		http.Error(w, "delivery in progress", http.StatusServiceUnavailable)
		return
	}
	s.at("claimed")
	var ev orderEvent
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil || ev.SKU == "" || ev.Qty <= 0 {
		http.Error(w, `want {"sku": "...", "qty": n > 0}`, http.StatusUnprocessableEntity)
		return
	}
	s.runs.Add(1)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		http.Error(w, "database unavailable", http.StatusServiceUnavailable)
		return
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO `+s.orders+` (event_id, sku, qty) VALUES ($1, $2, $3) RETURNING id`,
		d.StoreKey(), ev.SKU, ev.Qty).Scan(&id); err != nil {
		http.Error(w, "order not recorded", http.StatusInternalServerError)
		return
	}
	// The record holds the route's replay headers, from those given to
	// CompleteTx or set on w by now: the first answer and every replay
	// carry them, and no other header of the handler's.
	w.Header().Set("Cache-Control", "no-store")
	body := []byte(`{"order":` + strconv.FormatInt(id, 10) + `}` + "\n")
	if err := s.store.CompleteTx(ctx, tx, d, http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, body); err != nil {
		// ErrNotOwner means the lease lapsed and another delivery owns
		// the event now. The deferred rollback undoes the insert.
		http.Error(w, "order not recorded", http.StatusInternalServerError)
		return
	}
	s.at("written")
	if err := tx.Commit(ctx); err != nil {
		http.Error(w, "order not recorded", http.StatusInternalServerError)
		return
	}
	s.at("committed")
	// Nothing to write: the middleware sends the committed 201 once it has
	// seen the commit.
}
