// Command quickstart is the README's quick start: a webhook receiver whose
// handler runs once per event, on the memory store.
package main

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

func main() {
	store, err := memstore.New(memstore.Config{}) // one process; redisstore for many
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idemhook.New(store, idemhook.Options{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	// Like @IdempotentWebhook({ source: 'stone', ttlSec: 86400 }):
	// key = idempotency-key header, else sha256 of the JSON body. A
	// duplicate that arrives while the first delivery runs waits for it.
	stone, err := mw.Route(idemhook.Route{Source: "stone"})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stone", stone(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Runs once per event. Re-deliveries get this same answer back.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"received":true}`)
	})))
	log.Println("listening on 127.0.0.1:8080")
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
