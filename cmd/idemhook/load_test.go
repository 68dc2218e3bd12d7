package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook/internal/pgtest"
)

// The load comparison behind docs/benchmarks.md. It is off by default (it
// takes about a minute and wants the machine to itself):
//
//	IDEMHOOK_REDIS_URL=redis://127.0.0.1:6379/0 IDEMHOOK_POSTGRES_URL=postgres://... \
//	  go test ./cmd/idemhook -run TestLoadComparison -count=1 -v -load
var (
	loadRun      = flag.Bool("load", false, "run TestLoadComparison (the gateway's load comparison on loopback)")
	loadDuration = flag.Duration("load.duration", 3*time.Second, "load comparison: time bound of each measurement")
	loadRequests = flag.Int("load.requests", 200000, "load comparison: request bound of each measurement")
	loadConc     = flag.Int("load.concurrency", 32, "load comparison: concurrent senders")
	loadRounds   = flag.Int("load.rounds", 3, "load comparison: rounds per setup (the median round is reported)")
	loadOnly     = flag.String("load.only", "", "load comparison: only the gateway rows whose name contains this")
	loadPGParams = flag.String("load.pg", "", "load comparison: PostgreSQL gateway rows, as URL parameters added to IDEMHOOK_POSTGRES_URL, one row per ';'-separated set (e.g. \"pool_max_conns=16;pool_max_conns=16&synchronous_commit=off\"); the row with none always runs")
)

