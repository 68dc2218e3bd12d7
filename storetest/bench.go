package storetest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
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
		keys := newKeySeq()
		claim, done := BenchRecords()
		b.ReportAllocs()
		for b.Loop() {
			if err := DeliverFirst(b.Context(), st, keys.next(), claim, done); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("FirstDeliveryParallel", func(b *testing.B) {
		st := h.New(b)
		claim, done := BenchRecords()
		b.ReportAllocs()
		b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			keys := newKeySeq() // random per goroutine
			for pb.Next() {
				if err := DeliverFirst(b.Context(), st, keys.next(), claim, done); err != nil {
					b.Error(err)
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

// BenchRecords returns a new claim and its completed record, as the
// middleware makes them for a typical small answer: for a store's own
// benchmarks beside [Bench].
func BenchRecords() (claim, done *idemhook.Record) {
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
	claim, done := BenchRecords()
	if err := DeliverFirst(b.Context(), st, key, claim, done); err != nil {
		b.Fatal(err)
	}
	return key
}

// DeliverFirst makes the store calls of a first delivery: the claim (with
// a lease of a minute), which must find nothing, and its completion (kept
// an hour). For a store's own benchmarks and tests beside [Bench], with
// [BenchRecords].
func DeliverFirst(ctx context.Context, st idemhook.Store, key string, claim, done *idemhook.Record) error {
	existing, err := st.Claim(ctx, key, claim, time.Minute)
	if err != nil || existing != nil {
		return fmt.Errorf("Claim(%q): got %s, %v; want nil, nil", key, Describe(existing), err)
	}
	if err := st.Complete(ctx, key, claim, done, time.Hour); err != nil {
		return fmt.Errorf("Complete(%q): %v", key, err)
	}
	return nil
}

// keySeq makes new keys cheaply: a random key whose last 16 hex digits
// count up.
type keySeq struct {
	buf []byte
	i   uint64
}

func newKeySeq() *keySeq { return &keySeq{buf: []byte(benchKeyName())} }

func (s *keySeq) next() string {
	s.i++
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], s.i)
	hex.Encode(s.buf[len(s.buf)-16:], n[:])
	return string(s.buf)
}

// benchKeyName returns a random key shaped "idem:bench:sha256:<64 hex>".
func benchKeyName() string {
	var sum [32]byte
	rand.Read(sum[:])
	return idemhook.StoreKey("bench", "sha256:"+hex.EncodeToString(sum[:]))
}
