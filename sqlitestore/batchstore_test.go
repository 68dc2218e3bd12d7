package sqlitestore_test

import (
	"crypto/rand"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/sqlitestore"
)

func batchOps(n int) []idemhook.BatchOp {
	prefix := "idem:batch:" + rand.Text() + ":"
	ops := make([]idemhook.BatchOp, n)
	for i := range ops {
		ops[i] = idemhook.BatchOp{Key: prefix + strconv.Itoa(i), Claim: pending(rand.Text())}
	}
	return ops
}

// TestBatchCommits counts the commits of the batched calls of 1,000 ops
// (the writer's commit hook runs before each): a batch is one write of the
// writer, one transaction and one commit, where single calls take one
// each. With the claims held in memory, ClaimBatch, ReleaseBatch and
// ExtendBatch commit nothing, and a ClaimBatch of keys that are all done
// is answered by reads alone. Not parallel: the hook sees every store's
// commits.
func TestBatchCommits(t *testing.T) {
	var commits atomic.Int64
	sqlitestore.SetCommitHook(t, func() error { commits.Add(1); return nil })
	const n = 1000
	for _, tc := range []struct {
		name                             string
		open                             func(tb testing.TB) *sqlitestore.Store
		claim, complete, release, extend int64 // commits of each batch
	}{
		{"shared", func(tb testing.TB) *sqlitestore.Store {
			return newStore(tb, openDB(tb, filepath.Join(tb.TempDir(), "idemhook.db")), sqlitestore.Config{SweepInterval: -1})
		}, 1, 1, 1, 1},
		{"held", func(tb testing.TB) *sqlitestore.Store {
			s, _ := heldStore(tb, sqlitestore.Config{SweepInterval: -1})
			s.WaitKeyFilter()
			return s
		}, 0, 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			ctx := t.Context()
			measure := func(what string, ops []idemhook.BatchOp, want int64, call func() error) {
				t.Helper()
				commits.Store(0)
				if err := call(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got := commits.Load()
				t.Logf("%s of %d ops: %d commits", what, len(ops), got)
				if got != want {
					t.Fatalf("%s of %d ops: %d commits, want %d", what, len(ops), got, want)
				}
				for i, op := range ops {
					if op.Err != nil {
						t.Fatalf("%s op %d: %v", what, i, op.Err)
					}
				}
			}
			ops := batchOps(n)
			measure("ClaimBatch", ops, tc.claim, func() error { return s.ClaimBatch(ctx, ops, time.Minute) })
			measure("ExtendBatch", ops, tc.extend, func() error { return s.ExtendBatch(ctx, ops, time.Minute) })
			for i := range ops {
				ops[i].Done = completed(`{"ok":true}`)
			}
			measure("CompleteBatch", ops, tc.complete, func() error { return s.CompleteBatch(ctx, ops, time.Hour) })
			again := append([]idemhook.BatchOp(nil), ops...)
			for i := range again {
				again[i].Claim = pending(rand.Text())
			}
			measure("ClaimBatch of done keys", again, 0, func() error { return s.ClaimBatch(ctx, again, time.Minute) })
			for i, op := range again {
				if op.Existing == nil || op.Existing.State != idemhook.StateCompleted {
					t.Fatalf("ClaimBatch op %d of a done key: found %v", i, op.Existing)
				}
			}
			rel := batchOps(n)
			if err := s.ClaimBatch(ctx, rel, time.Minute); err != nil {
				t.Fatal(err)
			}
			measure("ReleaseBatch", rel, tc.release, func() error { return s.ReleaseBatch(ctx, rel) })
		})
	}
}

// batchBenchStores are the stores the batch benchmarks run on: a file
// shared with other processes (claims in the file) and a file held alone
// (claims in memory).
var batchBenchStores = []struct {
	name string
	open func(tb testing.TB) *sqlitestore.Store
}{
	{"shared", func(tb testing.TB) *sqlitestore.Store {
		return newStore(tb, openDB(tb, filepath.Join(tb.TempDir(), "idemhook.db")), sqlitestore.Config{})
	}},
	{"held", func(tb testing.TB) *sqlitestore.Store {
		s, _ := heldStore(tb, sqlitestore.Config{})
		s.WaitKeyFilter()
		return s
	}},
}

// newClaims sets ops to claims of new keys, the keys of round.
func newClaims(ops []idemhook.BatchOp, round int, claim *idemhook.Record) {
	for i := range ops {
		ops[i] = idemhook.BatchOp{Key: "idem:bench:" + strconv.Itoa(round) + ":" + strconv.Itoa(i), Claim: claim}
	}
}

// BenchmarkClaimBatch1000 is a ClaimBatch of 1,000 new keys, the
// middleware's largest batch: on a file shared with other processes (one
// write of the writer) and held alone (claims in memory, no write).
func BenchmarkClaimBatch1000(b *testing.B) {
	for _, kind := range batchBenchStores {
		b.Run(kind.name, func(b *testing.B) {
			s := kind.open(b)
			claim := pending(rand.Text())
			ops := make([]idemhook.BatchOp, 1000)
			round := 0
			b.ReportAllocs()
			for b.Loop() {
				round++
				b.StopTimer()
				newClaims(ops, round, claim)
				b.StartTimer()
				if err := s.ClaimBatch(b.Context(), ops, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompleteBatch1000 is the CompleteBatch of 1,000 claimed keys
// (the claims, untimed, before each): one write of the writer, on a file
// shared with other processes and held alone.
func BenchmarkCompleteBatch1000(b *testing.B) {
	for _, kind := range batchBenchStores {
		b.Run(kind.name, func(b *testing.B) {
			s := kind.open(b)
			claim := pending(rand.Text())
			done := completed(`{"ok":true}`)
			ops := make([]idemhook.BatchOp, 1000)
			round := 0
			b.ReportAllocs()
			for b.Loop() {
				round++
				b.StopTimer()
				newClaims(ops, round, claim)
				if err := s.ClaimBatch(b.Context(), ops, time.Minute); err != nil {
					b.Fatal(err)
				}
				for i := range ops {
					if ops[i].Existing != nil || ops[i].Err != nil {
						b.Fatalf("ClaimBatch op %d: %v, %v", i, ops[i].Existing, ops[i].Err)
					}
					ops[i].Done = done
				}
				b.StartTimer()
				if err := s.CompleteBatch(b.Context(), ops, time.Hour); err != nil {
					b.Fatal(err)
				}
				for i := range ops {
					if ops[i].Err != nil {
						b.Fatalf("CompleteBatch op %d: %v", i, ops[i].Err)
					}
				}
			}
		})
	}
}
