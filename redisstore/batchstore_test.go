package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
)

// tripCounter is a go-redis hook that counts what a client sends: each
// pipeline it executes on a connection (one write of all its commands,
// then the replies: one round trip), and each command sent on its own.
// On a Cluster client it is added to every node's client (OnNewNode), so
// that a pipeline split by node counts once per node, under that node's
// address.
type tripCounter struct {
	mu        sync.Mutex
	pipelines map[string]int // by node address
	singles   map[string]int
}

func newTripCounter() *tripCounter {
	return &tripCounter{pipelines: map[string]int{}, singles: map[string]int{}}
}

// hook returns the hook to add to the client of the node at addr.
func (c *tripCounter) hook(addr string) redis.Hook { return nodeHook{c, addr} }

func (c *tripCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.pipelines)
	clear(c.singles)
}

// counts returns the pipelines and single commands sent since the last
// reset, and the nodes the pipelines went to.
func (c *tripCounter) counts() (pipelines, singles, nodes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.pipelines {
		pipelines += n
	}
	for _, n := range c.singles {
		singles += n
	}
	return pipelines, singles, len(c.pipelines)
}

type nodeHook struct {
	c    *tripCounter
	addr string
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.mu.Lock()
		h.c.singles[h.addr]++
		h.c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.mu.Lock()
		h.c.pipelines[h.addr]++
		h.c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// countedClient returns a client of the server at addr that counts its
// round trips.
func countedClient(tb testing.TB, addr string) (*redis.Client, *tripCounter) {
	c := newTripCounter()
	client := redis.NewClient(&redis.Options{Addr: addr})
	client.AddHook(c.hook(addr))
	tb.Cleanup(func() { client.Close() })
	return client, c
}

// countedCluster returns a Cluster client of addrs whose node clients
// count their round trips.
func countedCluster(tb testing.TB, addrs []string) (*redis.ClusterClient, *tripCounter) {
	c := newTripCounter()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	client.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(c.hook(rdb.Options().Addr)) })
	tb.Cleanup(func() { client.Close() })
	return client, c
}

func batchOps(prefix string, n int) []idemhook.BatchOp {
	ops := make([]idemhook.BatchOp, n)
	for i := range ops {
		ops[i] = idemhook.BatchOp{Key: prefix + strconv.Itoa(i), Claim: pendingRecord()}
	}
	return ops
}

func noOpErrs(tb testing.TB, what string, ops []idemhook.BatchOp) {
	tb.Helper()
	for i, op := range ops {
		if op.Err != nil {
			tb.Fatalf("%s op %d: %v", what, i, op.Err)
		}
	}
}

