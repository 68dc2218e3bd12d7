package memstore_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

func ExampleNew() {
	store, err := memstore.New(memstore.Config{MaxEntries: 100_000})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	ctx := context.Background()
	key := idemhook.StoreKey("stripe", "evt_1")
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "delivery-1"}

	// The first delivery claims the key, runs and stores its answer.
	existing, _ := store.Claim(ctx, key, claim, 30*time.Second)
	fmt.Println("first delivery finds:", existing)
	done := &idemhook.Record{
		State:  idemhook.StateCompleted,
		Status: http.StatusOK,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"ok":true}`),
	}
	_ = store.Complete(ctx, key, claim, done, 24*time.Hour)

	// A retry finds the stored answer.
	retry := &idemhook.Record{State: idemhook.StatePending, Token: "delivery-2"}
	existing, _ = store.Claim(ctx, key, retry, 30*time.Second)
	fmt.Println("retry finds:", existing.State, existing.Status, string(existing.Body))
	fmt.Println("keys:", store.Len())
	// Output:
	// first delivery finds: <nil>
	// retry finds: completed 200 {"ok":true}
	// keys: 1
}
