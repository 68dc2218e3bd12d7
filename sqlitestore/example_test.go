package sqlitestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
)

func ExampleNew() {
	dir, err := os.MkdirTemp("", "idemhook-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "idemhook.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(db, sqlitestore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	key := idemhook.StoreKey("stone", "evt_123")
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "delivery-1"}

	// The first delivery claims the key and, once its handler has answered,
	// stores the response.
	existing, err := store.Claim(ctx, key, claim, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first delivery finds:", existing)
	done := &idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: []byte(`{"received":true}`)}
	if err := store.Complete(ctx, key, claim, done, 24*time.Hour); err != nil {
		log.Fatal(err)
	}

	// A re-delivery finds the stored response.
	existing, err = store.Claim(ctx, key, &idemhook.Record{State: idemhook.StatePending, Token: "delivery-2"}, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate finds:", existing.State, existing.Status, string(existing.Body))
	// Output:
	// first delivery finds: <nil>
	// duplicate finds: completed 200 {"received":true}
}

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "idemhook-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "idemhook.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		log.Fatal(err)
	}
	fmt.Println("journal mode:", mode)
	// Output: journal mode: wal
}
