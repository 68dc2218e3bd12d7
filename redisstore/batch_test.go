package redisstore_test

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/redistest"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/storetest"
)

func newBatchStore(tb testing.TB, client *redis.Client) *redisstore.Store {
	tb.Helper()
	return newStoreWith(tb, client, redisstore.Config{Batch: true})
}

// TestConformanceBatch runs the suite with Config.Batch, which must keep the
// same contract.
func TestConformanceBatch(t *testing.T) {
	client := redistest.Client(t)
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newBatchStore(tb, client) },
	})
}

// TestConformanceClusterBatch checks that the contract holds with batching
// on a Cluster client, whose pipelines are split by slot.
func TestConformanceClusterBatch(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			st, err := redisstore.New(client, redisstore.Config{Prefix: "test:" + rand.Text() + ":", Batch: true})
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

// BenchmarkStoreBatch is BenchmarkStore with Config.Batch.
func BenchmarkStoreBatch(b *testing.B) {
	client := redistest.Client(b)
	storetest.Bench(b, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newBatchStore(tb, client) },
	})
}