// commandCalls returns the calls of each command since the last CONFIG
// RESETSTAT, from INFO commandstats, without INFO's own.
func commandCalls(tb testing.TB, client *redis.Client) map[string]int {
	tb.Helper()
	info, err := client.Info(tb.Context(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		if name != "info" {
			calls[name] = n
		}
	}
	return calls
}

// TestBatchRoundTrips measures, on a private server, what each batched
// call of 1,000 ops sends: one pipeline, no command on its own, and on the
// server exactly one command per op (INFO commandstats). A compare-and-set
// batch on a server that has not cached its script costs a second
// pipeline, the EVALs of the scripts.
func TestBatchRoundTrips(t *testing.T) {
	srv := redistest.StartServer(t)
	client, trips := countedClient(t, srv.Addr())
	st, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const n = 1000
	ops := batchOps("idem:rt:", n)
	// A first batch opens the connection the pipelines go out on (a new
	// connection costs go-redis's handshake, HELLO, once).
	if err := st.ClaimBatch(ctx, batchOps("idem:warm:", 1), time.Minute); err != nil {
		t.Fatal(err)
	}
	measure := func(what string, count, wantPipelines int, wantCalls map[string]int, call func() error) {
		t.Helper()
		if err := client.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		trips.reset()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		pipelines, singles, _ := trips.counts()
		calls := commandCalls(t, client)
		t.Logf("%s of %d ops: %d round trips (%d pipelines, %d single commands); server ran %v", what, count, pipelines+singles, pipelines, singles, calls)
		if pipelines != wantPipelines || singles != 0 {
			t.Fatalf("%s of %d ops: %d pipelines and %d single commands; want %d pipelines and none alone", what, count, pipelines, singles, wantPipelines)
		}
		for cmd, want := range wantCalls {
			if calls[cmd] != want {
				t.Fatalf("%s of %d ops: the server ran %s %d times; want %d (all: %v)", what, count, cmd, calls[cmd], want, calls)
			}
		}
	}
	measure("ClaimBatch", n, 1, map[string]int{"set": n}, func() error { return st.ClaimBatch(ctx, ops, time.Minute) })
	noOpErrs(t, "ClaimBatch", ops)
	// The scripts are not cached yet: EVALSHA answers NOSCRIPT, and the
	// EVALs follow in a second pipeline.
	measure("ExtendBatch, scripts not cached", n, 2, map[string]int{"evalsha": n, "eval": n}, func() error { return st.ExtendBatch(ctx, ops, time.Minute) })
	noOpErrs(t, "ExtendBatch", ops)
	measure("ExtendBatch", n, 1, map[string]int{"evalsha": n, "eval": 0}, func() error { return st.ExtendBatch(ctx, ops, time.Minute) })
	noOpErrs(t, "ExtendBatch", ops)
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		ops[i].Done = completedRecord(ops[i].Claim)
	}
	half := ops[:n/2]
	rest := ops[n/2:]
	measure("CompleteBatch, script not cached", n/2, 2, map[string]int{"evalsha": n / 2, "eval": n / 2}, func() error { return st.CompleteBatch(ctx, half, time.Hour) })
	noOpErrs(t, "CompleteBatch", half)
	measure("CompleteBatch", n/2, 1, map[string]int{"evalsha": n / 2, "eval": 0}, func() error { return st.CompleteBatch(ctx, rest, time.Hour) })
	noOpErrs(t, "CompleteBatch", rest)
	// Release: the keys hold completed records now, so every op is
	// refused, each by its own script run.
	measure("ReleaseBatch, script not cached", n, 2, map[string]int{"evalsha": n, "eval": n}, func() error { return st.ReleaseBatch(ctx, ops) })
	measure("ReleaseBatch", n, 1, map[string]int{"evalsha": n, "eval": 0}, func() error { return st.ReleaseBatch(ctx, ops) })
	for i, op := range ops {
		if op.Err == nil {
			t.Fatalf("ReleaseBatch op %d of a completed key: no error", i)
		}
	}
	// A second ClaimBatch finds every record, still in one pipeline.
	again := batchOps("idem:rt:", n)
	measure("ClaimBatch of done keys", n, 1, map[string]int{"set": n}, func() error { return st.ClaimBatch(ctx, again, time.Minute) })
	for i, op := range again {
		if op.Err != nil || op.Existing == nil || op.Existing.State != idemhook.StateCompleted {
			t.Fatalf("ClaimBatch op %d of a done key: %v, %v", i, op.Existing, op.Err)
		}
	}
}

