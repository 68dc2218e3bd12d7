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

// A process that uses the file alone, as the gateway does: it takes the
// file's lock, so the store keeps pending claims and recent records in
// memory, and it reads through a pool of its own.
func ExampleLock() {
	dir, err := os.MkdirTemp("", "idemhook-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idemhook.db")

	lock, err := sqlitestore.Lock(path) // fails while another process holds it
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock()
	db, err := sqlitestore.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	reader, err := sqlitestore.OpenReader(path)
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Close()
	store, err := sqlitestore.New(db, sqlitestore.Config{Lock: lock, Reader: reader, CacheBytes: 32 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	// Claims that a process without the lock left in the file belong to no
	// one now: free them before serving.
	if _, err := store.FreePendingClaims(context.Background(), 30*time.Second); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	key := idemhook.StoreKey("stone", "evt_123")
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "delivery-1"}
	if _, err := store.Claim(ctx, key, claim, 30*time.Second); err != nil { // in memory only
		log.Fatal(err)
	}
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM idem_keys`).Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Println("rows while the handler runs:", rows)
	done := &idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: []byte(`{"received":true}`)}
	if err := store.Complete(ctx, key, claim, done, 24*time.Hour); err != nil { // one commit
		log.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM idem_keys`).Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Println("rows once it has answered:", rows)
	// Output:
	// rows while the handler runs: 0
	// rows once it has answered: 1
}
