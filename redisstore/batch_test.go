package redisstore_test

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/gather"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/storetest"
)

// newBatchStore is newStore: batching is the default.
func newBatchStore(tb testing.TB, client *redis.Client) *redisstore.Store {
	tb.Helper()
	return newStoreWith(tb, client, redisstore.Config{})
}

// TestConformanceUnbatched runs the suite with Config.Unbatched, which must
// keep the same contract as the default (TestConformance).
func TestConformanceUnbatched(t *testing.T) {
	client := redistest.Client(t)
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			return newStoreWith(tb, client, redisstore.Config{Unbatched: true})
		},
	})
}

// TestConformanceClusterUnbatched checks that the contract holds without
// batching on a Cluster client (TestConformanceCluster runs the default,
// whose pipelines the client splits by slot).
func TestConformanceClusterUnbatched(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			st, err := redisstore.New(client, redisstore.Config{Prefix: "test:" + rand.Text() + ":", Unbatched: true})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { st.Close() })
			return st
		},
	})
}

// TestBatchConcurrentClaims has many goroutines claim the same keys at once
// through one batching store. For each key exactly one claim is stored, and
// every other one gets that claim back.
func TestBatchConcurrentClaims(t *testing.T) {
	st := newBatchStore(t, redistest.Client(t))
	const keys, claimers = 50, 20
	var won [keys]atomic.Int32
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Go(func() {
			for k := range keys {
				claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
				existing, err := st.Claim(t.Context(), prefixKey(k), claim, time.Minute)
				if err != nil {
					t.Errorf("claimer %d, key %d: %v", c, k, err)
					return
				}
				if existing == nil {
					won[k].Add(1)
				} else if existing.State != idemhook.StatePending {
					t.Errorf("claimer %d, key %d: got %v, want the winner's pending claim", c, k, existing.State)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if n := won[k].Load(); n != 1 {
			t.Errorf("key %d: %d claims stored, want exactly 1", k, n)
		}
	}
}

// TestBatchDeadline checks that a call whose context has ended returns its
// context's error. The others of the same moment are unaffected.
func TestBatchDeadline(t *testing.T) {
	st := newBatchStore(t, redistest.Client(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
	if _, err := st.Claim(ctx, idemhook.StoreKey("batch", "cancelled"), claim, time.Minute); err == nil {
		t.Fatal("Claim with a cancelled context: no error")
	}
	if got, err := st.Get(t.Context(), idemhook.StoreKey("batch", "cancelled")); err != nil || got != nil {
		t.Fatalf("the cancelled claim was stored: %v, %v", got, err)
	}
	if existing, err := st.Claim(t.Context(), idemhook.StoreKey("batch", "live"), claim, time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim: %v, %v", existing, err)
	}
	st.Close()
	st.Close() // twice is fine
	if _, err := st.Get(t.Context(), idemhook.StoreKey("batch", "live")); err == nil {
		t.Fatal("Get after Close: no error")
	}
}

func itoa(n int) string {
	return string([]byte{byte('0' + n/10), byte('0' + n%10)})
}

func prefixKey(k int) string { return idemhook.StoreKey("batch", "key-"+itoa(k)) }

// BenchmarkStoreUnbatched is BenchmarkStore (the default, batched) with
// Config.Unbatched.
func BenchmarkStoreUnbatched(b *testing.B) {
	client := redistest.Client(b)
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			return newStoreWith(tb, client, redisstore.Config{Unbatched: true})
		},
	})
}

// waitNoBatchGoroutines polls, up to a deadline of 10s, until no batch
// worker goroutine is left. Workers of other stores of this package (those
// of earlier tests, closed at their end) count too, so it waits for them.
func waitNoBatchGoroutines(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for gather.Live() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d batch worker goroutines left after 10s", what, gather.Live())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatchIdleWorkers checks that the default store starts no goroutine
// before it is used, that its workers exit once it idles, without Close,
// and start again for the next calls.
func TestBatchIdleWorkers(t *testing.T) {
	client := redistest.Client(t)
	waitNoBatchGoroutines(t, "before the test")
	prefix := "test:" + rand.Text() + ":"
	t.Cleanup(func() { redistest.DeletePrefix(context.Background(), client, prefix) }) //nolint:errcheck // best effort
	st, err := redisstore.NewIdle(client, redisstore.Config{Prefix: prefix}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Never closed: the point is that nothing is left without Close.
	if n := gather.Live(); n != 0 || st.BatchWorkers() != 0 {
		t.Fatalf("a new store runs %d batch goroutines (%d counted), want 0", n, st.BatchWorkers())
	}
	for round := range 2 {
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
				key := idemhook.StoreKey("idle", itoa(round*16+g))
				if existing, err := st.Claim(t.Context(), key, claim, time.Minute); err != nil || existing != nil {
					t.Errorf("Claim %s: %v, %v", key, existing, err)
				}
			})
		}
		wg.Wait()
		if n := st.BatchWorkers(); n < 1 || n > 4 {
			t.Fatalf("round %d: %d batch goroutines counted after 16 concurrent claims, want 1 to 4", round, n)
		}
		waitNoBatchGoroutines(t, "after the store idled")
		if n := st.BatchWorkers(); n != 0 {
			t.Fatalf("round %d: %d batch goroutines counted after the store idled, want 0", round, n)
		}
	}
}

// TestBatchIdleWorkersDefault is TestBatchIdleWorkers' last step with the
// idle period New sets: a store used once and never closed holds no
// goroutine a few seconds later.
func TestBatchIdleWorkersDefault(t *testing.T) {
	client := redistest.Client(t)
	waitNoBatchGoroutines(t, "before the test")
	st, err := redisstore.New(client, redisstore.Config{Prefix: "test:" + rand.Text() + ":"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(t.Context(), idemhook.StoreKey("idle", "default")); err != nil {
		t.Fatal(err)
	}
	if gather.Live() == 0 {
		t.Fatal("no batch goroutine after a call")
	}
	waitNoBatchGoroutines(t, "a store idle and never closed")
}

// TestBatchCloseStopsWorkers checks that Close stops the running workers at
// once, long before their idle period, and that calls fail afterwards.
func TestBatchCloseStopsWorkers(t *testing.T) {
	client := redistest.Client(t)
	waitNoBatchGoroutines(t, "before the test")
	st, err := redisstore.NewIdle(client, redisstore.Config{Prefix: "test:" + rand.Text() + ":"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			if _, err := st.Get(t.Context(), idemhook.StoreKey("close", itoa(g))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if gather.Live() == 0 {
		t.Fatal("no batch goroutine after 16 calls")
	}
	st.Close()
	if n := st.BatchWorkers(); n != 0 {
		t.Fatalf("%d batch goroutines counted after Close, want 0", n)
	}
	// Close waited for them; what may remain is their return, well
	// within the deadline and nowhere near the hour of idle period.
	waitNoBatchGoroutines(t, "after Close")
	if _, err := st.Get(t.Context(), idemhook.StoreKey("close", "after")); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Get after Close: %v, want the store's closed error", err)
	}
}

// TestBatchConfig checks the batching settings: the deprecated Batch is
// accepted alone, and refused with Unbatched.
func TestBatchConfig(t *testing.T) {
	client := redistest.Client(t)
	st := newStoreWith(t, client, redisstore.Config{Batch: true}) //nolint:staticcheck // the deprecated field must keep working
	if _, err := st.Get(t.Context(), idemhook.StoreKey("config", "batch")); err != nil {
		t.Fatalf("Get with Batch set: %v", err)
	}
	if _, err := redisstore.New(client, redisstore.Config{Batch: true, Unbatched: true}); err == nil { //nolint:staticcheck // checked on purpose
		t.Fatal("New with both Batch and Unbatched: no error")
	}
}