// loadResult is one measurement.
type loadResult struct {
	name     string
	requests int
	errors   int
	elapsed  time.Duration
	p50, p99 time.Duration
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// measure sends requests to target with *loadConc senders until
// *loadRequests were sent or *loadDuration passed. body(base+n) is the body
// of request n.
func measure(t *testing.T, name, target string, base int64, body func(n int64) string) loadResult {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: *loadConc * 2, MaxIdleConnsPerHost: *loadConc * 2, DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	send := func(n int64) (time.Duration, bool) {
		start := time.Now()
		resp, err := client.Post(target, "application/json", strings.NewReader(body(n)))
		if err != nil {
			return time.Since(start), false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start), resp.StatusCode == http.StatusOK
	}
	var seq atomic.Int64
	for i := range int64(200) { // warm-up; its bodies never collide with measured ones
		send(base + 1<<30 + i)
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []time.Duration
		errs     atomic.Int64
		deadline = time.Now().Add(*loadDuration)
	)
	start := time.Now()
	for range *loadConc {
		wg.Go(func() {
			lat := make([]time.Duration, 0, *loadRequests / *loadConc + 1)
			for time.Now().Before(deadline) {
				n := seq.Add(1)
				if n > int64(*loadRequests) {
					break
				}
				d, ok := send(base + n)
				if !ok {
					errs.Add(1)
				}
				lat = append(lat, d)
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(all)
	r := loadResult{name: name, requests: len(all), errors: int(errs.Load()), elapsed: elapsed}
	if len(all) > 0 {
		r.p50 = all[len(all)*50/100]
		r.p99 = all[len(all)*99/100]
	}
	return r
}

func TestLoadComparison(t *testing.T) {
	if !*loadRun {
		t.Skip("the load comparison runs with -load (see docs/benchmarks.md)")
	}
	// The upstream: reads the body, answers a small JSON document.
	upSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	})}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upSrv.Serve(upLn)
	t.Cleanup(func() { upSrv.Close() })
	upURL := "http://" + upLn.Addr().String()

	// Reverse proxies: one hop, no idempotency. "plain" is what the few
	// lines of the httputil documentation give (http.DefaultTransport: two
	// idle connections per host; a new 32 KiB copy buffer per response);
	// "tuned" has the gateway's own transport and buffer pool, so the
	// difference to the gateway is the idempotency layer alone.
	target, _ := url.Parse(upURL)
	startProxy := func(rt http.RoundTripper, bufs httputil.BufferPool) string {
		srv := &http.Server{Handler: &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.SetXForwarded()
			},
			Transport:  rt,
			BufferPool: bufs,
		}}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return "http://" + ln.Addr().String() + "/hook"
	}
	plainURL := startProxy(http.DefaultTransport, nil)
	tunedURL := startProxy(newTransport(30*time.Second), newBufferPool())

	unique := func(n int64) string {
		return fmt.Sprintf(`{"id":"evt_%d","type":"order.paid","amount":1234}`, n)
	}
	same := func(int64) string { return `{"id":"evt_replayed","type":"order.paid","amount":1234}` }

	redisURL := os.Getenv("IDEMHOOK_REDIS_URL")
	prefix := fmt.Sprintf("idemhook-load-%d:", time.Now().UnixNano())
	dir := t.TempDir()
	gateways := []struct{ name, store, audit string }{
		{"gateway, memory", "{driver: memory}", "none"},
		{"gateway, SQLite", fmt.Sprintf("{driver: sqlite, path: %q}", filepath.Join(dir, "a.db")), "none"},
		{"gateway, SQLite + SQLite audit (default config)", fmt.Sprintf("{driver: sqlite, path: %q}", filepath.Join(dir, "b.db")), "sqlite"},
		{"gateway, Redis", fmt.Sprintf("{driver: redis, url: %q, prefix: %q}", redisURL, prefix), "none"},
	}
	if redisURL == "" {
		t.Log("IDEMHOOK_REDIS_URL is not set: no Redis row")
		gateways = gateways[:3]
	} else {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			t.Fatal(err)
		}
		client := redis.NewClient(opts)
		t.Cleanup(func() {
			ctx := context.Background()
			iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
				if len(keys) == 1000 {
					client.Del(ctx, keys...)
					keys = keys[:0]
				}
			}
			if len(keys) > 0 {
				client.Del(ctx, keys...)
			}
			client.Close()
		})
	}

	if pgURL := os.Getenv(pgtest.EnvVar); pgURL == "" {
		t.Log(pgtest.EnvVar + " is not set: no PostgreSQL row")
	} else {
		pool := pgtest.Pool(t)
		variants := []string{""}
		if *loadPGParams != "" {
			variants = append(variants, strings.Split(*loadPGParams, ";")...)
		}
		for _, params := range variants {
			name, u := "gateway, PostgreSQL", pgURL
			if params != "" {
				sep := "?"
				if strings.Contains(u, "?") {
					sep = "&"
				}
				name, u = name+" ("+params+")", u+sep+params
			}
			table := pgtest.Table(t, pool, "idemhook_load")
			gateways = append(gateways, struct{ name, store, audit string }{
				name, fmt.Sprintf("{driver: postgres, url: %q, table: %s}", u, table), "none"})
		}
	}

	// Every setup runs, round-robin, *loadRounds times; each row reports the
	// round with the median throughput. Interleaving spreads the noise of a
	// shared machine over every setup instead of penalizing whichever ran
	// while something else was busy.
	type setup struct {
		name, url string
		body      func(int64) string
		replay    bool
	}
	setups := []setup{
		{"upstream alone", upURL + "/hook", unique, false},
		{"plain httputil.ReverseProxy (http.DefaultTransport)", plainURL, unique, false},
		{"httputil.ReverseProxy, the gateway's transport and buffer pool", tunedURL, unique, false},
	}
	for _, gwc := range gateways {
		if !strings.Contains(gwc.name, *loadOnly) {
			continue
		}
		cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin: {listen: "off"}
audit: {sink: %s}
log: {level: error}
routes:
  - path: /hook
    upstream: %s/hook
    source: load
    ttl: 10m
`, gwc.store, gwc.audit, upURL)
		g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
		setups = append(setups, setup{gwc.name, g.url("/hook"), unique, false}, setup{gwc.name, g.url("/hook"), same, true})
	}
	rounds := make([][]loadResult, len(setups))
	for round := range *loadRounds {
		for i, s := range setups {
			rounds[i] = append(rounds[i], measure(t, s.name, s.url, int64(round)<<32, s.body))
		}
	}
	median := func(rs []loadResult) loadResult {
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b loadResult) int { return cmp.Compare(a.rps(), b.rps()) })
		return rs[len(rs)/2]
	}
	var results, replays []loadResult
	for i, s := range setups {
		if s.replay {
			replays = append(replays, median(rounds[i]))
		} else {
			results = append(results, median(rounds[i]))
		}
	}
	plain, tuned := results[1], results[2]

	var b strings.Builder
	fmt.Fprintf(&b, "\n%s %s/%s, GOMAXPROCS=%d, %d senders, each run bounded by %d requests or %s, median of %d interleaved rounds\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), *loadConc, *loadRequests, *loadDuration, *loadRounds)
	table := func(title string, rs []loadResult) {
		fmt.Fprintf(&b, "%s\n\n| setup | requests | errors | req/s | p50 | p99 | vs plain proxy | vs tuned proxy |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", title)
		for _, r := range rs {
			fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %s | %s | %.2fx | %.2fx |\n", r.name, r.requests, r.errors, r.rps(),
				r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.rps()/plain.rps(), r.rps()/tuned.rps())
		}
		b.WriteString("\n")
	}
	table("First deliveries (every body new):", results)
	table("Replays (one body, stored once, answered by the gateway):", append([]loadResult{plain, tuned}, replays...))
	t.Log(b.String())
	for _, r := range append(results, replays...) {
		if r.errors > 0 {
			t.Errorf("%s: %d requests did not get 200", r.name, r.errors)
		}
	}
}
