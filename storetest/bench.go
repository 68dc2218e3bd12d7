package storetest

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// Bench measures the store steps of the middleware's two common paths, so
// every store reports comparable figures.
//
//   - FirstDelivery is Claim on a new key, then Complete (two store calls).
//   - Replay is Claim on a key that holds a completed response (one call).
//   - ReplayParallel is Replay from GOMAXPROCS goroutines at once.
//   - FirstDeliveryParallel is FirstDelivery from 32 goroutines at once, the
//     concurrency of the load comparison. A store that batches concurrent
//     writes shows it here.
//
// The records are those of a typical small webhook answer. They have status
// 200, the header "Content-Type: application/json" and the body
// {"ok":true}, and their keys are shaped "idem:<source>:sha256:<64 hex>".
func Bench(b *testing.B, h Harness) {
	if h.New == nil {
		b.Fatal("storetest: Harness.New is nil")
	}
	b.Run("FirstDelivery", func(b *testing.B) {
		st := h.New(b)
		keyBuf := []byte(benchKeyName())
		claim, done := benchRecords()
		b.ReportAllocs()
		var i uint64
		var n [8]byte
		for b.Loop() {
			// A new key each time: the last 16 hex digits count up.
			i++
			binary.BigEndian.PutUint64(n[:], i)
			hex.Encode(keyBuf[len(keyBuf)-16:], n[:])
			key := string(keyBuf)
			existing, err := st.Claim(b.Context(), key, claim, time.Minute)
			if err != nil || existing != nil {
				b.Fatalf("Claim(%q): got %s, %v; want nil, nil", key, Describe(existing), err)
			}
			if err := st.Complete(b.Context(), key, claim, done, time.Hour); err != nil {
				b.Fatalf("Complete(%q): %v", key, err)
			}
		}
	})
	b.Run("FirstDeliveryParallel", func(b *testing.B) {
		st := h.New(b)
		claim, done := benchRecords()
		b.ReportAllocs()
		b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			keyBuf := []byte(benchKeyName()) // random per goroutine; the tail counts up
			var i uint64
			var n [8]byte
			for pb.Next() {
				i++
				binary.BigEndian.PutUint64(n[:], i)
				hex.Encode(keyBuf[len(keyBuf)-16:], n[:])
				key := string(keyBuf)
				existing, err := st.Claim(b.Context(), key, claim, time.Minute)
				if err != nil || existing != nil {
					b.Errorf("Claim(%q): got %s, %v; want nil, nil", key, Describe(existing), err)
					return
				}
				if err := st.Complete(b.Context(), key, claim, done, time.Hour); err != nil {
					b.Errorf("Complete(%q): %v", key, err)
					return
				}
			}
		})
	})
	b.Run("Replay", func(b *testing.B) {
		st := h.New(b)
		key := benchKey(b, st)
		b.ReportAllocs()
		for b.Loop() {
			existing, err := st.Claim(b.Context(), key, &idemhook.Record{State: idemhook.StatePending, Token: "bench"}, time.Minute)
			if err != nil || existing == nil || existing.State != idemhook.StateCompleted {
				b.Fatalf("Claim on a completed key: got %s, %v", Describe(existing), err)
			}
		}
	})
	b.Run("ReplayParallel", func(b *testing.B) {
		st := h.New(b)
		keys := make([]string, 64)
		for i := range keys {
			keys[i] = benchKey(b, st)
		}
		var next atomic.Uint32
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			key := keys[next.Add(1)%uint32(len(keys))]
			claim := &idemhook.Record{State: idemhook.StatePending, Token: "bench"}
			for pb.Next() {
				existing, err := st.Claim(b.Context(), key, claim, time.Minute)
				if err != nil || existing == nil || existing.State != idemhook.StateCompleted {
					b.Errorf("Claim on a completed key: got %s, %v", Describe(existing), err)
					return
				}
			}
		})
	})
}

// benchRecords returns a claim and its completed record, as the middleware
// makes them for a typical small answer.
func benchRecords() (claim, done *idemhook.Record) {
	claim = newClaim()
	done = &idemhook.Record{
		State:       idemhook.StateCompleted,
		Fingerprint: claim.Fingerprint,
		CreatedAt:   time.Now(),
		Status:      http.StatusOK,
		Header:      http.Header{"Content-Type": {"application/json"}},
		Body:        []byte(`{"ok":true}`),
	}
	return claim, done
}

// benchKey stores a completed record under a new key and returns the key.
func benchKey(b *testing.B, st idemhook.Store) string {
	b.Helper()
	key := benchKeyName()
	claim, done := benchRecords()
	if existing, err := st.Claim(b.Context(), key, claim, time.Minute); err != nil || existing != nil {
		b.Fatalf("Claim(%q): got %s, %v; want nil, nil", key, Describe(existing), err)
	}
	if err := st.Complete(b.Context(), key, claim, done, time.Hour); err != nil {
		b.Fatalf("Complete(%q): %v", key, err)
	}
	return key
}

// benchKeyName returns a random key shaped "idem:bench:sha256:<64 hex>".
func benchKeyName() string {
	var sum [32]byte
	rand.Read(sum[:])
	return idemhook.StoreKey("bench", "sha256:"+hex.EncodeToString(sum[:]))
}
