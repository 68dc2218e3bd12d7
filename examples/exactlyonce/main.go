// Command exactlyonce is a webhook receiver that records each order exactly
// once, on PostgreSQL. The order row and the idempotency record commit in one
// transaction (pgstore.Store.CompleteTx). So no crash, at any point, can
// record an order twice or answer a retry with anything but the committed
// response.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop go run ./examples/exactlyonce
//	curl -i -X POST localhost:8080/webhooks/orders -H 'Idempotency-Key: evt_1' -d '{"sku":"book","qty":2}'
//
// Send the same request again. The answer is the same order, replayed
// (Idempotent-Replayed: true), and the orders table still holds one row.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "listen address")
	flag.StringVar(&cfg.dbURL, "db", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	flag.StringVar(&cfg.inFlight, "in-flight", "wait", "what a duplicate does while the first delivery runs: wait or reject")
	flag.DurationVar(&cfg.lease, "lease", 30*time.Second, "lease of a claim: how soon a crashed delivery's event can run again")
	flag.Parse()
	if cfg.dbURL == "" {
		fmt.Fprintln(os.Stderr, "exactlyonce: set -db or DATABASE_URL to a PostgreSQL URL")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
