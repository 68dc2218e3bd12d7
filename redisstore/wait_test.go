package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/storetest"
)

// waitKinds are the three ways a store sends its commands: go-redis one
// call at a time, go-redis in Config.Batch's pipelines (the gateway's),
// and rueidis. Each makes a store with cfg on the server at addr, on a
// client closed when t ends.
var waitKinds = []struct {
	name  string
	store func(t testing.TB, addr string, cfg redisstore.Config) *redisstore.Store
}{
	{"go-redis", func(t testing.TB, addr string, cfg redisstore.Config) *redisstore.Store {
		return goredisStore(t, addr, cfg)
	}},
	{"go-redis-batch", func(t testing.TB, addr string, cfg redisstore.Config) *redisstore.Store {
		cfg.Batch = true
		return goredisStore(t, addr, cfg)
	}},
	{"rueidis", func(t testing.TB, addr string, cfg redisstore.Config) *redisstore.Store {
		client := rueidisClient(t, rueidis.ClientOption{InitAddress: []string{addr}})
		st, err := redisstore.NewRueidis(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

func goredisStore(t testing.TB, addr string, cfg redisstore.Config) *redisstore.Store {
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestWaitReplicas checks what Claim and Complete do with
// Config.WaitReplicas against a master with one replica: with the count
// acknowledged, the replica holds the write when the call returns; short,
// a claim is released and a completion stays on the master, each with an
// error wrapping ErrReplicasShort that gives the counts; a claim that finds
// a record is not affected.
func TestWaitReplicas(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master.Addr())
	mc := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { mc.Close() })
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rc.Close() })
	version := redisVersion(t, mc)

	acked := redisstore.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second}
	short := redisstore.Config{WaitReplicas: 2, WaitTimeout: 20 * time.Millisecond} // there is one replica
	aof := redisstore.Config{WaitReplicas: 1, WaitAOF: true}
	encode := func(r *idemhook.Record) string {
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// get returns the value of key on c, "" when there is none.
	get := func(t *testing.T, c *redis.Client, key string) string {
		t.Helper()
		v, err := c.Get(t.Context(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}
	wantErr := func(t *testing.T, err error, want string, short bool) {
		t.Helper()
		if err == nil || err.Error() != want {
			t.Fatalf("got error %v\nwant %q", err, want)
		}
		if errors.Is(err, redisstore.ErrReplicasShort) != short {
			t.Fatalf("errors.Is(err, ErrReplicasShort) = %v, want %v", !short, short)
		}
	}

	for _, kind := range waitKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			plain := kind.store(t, master.Addr(), redisstore.Config{})
			tests := []struct {
				name string
				run  func(t *testing.T, key string)
			}{
				{"Acknowledged", func(t *testing.T, key string) {
					st := kind.store(t, master.Addr(), acked)
					claim := pendingRecord()
					if got, err := st.Claim(ctx, key, claim, time.Minute); err != nil || got != nil {
						t.Fatalf("Claim = (%v, %v), want (nil, nil)", got, err)
					}
					if got := get(t, rc, key); got != encode(claim) {
						t.Fatalf("the replica holds %q after the Claim returned, want the claim", got)
					}
					done := completedRecord(claim)
					if err := st.Complete(ctx, key, claim, done, time.Hour); err != nil {
						t.Fatalf("Complete: %v", err)
					}
					if got := get(t, rc, key); got != encode(done) {
						t.Fatalf("the replica holds %q after the Complete returned, want the record", got)
					}
				}},
				{"ShortClaimIsReleased", func(t *testing.T, key string) {
					st := kind.store(t, master.Addr(), short)
					got, err := st.Claim(ctx, key, pendingRecord(), time.Minute)
					wantErr(t, err, "redisstore: claim "+key+": fewer replicas acknowledged the write than Config.WaitReplicas asks: 1 of 2 within 20ms (WAIT); the claim was released", true)
					if got != nil {
						t.Fatalf("Claim returned %v with its error", got)
					}
					if v := get(t, mc, key); v != "" {
						t.Fatalf("the master holds %q after a short Claim, want the claim released", v)
					}
				}},
				{"ShortCompleteStaysOnTheMaster", func(t *testing.T, key string) {
					st := kind.store(t, master.Addr(), short)
					claim := pendingRecord()
					if _, err := plain.Claim(ctx, key, claim, time.Minute); err != nil {
						t.Fatal(err)
					}
					done := completedRecord(claim)
					err := st.Complete(ctx, key, claim, done, time.Hour)
					wantErr(t, err, "redisstore: complete "+key+": fewer replicas acknowledged the write than Config.WaitReplicas asks: 1 of 2 within 20ms (WAIT); the record is written on the master, but a failover now may lose it", true)
					if v := get(t, mc, key); v != encode(done) {
						t.Fatalf("the master holds %q after a short Complete, want the record", v)
					}
				}},
				{"NotOwnerIsNotShort", func(t *testing.T, key string) {
					st := kind.store(t, master.Addr(), short)
					if _, err := plain.Claim(ctx, key, pendingRecord(), time.Minute); err != nil {
						t.Fatal(err)
					}
					other := pendingRecord()
					err := st.Complete(ctx, key, other, completedRecord(other), time.Hour)
					if !errors.Is(err, idemhook.ErrNotOwner) || errors.Is(err, redisstore.ErrReplicasShort) {
						t.Fatalf("Complete of another's claim: got %v, want ErrNotOwner alone", err)
					}
				}},
				{"DuplicateIgnoresTheCount", func(t *testing.T, key string) {
					st := kind.store(t, master.Addr(), short)
					claim := pendingRecord()
					if _, err := plain.Claim(ctx, key, claim, time.Minute); err != nil {
						t.Fatal(err)
					}
					if err := plain.Complete(ctx, key, claim, completedRecord(claim), time.Hour); err != nil {
						t.Fatal(err)
					}
					got, err := st.Claim(ctx, key, pendingRecord(), time.Minute)
					if err != nil || got == nil || got.State != idemhook.StateCompleted {
						t.Fatalf("Claim of a completed key = (%v, %v), want the record and no error", got, err)
					}
				}},
				{"WaitAOF", func(t *testing.T, key string) {
					st := kind.store(t, master.Addr(), aof)
					_, err := st.Claim(ctx, key, pendingRecord(), time.Minute)
					if err == nil {
						t.Fatalf("Claim with WaitAOF on Redis %s without appendonly: no error", version)
					}
					want := "(Config.WaitAOF needs WAITAOF, which Redis 7.2 added; the server is Redis " + version + "); the claim was released"
					if !waitAOFSupported(version) {
						if !strings.HasPrefix(err.Error(), "redisstore: claim "+key+": WAITAOF after the write: ") ||
							!strings.Contains(err.Error(), "unknown command") || !strings.HasSuffix(err.Error(), want) {
							t.Fatalf("Claim with WaitAOF on Redis %s: got %v\nwant it to name WAITAOF and end with %q", version, err, want)
						}
					} else if !strings.Contains(err.Error(), "appendonly") {
						t.Fatalf("Claim with WaitAOF on Redis %s without appendonly: got %v, want WAITAOF's refusal", version, err)
					}
					if v := get(t, mc, key); v != "" {
						t.Fatalf("the master holds %q after a failed WAITAOF, want the claim released", v)
					}
				}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					tt.run(t, "idem:test:"+kind.name+"-"+tt.name)
				})
			}
		})
	}
}

