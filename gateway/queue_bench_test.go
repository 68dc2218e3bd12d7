package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// BenchmarkQueueAccept compares, on SQLite (and on PostgreSQL when
// IDEMHOOK_POSTGRES_URL is set) over loopback HTTP with 32 concurrent
// senders and unique keys, a first delivery through the proxy
// (two hops: the gateway and the backend) with an accept on a queued route
// whose deliveries are held back (rate 0.001/s: one hop and one durable
// append), and with the plain backend as the baseline.
//
//	go test ./gateway/ -run '^$' -bench BenchmarkQueueAccept -benchtime 8000x -count 4
func BenchmarkQueueAccept(b *testing.B) {
	backend := newBenchBackend(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	benchPost(b, client, &seq, "bare-backend", backend+"/hook")
	stores := []struct{ name, line string }{{"sqlite", fmt.Sprintf("{driver: sqlite, path: %q}", filepath.Join(b.TempDir(), "idemhook.db"))}}
	if u := os.Getenv("IDEMHOOK_POSTGRES_URL"); u != "" {
		stores = append(stores, struct{ name, line string }{"postgres", fmt.Sprintf("{driver: postgres, url: %q, table: bench_q_%d}", u, time.Now().UnixNano())})
	}
	for _, st := range stores {
		text := fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /proxy
    upstream: %[2]s/hook
    source: p
    header: x-event-id
  - path: /queue
    upstream: %[2]s/hook
    source: q
    header: x-event-id
    deliver: queue
    queue: {rate: 0.001}
`, st.line, backend)
		url, _, stop := startGateway(b, text)
		benchPost(b, client, &seq, st.name+"/proxy-first", url+"/proxy")
		benchPost(b, client, &seq, st.name+"/queue-accept", url+"/queue")
		stop()
	}
}

// benchPost runs sub-benchmark name: POSTs with unique keys to url from 32
// senders.
func benchPost(b *testing.B, client *http.Client, seq *atomic.Int64, name, url string) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16) // 32 senders on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"type":"order.paid"}`))
				req.Header.Set("X-Event-Id", fmt.Sprint("e", seq.Add(1)))
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body) // read to the end: the connection is reused
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					b.Errorf("%s: %d", name, resp.StatusCode)
					return
				}
			}
		})
	})
}

// newBenchBackend starts a backend that answers 200 at once; it returns its
// URL.
func newBenchBackend(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// BenchmarkQueueSlowBackend measures the time to accept while the backend
// takes 2s per event (the route's 8 attempts are all busy): the provider's
// wait does not depend on the backend. It reports the median and the 99th
// percentile of the accept's latency.
//
//	go test ./gateway/ -run '^$' -bench BenchmarkQueueSlowBackend -benchtime 5000x
func BenchmarkQueueSlowBackend(b *testing.B) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	}))
	b.Cleanup(slow.Close)
	url, _, stop := startGateway(b, gatewaytest.QueueConfig(fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(b.TempDir(), "idemhook.db")), slow.URL, ""))
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			start := time.Now()
			r := postOnce(b, client, url+"/webhooks/test", fmt.Sprint("e", seq.Add(1)))
			d := time.Since(start)
			if r != http.StatusAccepted {
				b.Errorf("accept: %d", r)
				return
			}
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
		}
	})
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// BenchmarkQueueDrain measures how fast a backlog reaches a fast backend:
// b.N events are accepted while the route is paused, then it is resumed and
// the time until the backend has every event is the measure (ns per event,
// and events per second). Compare with the proxy's first deliveries in
// BenchmarkQueueAccept (1e9 / its ns/op per second).
//
//	go test ./gateway/ -run '^$' -bench BenchmarkQueueDrain -benchtime 5000x
//
// With IDEMHOOK_POSTGRES_URL set, it also runs on PostgreSQL (store=postgres),
// in a table of its own.
func BenchmarkQueueDrain(b *testing.B) {
	for _, c := range []int{8, 32} { // the default, and the load's 32 senders
		b.Run(fmt.Sprintf("store=sqlite/concurrency=%d", c), func(b *testing.B) {
			benchDrain(b, c, fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(b.TempDir(), "idemhook.db")))
		})
		url := os.Getenv("IDEMHOOK_POSTGRES_URL")
		if url == "" {
			continue
		}
		b.Run(fmt.Sprintf("store=postgres/concurrency=%d", c), func(b *testing.B) {
			benchDrain(b, c, fmt.Sprintf("driver: postgres, url: %q, table: %s", url, fmt.Sprintf("bench_drain_%d", time.Now().UnixNano())))
		})
	}
}

func benchDrain(b *testing.B, concurrency int, storeLine string) {
	var got atomic.Int64
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	b.Cleanup(fast.Close)
	url, g, stop := startGateway(b, gatewaytest.QueueConfig(storeLine, fast.URL, fmt.Sprint("concurrency: ", concurrency)))
	defer stop()
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if r := postJSON(b, client, admin.URL+"/admin/queue/pause", `{"route":"/webhooks/test"}`); r != http.StatusOK {
		b.Fatalf("pause: %d", r)
	}
	var seq atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				n := seq.Add(1)
				if n > int64(b.N) {
					return
				}
				if r := postOnce(b, client, url+"/webhooks/test", fmt.Sprint("e", n)); r != http.StatusAccepted {
					b.Errorf("accept: %d", r)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow() // an event was not accepted: the drain would wait for it forever
	}
	b.ResetTimer()
	start := time.Now()
	if r := postJSON(b, client, admin.URL+"/admin/queue/resume", `{"route":"/webhooks/test"}`); r != http.StatusOK {
		b.Fatalf("resume: %d", r)
	}
	for got.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

func postOnce(b *testing.B, client *http.Client, url, id string) int {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"type":"order.paid"}`))
	req.Header.Set("X-Event-Id", id)
	resp, err := client.Do(req)
	if err != nil {
		b.Error(err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func postJSON(b *testing.B, client *http.Client, url, body string) int {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
