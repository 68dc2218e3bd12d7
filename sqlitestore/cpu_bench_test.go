//go:build unix

package sqlitestore_test

import (
	"crypto/rand"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/proccpu"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/idemhook/idemhook/storetest"
)

// BenchmarkStoreCPU reports the CPU time the process spends per store call
// sequence ("cpu-µs/op", user plus system, from getrusage), besides the
// wall time and allocations, from 32 goroutines as the gateway's handlers
// call it. On a group-committing store the wall time per op is the
// writer's, bounded by its one goroutine; the CPU per op is what a
// delivery takes from the gateway's cores.
//
//   - first: Claim of a new key (which finds nothing) and its Complete. The
//     keys are spread over the key space, as the hashes of bodies are.
//   - replay-file: Claim of a completed key, answered from the file.
//   - replay-cache: the same, answered from the records kept in memory
//     (Config.CacheBytes; held alone only).
//
// "locked" is the gateway's store: the file held alone (Config.Lock, claims
// in memory, the key filter), a read pool (Config.Reader), and 32 MiB of
// cached records for replay-cache (none for first and replay-file, so that
// the file answers). "shared" keeps its claims in the file, with a read
// pool. "locked-sql" and "shared-sql" are the same two on pools that Open
// and OpenReader didn't make, with the same settings: every statement runs
// through database/sql, none raw (raw.go), which is what the raw path
// saves.
func BenchmarkStoreCPU(b *testing.B) {
	type kind struct {
		name  string
		open  func(b *testing.B, cacheBytes int) *sqlitestore.Store
		cache bool
	}
	locked := func(sqlPath bool) func(b *testing.B, cacheBytes int) *sqlitestore.Store {
		return func(b *testing.B, cacheBytes int) *sqlitestore.Store {
			path := filepath.Join(b.TempDir(), "idemhook.db")
			lock := lockFile(b, path)
			db, reader := benchPools(b, path, sqlPath)
			s := newStore(b, db, sqlitestore.Config{Lock: lock, Reader: reader, CacheBytes: cacheBytes})
			wantStatements(b, s, sqlPath)
			s.WaitKeyFilter()
			return s
		}
	}
	shared := func(sqlPath bool) func(b *testing.B, cacheBytes int) *sqlitestore.Store {
		return func(b *testing.B, _ int) *sqlitestore.Store {
			db, reader := benchPools(b, filepath.Join(b.TempDir(), "idemhook.db"), sqlPath)
			s := newStore(b, db, sqlitestore.Config{Reader: reader})
			wantStatements(b, s, sqlPath)
			return s
		}
	}
	kinds := []kind{
		{"locked", locked(false), true},
		{"shared", shared(false), false},
		{"locked-sql", locked(true), false},
		{"shared-sql", shared(true), false},
	}
	run := func(b *testing.B, body func(pb *testing.PB)) {
		b.ReportAllocs()
		b.SetParallelism(16)
		start := proccpu.Used()
		b.ResetTimer()
		b.RunParallel(body)
		b.StopTimer()
		b.ReportMetric(float64((proccpu.Used()-start).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}
	for _, k := range kinds {
		b.Run(k.name+"/first", func(b *testing.B) {
			st := k.open(b, 0)
			prefix := cpuBenchPrefix()
			var seq atomic.Uint64
			run(b, func(pb *testing.PB) {
				claim, done := storetest.BenchRecords()
				for pb.Next() {
					// Spread over the key space, as hashes of bodies are, so
					// that each insert lands on a page of its own.
					key := prefix + strconv.FormatUint(sqlitestore.Mix64(seq.Add(1)), 16)
					if err := storetest.DeliverFirst(b.Context(), st, key, claim, done); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		replay := func(b *testing.B, cacheBytes int) {
			st := k.open(b, cacheBytes)
			keys := make([]string, 64)
			prefix := cpuBenchPrefix()
			claim, done := storetest.BenchRecords()
			for i := range keys {
				keys[i] = prefix + strconv.Itoa(i)
				if _, err := st.Claim(b.Context(), keys[i], claim, time.Minute); err != nil {
					b.Fatal(err)
				}
				if err := st.Complete(b.Context(), keys[i], claim, done, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			if cacheBytes > 0 {
				if n, _ := st.Cached(); n != len(keys) {
					b.Fatalf("%d records cached, want %d", n, len(keys))
				}
			}
			var next atomic.Uint32
			run(b, func(pb *testing.PB) {
				key := keys[next.Add(1)%uint32(len(keys))]
				claim, _ := storetest.BenchRecords()
				for pb.Next() {
					existing, err := st.Claim(b.Context(), key, claim, time.Minute)
					if err != nil || existing == nil || existing.State != idemhook.StateCompleted {
						b.Errorf("Claim(%q) of a completed key: got %v, %v", key, existing, err)
						return
					}
				}
			})
		}
		b.Run(k.name+"/replay-file", func(b *testing.B) { replay(b, 0) })
		if k.cache {
			b.Run(k.name+"/replay-cache", func(b *testing.B) { replay(b, 32<<20) })
		}
	}
}

// cpuBenchPrefix is a new key prefix shaped as the middleware's keys.
func cpuBenchPrefix() string {
	return idemhook.StoreKey("bench", "sha256:"+rand.Text()+":")
}