func redisVersion(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	t.Fatal("INFO server has no redis_version")
	return ""
}

// waitAOFSupported reports whether Redis version v (7.0.15) has WAITAOF,
// which 7.2 added.
func waitAOFSupported(v string) bool {
	var major, minor int
	fmt.Sscanf(v, "%d.%d", &major, &minor)
	return major > 7 || major == 7 && minor >= 2
}

// TestWaitCommands reads from MONITOR what a first delivery sends with
// Config.WaitReplicas: each write is followed by WAIT on the connection
// that sent the write, which is what WAIT counts. With a cold script
// cache the EVAL that follows NOSCRIPT gets its own WAIT.
func TestWaitCommands(t *testing.T) {
	master := redistest.StartServer(t)
	redistest.StartReplica(t, master.Addr())
	admin := redis.NewClient(&redis.Options{Addr: master.Addr(), PoolSize: 1})
	t.Cleanup(func() { admin.Close() })
	if err := admin.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, master.Addr())
	for _, kind := range waitKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			st := kind.store(t, master.Addr(), redisstore.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
			deliver := func(key string) {
				t.Helper()
				claim := pendingRecord()
				if _, err := st.Claim(ctx, key, claim, time.Minute); err != nil {
					t.Fatal(err)
				}
				if err := st.Complete(ctx, key, claim, completedRecord(claim), time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			deliver("idem:test:" + kind.name + "-warm") // connections open, handshakes done
			for _, tt := range []struct {
				name string
				cold bool
				want []string
			}{
				{"ColdScriptCache", true, []string{"set", "wait", "evalsha", "wait", "eval", "wait"}},
				{"FirstDelivery", false, []string{"set", "wait", "evalsha", "wait"}},
				// A claim that finds a record sends its WAIT all the
				// same (its answer is ignored): see wait.go.
				{"Replay", false, []string{"set", "wait"}},
			} {
				t.Run(tt.name, func(t *testing.T) {
					if tt.cold {
						if err := admin.ScriptFlush(ctx).Err(); err != nil {
							t.Fatal(err)
						}
					}
					key := "idem:test:" + kind.name + "-" + tt.name
					if tt.name == "Replay" {
						deliver(key)
					}
					mon.sentFrom(t, admin)
					if tt.name == "Replay" {
						if got, err := st.Claim(ctx, key, pendingRecord(), time.Minute); err != nil || got == nil {
							t.Fatalf("Claim of a completed key = (%v, %v), want the record", got, err)
						}
					} else {
						deliver(key)
					}
					sent := mon.sentFrom(t, admin)
					var names []string
					for _, c := range sent {
						names = append(names, c.name)
					}
					if !slices.Equal(names, tt.want) {
						t.Fatalf("commands sent: got %q, want %q", names, tt.want)
					}
					for i := 0; i+1 < len(sent); i += 2 {
						if sent[i].from != sent[i+1].from {
							t.Errorf("%s came from %s, its WAIT from %s: want the same connection", sent[i].name, sent[i].from, sent[i+1].from)
						}
					}
				})
			}
		})
	}
}

