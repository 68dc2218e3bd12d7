package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/jackc/pgx/v5"
)

// BenchmarkQueueAccept compares, on SQLite (and on PostgreSQL when
// IDEMHOOK_POSTGRES_URL is set) over loopback HTTP with 32 concurrent
// senders and unique keys, a first delivery through the proxy
// (two hops: the gateway and the backend) with an accept on a queued route
// whose deliveries are held back (rate 0.001/s: one hop and one durable
// append), and with the plain backend as the baseline.
//
// Its rows fan-out/... accept, on a store of their own, bodies of 2 KiB and
// 256 KiB on a queued route with an upstream, with one destination and with
// three destinations without filters (every event is kept three times),
// every lane paused (nothing is delivered); benchFanOut says what they
// report.
//
//	go test ./gateway/ -run '^$' -bench BenchmarkQueueAccept -benchtime 8000x -count 4
func BenchmarkQueueAccept(b *testing.B) {
	backend := newBenchBackend(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var seq atomic.Int64
	benchPost(b, client, &seq, "bare-backend", backend+"/hook", smallBody)
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
		benchPost(b, client, &seq, st.name+"/proxy-first", url+"/proxy", smallBody)
		benchPost(b, client, &seq, st.name+"/queue-accept", url+"/queue", smallBody)
		stop()
	}
	for _, st := range []string{"sqlite", "postgres"} {
		for _, dests := range []string{"upstream", "1", "3"} {
			for _, size := range []int{2 << 10, 256 << 10} {
				b.Run(fmt.Sprintf("fan-out/store=%s/dests=%s/body=%dKiB", st, dests, size>>10), func(b *testing.B) {
					benchFanOut(b, client, &seq, st, backend, dests, size)
				})
			}
		}
	}
}

// smallBody is the body the rows other than fan-out/... send.
var smallBody = []byte(`{"type":"order.paid"}`)

// benchFanOut runs a fan-out/... row of BenchmarkQueueAccept: a gateway on
// a fresh store (a SQLite file, or PostgreSQL tables dropped at the end)
// with one queued route /fan, every lane of it paused (the dispatcher
// delivers nothing), sending to backend as its upstream (dests "upstream")
// or to dests destinations without filters, accepts b.N bodies of size bytes
// from 32 senders. The body is JSON around base64 of random bytes, which
// PostgreSQL's pglz does not compress: the worst case for the copies.
//
// On PostgreSQL it also reports, over the b.N accepts, the WAL the server
// wrote per accept (pg_current_wal_lsn before and after: the whole server's,
// so another client's writes are counted too), the bytes of the queue's and
// the keys' tables, their indexes and TOAST per accept
// (pg_total_relation_size), and the queue rows per accept.
func benchFanOut(b *testing.B, client *http.Client, seq *atomic.Int64, store, backend, dests string, size int) {
	var storeLine, table, pgURL string
	switch store {
	case "sqlite":
		storeLine = fmt.Sprintf("{driver: sqlite, path: %q}", filepath.Join(b.TempDir(), "idemhook.db"))
	default:
		if pgURL = os.Getenv("IDEMHOOK_POSTGRES_URL"); pgURL == "" {
			b.Skip("IDEMHOOK_POSTGRES_URL is unset; set it to run the PostgreSQL rows")
		}
		table = fmt.Sprintf("bench_fan_%d", time.Now().UnixNano())
		// timeout: 32 senders of 256 KiB wait for one another's writes longer
		// than the default 250ms, and a claim beyond it is answered 503.
		storeLine = fmt.Sprintf("{driver: postgres, url: %q, table: %s, timeout: 10s}", pgURL, table)
	}
	to := "    upstream: " + backend + "/hook\n"
	pause := []string{`{"route":"/fan"}`}
	if dests != "upstream" {
		n, _ := strconv.Atoi(dests)
		to, pause = "    destinations:\n", nil
		for i := range n {
			to += fmt.Sprintf("      - {name: d%d, upstream: %s/hook%d}\n", i, backend, i)
			pause = append(pause, fmt.Sprintf(`{"route":"/fan","destination":"d%d"}`, i))
		}
	}
	url, g, stop := startGateway(b, fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /fan
    source: f
    header: x-event-id
    max_body: 1MiB
    deliver: queue
%s`, storeLine, to))
	defer stop()
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	for _, lane := range pause {
		if r := postJSON(b, client, admin.URL+"/admin/queue/pause", lane); r != http.StatusOK {
			b.Fatalf("pause %s: %d", lane, r)
		}
	}
	var conn *pgx.Conn
	if pgURL != "" {
		var err error
		if conn, err = pgx.Connect(b.Context(), pgURL); err != nil {
			b.Fatal(err)
		}
		defer conn.Close(context.Background()) //nolint:errcheck
		b.Cleanup(func() { dropBenchTables(b, pgURL, table) })
	}
	body := benchBody(size)
	var lsn string
	if conn != nil {
		if err := conn.QueryRow(b.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	postParallel(b, client, seq, url+"/fan", body)
	b.StopTimer()
	if conn == nil || b.Failed() {
		return
	}
	var wal, stored, rows float64
	q := pgx.Identifier{table}.Sanitize()
	qq := pgx.Identifier{table + "_queue"}.Sanitize()
	err := conn.QueryRow(b.Context(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8,
		(pg_total_relation_size($2::regclass) + pg_total_relation_size($3::regclass))::float8,
		(SELECT count(*) FROM `+qq+`)::float8`, lsn, q, qq).Scan(&wal, &stored, &rows)
	if err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(wal/n, "WAL-B/accept")
	b.ReportMetric(stored/n, "table-B/accept")
	b.ReportMetric(rows/n, "rows/accept")
}

// dropBenchTables drops the keys' table table and its queue's tables.
func dropBenchTables(b *testing.B, pgURL, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		b.Errorf("dropping the benchmark's tables %s*: %v", table, err)
		return
	}
	defer conn.Close(ctx) //nolint:errcheck
	for _, suffix := range []string{"_queue_attempts", "_queue_routes", "_queue", ""} {
		if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{table + suffix}.Sanitize()); err != nil {
			b.Errorf("dropping the benchmark's table %s%s: %v", table, suffix, err)
		}
	}
}

// benchBody returns a JSON body of size bytes: an event type and base64 of
// random bytes.
func benchBody(size int) []byte {
	head, tail := `{"type":"order.paid","data":"`, `"}`
	raw := make([]byte, size)
	rand.Read(raw)
	return []byte(head + base64.StdEncoding.EncodeToString(raw)[:size-len(head)-len(tail)] + tail)
}

// benchPost runs sub-benchmark name: POSTs of body with unique keys to url
// from 32 senders.
func benchPost(b *testing.B, client *http.Client, seq *atomic.Int64, name, url string, body []byte) {
	b.Run(name, func(b *testing.B) { postParallel(b, client, seq, url, body) })
}

// postParallel POSTs body b.N times with unique keys to url from 32
// senders; every answer must be a 2xx.
func postParallel(b *testing.B, client *http.Client, seq *atomic.Int64, url string, body []byte) {
	b.ReportAllocs()
	b.SetParallelism(16) // 32 senders on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("X-Event-Id", fmt.Sprint("e", seq.Add(1)))
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body) // read to the end: the connection is reused
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				b.Errorf("%s: %d", url, resp.StatusCode)
				return
			}
		}
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
