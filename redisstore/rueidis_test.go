package redisstore_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/storetest"
)

// clientKinds are the two client libraries a Store runs on. Each makes a
// store without prefix on the server at addr, with the settings the
// package documentation advises for a webhook path, on a client that has
// connected; the client is closed when t ends.
var clientKinds = []struct {
	name  string
	store func(t *testing.T, addr string) *redisstore.Store
}{
	{"go-redis", func(t *testing.T, addr string) *redisstore.Store {
		client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { client.Close() })
		if err := client.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		st, err := redisstore.New(client, redisstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		// A first call through the store's pipelines, which go-redis sends
		// on a pool of their own (Options.PipelinePoolSize), so that the
		// handshake of its first connection doesn't show among the
		// commands TestCommandCounts reads.
		if _, err := st.Get(t.Context(), "idem:test:connect"); err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"rueidis", func(t *testing.T, addr string) *redisstore.Store {
		// One pipelining connection (rueidis opens one per 2 cores), opened
		// by a first command, so that no handshake shows among the
		// commands TestCommandCounts reads.
		client := rueidisClient(t, rueidis.ClientOption{InitAddress: []string{addr}, PipelineMultiplex: -1})
		if err := client.Do(t.Context(), client.B().Ping().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		return newRueidisStore(t, client, "")
	}},
}

// rueidisClient returns a rueidis client with opt, the client-side cache
// and the retries of reads turned off, as NewRueidis advises. It is closed
// when tb ends.
func rueidisClient(tb testing.TB, opt rueidis.ClientOption) rueidis.Client {
	tb.Helper()
	opt.DisableCache, opt.DisableRetry = true, true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(client.Close)
	return client
}

func newRueidisStore(tb testing.TB, client rueidis.Client, prefix string) *redisstore.Store {
	tb.Helper()
	st, err := redisstore.NewRueidis(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// sharedRueidisHarness makes stores on the shared server, each with a fresh
// prefix whose keys are deleted when its test ends.
func sharedRueidisHarness(tb testing.TB) storetest.Harness {
	url := redistest.URL(tb)
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		tb.Fatalf("IDEMHOOK_REDIS_URL %q: %v", url, err)
	}
	client := rueidisClient(tb, opt)
	cleaner := redistest.Client(tb)
	return storetest.Harness{
		New: func(tb testing.TB) idemhook.Store {
			prefix := "test:" + rand.Text() + ":"
			tb.Cleanup(func() {
				if _, err := redistest.DeletePrefix(context.Background(), cleaner, prefix); err != nil {
					tb.Errorf("deleting the keys of prefix %q: %v", prefix, err)
				}
			})
			return newRueidisStore(tb, client, prefix)
		},
	}
}

func TestConformanceRueidis(t *testing.T) {
	storetest.Run(t, sharedRueidisHarness(t))
}

// TestConformanceRueidisCluster runs the suite on a Cluster, which rueidis
// finds by itself from one node's address.
func TestConformanceRueidisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3)
	client := rueidisClient(t, rueidis.ClientOption{InitAddress: addrs})
	// WAIT can't follow its write on a cluster client: refused.
	_, err := redisstore.NewRueidis(client, redisstore.Config{WaitReplicas: 1})
	if want := "redisstore: Config.WaitReplicas and WaitAOF are not available on a rueidis Cluster client: WAIT has no key, so the client sends it to a node and connection of its choosing, not after the write it should count"; err == nil || err.Error() != want {
		t.Errorf("NewRueidis with WaitReplicas on a Cluster: got %v, want %q", err, want)
	}
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newRueidisStore(tb, client, "test:"+rand.Text()+":") },
	})
}

// TestConformanceRueidisSentinel runs the suite through a client that asks
// a Sentinel for the master.
func TestConformanceRueidisSentinel(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, "idemhook", master.Addr())
	client := rueidisClient(t, rueidis.ClientOption{
		InitAddress: []string{sentinel.Addr()},
		Sentinel:    rueidis.SentinelOption{MasterSet: "idemhook"},
	})
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB) idemhook.Store { return newRueidisStore(tb, client, "test:"+rand.Text()+":") },
	})
}

// TestClientsShareRecords: a record one client's store writes, the other's
// reads and acts on, so instances on either library can share a Redis.
func TestClientsShareRecords(t *testing.T) {
	srv := redistest.StartServer(t)
	var stores [2]*redisstore.Store
	for i, kind := range clientKinds {
		stores[i] = kind.store(t, srv.Addr())
	}
	ctx := t.Context()
	for i, st := range stores {
		other := stores[1-i]
		key := "idem:test:shared-" + clientKinds[i].name
		claim := pendingRecord()
		if existing, err := st.Claim(ctx, key, claim, time.Minute); err != nil || existing != nil {
			t.Fatalf("%s: Claim = (%v, %v), want (nil, nil)", clientKinds[i].name, existing, err)
		}
		if got, err := other.Claim(ctx, key, pendingRecord(), time.Minute); err != nil || got == nil || got.Token != claim.Token {
			t.Fatalf("%s: Claim of the other's claim = (%v, %v), want the claim with token %q", clientKinds[1-i].name, got, err, claim.Token)
		}
		if err := other.Complete(ctx, key, claim, completedRecord(claim), time.Hour); err != nil {
			t.Fatalf("%s: Complete of the other's claim: %v", clientKinds[1-i].name, err)
		}
		got, err := st.Get(ctx, key)
		if err != nil || got == nil || got.State != idemhook.StateCompleted || string(got.Body) != string(completedRecord(claim).Body) {
			t.Fatalf("%s: Get after the other completed = (%v, %v), want the completed record", clientKinds[i].name, got, err)
		}
	}
}

func TestNewRueidisErrors(t *testing.T) {
	if _, err := redisstore.NewRueidis(nil, redisstore.Config{}); err == nil || !strings.Contains(err.Error(), "nil client") {
		t.Errorf("NewRueidis(nil): got %v, want the nil client error", err)
	}
	srv := redistest.StartServer(t)
	client := rueidisClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	_, err := redisstore.NewRueidis(client, redisstore.Config{Batch: true})
	if want := "redisstore: Config.Batch is for go-redis clients: rueidis pipelines concurrent commands by itself"; err == nil || err.Error() != want {
		t.Errorf("NewRueidis with Batch: got %v, want %q", err, want)
	}
	_, err = redisstore.NewRueidis(client, redisstore.Config{Unbatched: true})
	if err == nil || !strings.Contains(err.Error(), "Config.Unbatched is for go-redis clients") {
		t.Errorf("NewRueidis with Unbatched: got %v, want the go-redis only error", err)
	}
}

// BenchmarkStoreRueidis is BenchmarkStore through rueidis.
func BenchmarkStoreRueidis(b *testing.B) {
	storetest.Bench(b, sharedRueidisHarness(b))
}