// TestBatchWaitBesideReads: with Config.Batch, claims that wait and reads
// that don't, sent at the same moment, each get their own result; reads
// are not failed by a short count.
func TestBatchWaitBesideReads(t *testing.T) {
	master := redistest.StartServer(t)
	redistest.StartReplica(t, master.Addr())
	for _, tt := range []struct {
		name    string
		cfg     redisstore.Config
		wantErr error
	}{
		{"Acknowledged", redisstore.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second}, nil},
		{"Short", redisstore.Config{WaitReplicas: 2, WaitTimeout: 10 * time.Millisecond}, redisstore.ErrReplicasShort},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Batch = true
			st := goredisStore(t, master.Addr(), tt.cfg)
			plain := goredisStore(t, master.Addr(), redisstore.Config{})
			ctx := t.Context()
			const n = 50
			for i := range n { // records for the reads
				if _, err := plain.Claim(ctx, fmt.Sprintf("idem:test:%s-read-%d", tt.name, i), pendingRecord(), time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					key := fmt.Sprintf("idem:test:%s-claim-%d", tt.name, i)
					if _, err := st.Claim(ctx, key, pendingRecord(), time.Minute); !errors.Is(err, tt.wantErr) {
						t.Errorf("Claim(%s): got %v, want %v", key, err, tt.wantErr)
					}
				})
				wg.Go(func() {
					key := fmt.Sprintf("idem:test:%s-read-%d", tt.name, i)
					if got, err := st.Get(ctx, key); err != nil || got == nil {
						t.Errorf("Get(%s) = (%v, %v), want the claim", key, got, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestConformanceWaitReplicas runs the suite on stores that wait for the
// one replica of their master: the contract is unchanged.
func TestConformanceWaitReplicas(t *testing.T) {
	master := redistest.StartServer(t)
	redistest.StartReplica(t, master.Addr())
	for _, kind := range waitKinds {
		t.Run(kind.name, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New: func(tb testing.TB) idemhook.Store {
					return kind.store(tb, master.Addr(), redisstore.Config{
						Prefix: "test:" + rand.Text() + ":", WaitReplicas: 1, WaitTimeout: 2 * time.Second,
					})
				},
			})
		})
	}
}

// TestWaitConfigErrors checks the Wait settings New refuses, before
// anything is sent.
func TestWaitConfigErrors(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { client.Close() })
	slow := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { slow.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { ring.Close() })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { cluster.Close() })
	tests := []struct {
		name   string
		client redis.UniversalClient
		cfg    redisstore.Config
		want   string // "" for no error
	}{
		{"Off", client, redisstore.Config{}, ""},
		{"Replicas", client, redisstore.Config{WaitReplicas: 1}, ""},
		{"AOFAlone", client, redisstore.Config{WaitAOF: true}, ""},
		{"NegativeReplicas", client, redisstore.Config{WaitReplicas: -1},
			"redisstore: Config.WaitReplicas -1 is negative (0 waits for no replica)"},
		{"NegativeTimeout", client, redisstore.Config{WaitReplicas: 1, WaitTimeout: -time.Second},
			"redisstore: Config.WaitTimeout -1s is negative"},
		{"TimeoutAlone", client, redisstore.Config{WaitTimeout: 50 * time.Millisecond},
			"redisstore: Config.WaitTimeout 50ms does nothing without Config.WaitReplicas or Config.WaitAOF"},
		{"TimeoutOverReadTimeout", slow, redisstore.Config{WaitReplicas: 1},
			"redisstore: Config.WaitTimeout 100ms is not below the client's ReadTimeout 100ms: the client would give up on WAIT before it answers"},
		{"Ring", ring, redisstore.Config{WaitReplicas: 1},
			"redisstore: Config.WaitReplicas and WaitAOF are not available on a *redis.Ring: only a *redis.Client (redis.NewClient, redis.NewFailoverClient) sends a pipeline on one connection"},
		{"Cluster", cluster, redisstore.Config{WaitReplicas: 1},
			"redisstore: Config.WaitReplicas and WaitAOF are not available on a *redis.ClusterClient: WAIT has no key, so the cluster client sends it to a node and connection of its choosing, not after the write it should count"},
		{"ClusterWithoutWait", cluster, redisstore.Config{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := redisstore.New(tt.client, tt.cfg)
			if st != nil {
				st.Close()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("New: got %v\nwant %q", err, tt.want)
			}
		})
	}
}

