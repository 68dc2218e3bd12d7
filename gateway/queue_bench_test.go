package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkQueueAccept compares, on SQLite over loopback HTTP with 32
// concurrent senders and unique keys, a first delivery through the proxy
// (two hops: the gateway and the backend) with an accept on a queued route
// whose deliveries are held back (rate 0.001/s: one hop and one durable
// append), and with the plain backend as the baseline.
//
//	go test ./gateway/ -run '^$' -bench BenchmarkQueueAccept -benchtime 5000x
func BenchmarkQueueAccept(b *testing.B) {
	backend := newBenchBackend(b)
	dir := b.TempDir()
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
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
`, filepath.Join(dir, "idemhook.db"), backend)
	url, _, _ := startGateway(b, text)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	for _, c := range []struct{ name, url string }{
		{"bare-backend", backend + "/hook"},
		{"proxy-first", url + "/proxy"},
		{"queue-accept", url + "/queue"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16) // 32 senders on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(`{"type":"order.paid"}`))
					req.Header.Set("X-Event-Id", fmt.Sprint("e", seq.Add(1)))
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body) // read to the end: the connection is reused
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						b.Errorf("%s: %d", c.name, resp.StatusCode)
						return
					}
				}
			})
		})
	}
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
