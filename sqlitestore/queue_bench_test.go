package sqlitestore_test

import (
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/queue"
	"github.com/idemhook/idemhook/sqlitestore"
)

// BenchmarkQueueAccept measures Accept (the key's completion and the
// event's append in one writer transaction) after a Claim, from 32
// goroutines, on an empty queue and on one that holds a million events,
// with the heap after the run. Claim measures claiming 8 due events while
// the million wait.
//
//	go test ./sqlitestore/ -run '^$' -bench BenchmarkQueue -benchtime 20000x
func BenchmarkQueueAccept(b *testing.B) {
	for _, depth := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("queued=%d", depth), func(b *testing.B) {
			s, _ := heldStore(b, sqlitestore.Config{})
			q := openQueue(b, s)
			if depth > 0 {
				if err := q.FillQueue(b.Context(), "deep", depth); err != nil {
					b.Fatal(err)
				}
			}
			var seq atomic.Int64
			body := []byte(`{"id":"evt_1","type":"order.paid","data":{"amount":1000}}`)
			header := http.Header{"Content-Type": {"application/json"}, "X-Forwarded-For": {"127.0.0.1"}}
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprint("idem:bench:", seq.Add(1))
					claim := &idemhook.Record{State: idemhook.StatePending, Token: key, CreatedAt: time.Now()}
					if _, err := s.Claim(b.Context(), key, claim, time.Minute); err != nil {
						b.Error(err)
						return
					}
					done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: 202, Body: []byte(`{"status":"accepted"}`)}
					ev := &queue.Event{Route: "deep", Key: key, Method: "POST", Target: "/hook", Header: header, Body: body, ReceivedAt: time.Now()}
					if err := q.Accept(b.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: 96 * time.Hour}, ev); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
		})
	}
}

func BenchmarkQueueClaim(b *testing.B) {
	for _, depth := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("queued=%d", depth), func(b *testing.B) { benchClaim(b, depth) })
	}
}

func benchClaim(b *testing.B, depth int) {
	s, _ := heldStore(b, sqlitestore.Config{})
	q := openQueue(b, s)
	if err := q.FillQueue(b.Context(), "deep", depth); err != nil {
		b.Fatal(err)
	}
	// A due event per claim, accepted behind the million that wait.
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		key := fmt.Sprint("idem:claim:", time.Now().UnixNano())
		claim := &idemhook.Record{State: idemhook.StatePending, Token: key, CreatedAt: time.Now()}
		if _, err := s.Claim(b.Context(), key, claim, time.Minute); err != nil {
			b.Fatal(err)
		}
		done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: 202}
		ev := &queue.Event{Route: "deep", Key: key, Method: "POST", Target: "/hook", ReceivedAt: time.Now()}
		if err := q.Accept(b.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		evs, err := q.Claim(b.Context(), "deep", 8, time.Minute, "bench")
		if err != nil || len(evs) != 1 {
			b.Fatalf("Claim = %d events, %v; want the one due", len(evs), err)
		}
		b.StopTimer()
		if err := q.Settle(b.Context(), queue.Settlement{Token: evs[0].Token(), Verdict: queue.Delivered}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
