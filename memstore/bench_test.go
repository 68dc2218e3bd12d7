package memstore_test

import (
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// BenchmarkMemoryPerKey stores 100k typical small responses (key
// "idem:stone:sha256:<64 hex>", status 200, Content-Type: application/json,
// body {"ok":true}) and reports the heap they take per key. The target in docs/design.md
// is 200 bytes, memstore's own 128.
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		var sum [32]byte
		rand.Read(sum[:])
		keys[i] = idemhook.StoreKey("stone", "sha256:"+hex.EncodeToString(sum[:]))
	}
	claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
	done := memstore.TypicalAnswer(time.Now())
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		st, err := memstore.New(memstore.Config{})
		if err != nil {
			b.Fatal(err)
		}
		for _, key := range keys {
			if _, err := st.Claim(b.Context(), key, claim, time.Minute); err != nil {
				b.Fatal(err)
			}
			if err := st.Complete(b.Context(), key, claim, done, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if st.Len() != n {
			b.Fatalf("Len: got %d, want %d", st.Len(), n)
		}
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(st)
	}
	runtime.KeepAlive(keys)
	b.ReportMetric(perKey, "B/key")
}

// BenchmarkFirstDeliveryWhenFull is a first delivery (Claim and Complete of
// a new key) on a store that holds 1M completed records of the same TTL,
// the default MaxEntries: "full" at that bound, the steady state of a
// long-running process with more traffic than its bound, where every new key
// makes room by evicting; "room" the same million with a bound of 2M,
// which evicts nothing. The two differ by the cost of eviction alone.
func BenchmarkFirstDeliveryWhenFull(b *testing.B) {
	const held = memstore.DefaultMaxEntries
	for _, bc := range []struct {
		name       string
		maxEntries int
	}{{"full", held}, {"room", 2 * held}} {
		b.Run(bc.name, func(b *testing.B) {
			st, err := memstore.New(memstore.Config{MaxEntries: bc.maxEntries})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
			done := memstore.TypicalAnswer(time.Now())
			deliver := func() {
				var sum [32]byte
				rand.Read(sum[:])
				key := idemhook.StoreKey("stone", "sha256:"+hex.EncodeToString(sum[:]))
				if _, err := st.Claim(b.Context(), key, claim, time.Minute); err != nil {
					b.Fatal(err)
				}
				if err := st.Complete(b.Context(), key, claim, done, 24*time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			for range held {
				deliver()
			}
			b.ReportAllocs()
			for b.Loop() {
				deliver()
			}
			// A full shard frees 1/16 of itself at a time.
			if got := st.Len(); got > bc.maxEntries || got < held*15/16 {
				b.Fatalf("Len: got %d, want between %d and %d", got, held*15/16, bc.maxEntries)
			}
		})
	}
}