// TestBatchRoundTripsCluster measures a ClaimBatch of 1,000 keys on a
// Cluster of three masters: one pipeline per master, at once, so at most
// three round trips whatever the slots; and keys that share a slot (a
// prefix holding a hash tag) cost one.
func TestBatchRoundTripsCluster(t *testing.T) {
	const masters, n = 3, 1000
	addrs := redistest.StartCluster(t, masters)
	client, trips := countedCluster(t, addrs)
	ctx := t.Context()
	for _, tc := range []struct {
		prefix    string
		wantNodes int
	}{
		{"test:" + rand.Text() + ":", masters}, // 1,000 keys over the slots: every master
		{"{test:" + rand.Text() + "}:", 1},     // one hash tag: one slot, one master
	} {
		st, err := redisstore.New(client, redisstore.Config{Prefix: tc.prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.ClaimBatch(ctx, batchOps("idem:warm:", 10), time.Minute); err != nil {
			t.Fatal(err) // loads the cluster's slots and opens connections
		}
		ops := batchOps("idem:rt:", n)
		trips.reset()
		if err := st.ClaimBatch(ctx, ops, time.Minute); err != nil {
			t.Fatal(err)
		}
		pipelines, singles, nodes := trips.counts()
		t.Logf("ClaimBatch of %d keys under prefix %q on a Cluster of %d masters: %d round trips (%d pipelines to %d nodes, %d single commands)", n, tc.prefix, masters, pipelines+singles, pipelines, nodes, singles)
		if pipelines != tc.wantNodes || nodes != tc.wantNodes || singles != 0 {
			t.Fatalf("ClaimBatch on a Cluster of %d masters: %d pipelines to %d nodes and %d single commands; want one pipeline to each of %d nodes", masters, pipelines, nodes, singles, tc.wantNodes)
		}
		noOpErrs(t, "ClaimBatch", ops)
		for _, op := range ops {
			if op.Existing != nil {
				t.Fatalf("ClaimBatch of a new key %q found %v", op.Key, op.Existing)
			}
		}
		// Every claim is where a single call finds it.
		for _, i := range []int{0, 1, n / 2, n - 1} {
			got, err := st.Get(ctx, ops[i].Key)
			if err != nil || got == nil || got.Token != ops[i].Claim.Token {
				t.Fatalf("Get(%q) after ClaimBatch: %v, %v", ops[i].Key, got, err)
			}
		}
		for i := range ops {
			ops[i].Done = completedRecord(ops[i].Claim)
		}
		trips.reset()
		if err := st.CompleteBatch(ctx, ops, time.Hour); err != nil {
			t.Fatal(err)
		}
		noOpErrs(t, "CompleteBatch", ops)
		pipelines, singles, nodes = trips.counts()
		t.Logf("CompleteBatch of %d keys: %d pipelines to %d nodes, %d single commands", n, pipelines, nodes, singles)
		if pipelines > 2*tc.wantNodes || singles != 0 {
			t.Fatalf("CompleteBatch: %d pipelines and %d single commands; want at most two per node (EVALSHA, and EVAL where the script was not cached)", pipelines, singles)
		}
	}
}

// BenchmarkClaimBatch1000 is a ClaimBatch of 1,000 new keys on the shared
// server, the middleware's largest batch. roundtrips/op is what the go-redis
// hook counted (pipelines and single commands).
func BenchmarkClaimBatch1000(b *testing.B) {
	opts, err := redis.ParseURL(redistest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	trips := newTripCounter()
	client := redis.NewClient(opts)
	client.AddHook(trips.hook(opts.Addr))
	b.Cleanup(func() { client.Close() })
	st := newStore(b, client)
	claim := pendingRecord()
	ops := make([]idemhook.BatchOp, 1000)
	keys := make([]string, len(ops))
	round := 0
	// Open the connection first: its handshake is no part of a batch.
	if err := st.ClaimBatch(b.Context(), batchOps("idem:warm:", 1), time.Minute); err != nil {
		b.Fatal(err)
	}
	trips.reset()
	b.ReportAllocs()
	for b.Loop() {
		round++
		b.StopTimer()
		for i := range ops {
			keys[i] = fmt.Sprintf("idem:bench:%d:%d", round, i)
			ops[i] = idemhook.BatchOp{Key: keys[i], Claim: claim}
		}
		b.StartTimer()
		if err := st.ClaimBatch(b.Context(), ops, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	pipelines, singles, _ := trips.counts()
	b.ReportMetric(float64(pipelines+singles)/float64(round), "roundtrips/op")
}

// TestWaitReplicasBatch is TestWaitReplicas for the batched calls, on each
// client: acknowledged, the replica holds every op's write when the batch
// returns; short, each stored claim is released and each completion stays
// on the master, every such op with the error its single call would have
// returned, while the ops that wrote nothing (a claim that found a record,
// a complete of another's claim) are not judged by the count.
func TestWaitReplicasBatch(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master.Addr())
	mc := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { mc.Close() })
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rc.Close() })
	acked := redisstore.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second}
	short := redisstore.Config{WaitReplicas: 2, WaitTimeout: 20 * time.Millisecond} // there is one replica
	encode := func(r *idemhook.Record) string {
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	get := func(t *testing.T, c *redis.Client, key string) string {
		t.Helper()
		v, err := c.Get(t.Context(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}
	const shortText = "fewer replicas acknowledged the write than Config.WaitReplicas asks: 1 of 2 within 20ms (WAIT)"
	for _, kind := range waitKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			plain := kind.store(t, master.Addr(), redisstore.Config{})
			prefix := "idem:batchwait:" + kind.name + ":"

			st := kind.store(t, master.Addr(), acked)
			ops := batchOps(prefix+"acked:", 20)
			if err := st.ClaimBatch(ctx, ops, time.Minute); err != nil {
				t.Fatal(err)
			}
			noOpErrs(t, "acknowledged ClaimBatch", ops)
			for _, op := range ops {
				if got := get(t, rc, op.Key); got != encode(op.Claim) {
					t.Fatalf("the replica holds %q for %q after ClaimBatch returned, want the claim", got, op.Key)
				}
			}
			for i := range ops {
				ops[i].Done = completedRecord(ops[i].Claim)
			}
			if err := st.CompleteBatch(ctx, ops, time.Hour); err != nil {
				t.Fatal(err)
			}
			noOpErrs(t, "acknowledged CompleteBatch", ops)
			for _, op := range ops {
				if got := get(t, rc, op.Key); got != encode(op.Done) {
					t.Fatalf("the replica holds %q for %q after CompleteBatch returned, want the record", got, op.Key)
				}
			}

			st = kind.store(t, master.Addr(), short)
			// A completed key among new ones: its op finds the record.
			done := batchOps(prefix+"done:", 1)
			if err := plain.ClaimBatch(ctx, done, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := plain.Complete(ctx, done[0].Key, done[0].Claim, completedRecord(done[0].Claim), time.Hour); err != nil {
				t.Fatal(err)
			}
			ops = append(batchOps(prefix+"short:", 5), idemhook.BatchOp{Key: done[0].Key, Claim: pendingRecord()})
			if err := st.ClaimBatch(ctx, ops, time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, op := range ops[:5] {
				want := "redisstore: claim " + op.Key + ": " + shortText + "; the claim was released"
				if op.Err == nil || op.Err.Error() != want || !errors.Is(op.Err, redisstore.ErrReplicasShort) {
					t.Fatalf("short ClaimBatch op: got %v\nwant %q", op.Err, want)
				}
				if v := get(t, mc, op.Key); v != "" {
					t.Fatalf("the master holds %q after a short ClaimBatch, want the claim released", v)
				}
			}
			if last := ops[5]; last.Err != nil || last.Existing == nil || last.Existing.State != idemhook.StateCompleted {
				t.Fatalf("short ClaimBatch op on a completed key: %v, %v; want the record and no error", last.Existing, last.Err)
			}

			ops = batchOps(prefix+"complete:", 4)
			if err := plain.ClaimBatch(ctx, ops, time.Minute); err != nil {
				t.Fatal(err)
			}
			ops[3].Claim = pendingRecord() // not the owner
			for i := range ops {
				ops[i].Done = completedRecord(ops[i].Claim)
			}
			if err := st.CompleteBatch(ctx, ops, time.Hour); err != nil {
				t.Fatal(err)
			}
			for _, op := range ops[:3] {
				want := "redisstore: complete " + op.Key + ": " + shortText + "; the record is written on the master, but a failover now may lose it"
				if op.Err == nil || op.Err.Error() != want || !errors.Is(op.Err, redisstore.ErrReplicasShort) {
					t.Fatalf("short CompleteBatch op: got %v\nwant %q", op.Err, want)
				}
				if v := get(t, mc, op.Key); v != encode(op.Done) {
					t.Fatalf("the master holds %q after a short CompleteBatch, want the record", v)
				}
			}
			if err := ops[3].Err; !errors.Is(err, idemhook.ErrNotOwner) || errors.Is(err, redisstore.ErrReplicasShort) {
				t.Fatalf("CompleteBatch op of another's claim: got %v, want ErrNotOwner alone", err)
			}
		})
	}
}

// TestBatchUnreachable checks that a batch that reaches no server fails as
// a whole: the call's own error, which the middleware applies to every op.
func TestBatchUnreachable(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ops := batchOps("idem:down:", 10)
	if err := st.ClaimBatch(ctx, ops, time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for i := range ops {
		ops[i].Done = completedRecord(ops[i].Claim)
	}
	for name, call := range map[string]func() error{
		"ClaimBatch":    func() error { return st.ClaimBatch(ctx, batchOps("idem:down:new:", 10), time.Minute) },
		"CompleteBatch": func() error { return st.CompleteBatch(ctx, ops, time.Hour) },
		"ReleaseBatch":  func() error { return st.ReleaseBatch(ctx, ops) },
		"ExtendBatch":   func() error { return st.ExtendBatch(ctx, ops, time.Minute) },
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "batch of 10") {
			t.Fatalf("%s against a stopped server: got %v, want the batch's error", name, err)
		}
	}
}
