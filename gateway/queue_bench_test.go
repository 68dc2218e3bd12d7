package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