// BenchmarkWaitReplicas is the cost of Config.WaitReplicas: one first
// delivery's store calls (a Claim that stores its claim, then Complete)
// against a private master with one replica on this machine, without
// waiting and waiting for the replica, through each client: one delivery
// at a time ("serial"), and 16 at once ("parallel", where Batch's pipelines
// share a WAIT). Run it with
//
//	go test -run '^$' -bench BenchmarkWaitReplicas -benchtime 2000x -count 5 ./redisstore/
func BenchmarkWaitReplicas(b *testing.B) {
	master := redistest.StartServer(b)
	redistest.StartReplica(b, master.Addr())
	var n atomic.Int64 // numbers the keys
	deliver := func(b *testing.B, st *redisstore.Store) {
		key := "idem:bench:" + strconv.FormatInt(n.Add(1), 10)
		claim := pendingRecord()
		if _, err := st.Claim(context.Background(), key, claim, time.Minute); err != nil {
			b.Error(err)
			return
		}
		if err := st.Complete(context.Background(), key, claim, completedRecord(claim), time.Hour); err != nil {
			b.Error(err)
		}
	}
	for _, mode := range []string{"serial", "parallel"} {
		for _, kind := range waitKinds {
			for _, wait := range []int{0, 1} {
				b.Run(fmt.Sprintf("%s/%s/replicas=%d", mode, kind.name, wait), func(b *testing.B) {
					cfg := redisstore.Config{Prefix: "bench:" + rand.Text() + ":", WaitReplicas: wait}
					if wait > 0 {
						cfg.WaitTimeout = time.Second
					}
					st := kind.store(b, master.Addr(), cfg)
					b.ReportAllocs()
					if mode == "serial" {
						for b.Loop() {
							deliver(b, st)
						}
						return
					}
					b.SetParallelism(8) // 16 goroutines on 2 cores
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							deliver(b, st)
						}
					})
				})
			}
		}
	}
}
