package load

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
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/proccpu"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/tests/internal/testgw"
)

// The one load command of the repository, behind docs/benchmarks.md. It is
// off by default (it takes a minute or two and wants the machine to itself):
//
//	cd tests && IDEMHOOK_REDIS_URL=redis://127.0.0.1:6379/0 IDEMHOOK_POSTGRES_URL=postgres://... \
//	  go test ./load -run TestLoadComparison -count=1 -v -load
//
// In one process, on loopback, it measures two groups in interleaved rounds.
//
//   - The gateway rows are the upstream alone, a plain httputil.ReverseProxy
//     with a pooled transport, and the gateway on each store (memory,
//     SQLite, SQLite with its audit trail, Redis, PostgreSQL).
//   - The library rows are a bare net/http handler, and the same handler
//     behind the middleware on memory and on Redis (through go-redis, with
//     and Unbatched, and through rueidis). Beside them, the peer: a bare
//     Fiber handler, and the same handler behind Fiber's idempotency
//     middleware on memory and on Redis (fiber_test.go), each against the
//     bare Fiber handler.
//
// Each row is measured for first deliveries (every body new) and for
// replays (one body over and over). The test prints the ratios to the
// baseline measured in the same round (the pooled proxy, a bare handler),
// as their median and their spread over the rounds, and the CPU time the
// process spent per request beside its baseline's: the senders run in the
// process for both, so the difference is what the row's setup costs a
// request (the servers of Redis and PostgreSQL are other processes, not
// counted). With -load.chart it draws the ratios into a PNG.
var (
	loadRun      = flag.Bool("load", false, "run TestLoadComparison (the load comparison on loopback)")
	loadDuration = flag.Duration("load.duration", 2*time.Second, "load comparison: time bound of each measurement")
	loadRequests = flag.Int("load.requests", 200000, "load comparison: request bound of each measurement")
	loadConc     = flag.Int("load.concurrency", 32, "load comparison: concurrent senders")
	loadRounds   = flag.Int("load.rounds", 3, "load comparison: interleaved rounds of every setup (medians and spreads are over them)")
	loadOnly     = flag.String("load.only", "", "load comparison: only the rows whose name contains this, and the baselines they need (the proxy and the bare net/http handler always run; the bare Fiber handler with a Fiber row)")
	loadPGParams = flag.String("load.pg", "", "load comparison: PostgreSQL gateway rows, as URL parameters added to IDEMHOOK_POSTGRES_URL, one row per ';'-separated set (e.g. \"pool_max_conns=16;pool_max_conns=16&synchronous_commit=off\"); the row with none always runs")
	loadProfile  = flag.String("load.cpuprofile", "", "load comparison: write a CPU profile of each gateway and middleware row's last round into this directory (the senders run in the same process: focus on ServeHTTP)")
	loadChart    = flag.String("load.chart", "", "load comparison: write the ratios as a PNG chart to this file (e.g. ../../docs/benchmarks-load.png)")
)

// loadResult is one measurement.
type loadResult struct {
	requests int
	errors   int
	elapsed  time.Duration
	p50, p99 time.Duration
	// cpu is the CPU time the whole process used meanwhile: senders,
	// servers, gateways, middleware (not Redis's or PostgreSQL's).
	cpu time.Duration
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// cpuPerRequest is the process's CPU time per request, in microseconds.
func (r loadResult) cpuPerRequest() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / float64(r.requests)
}

// loadBody is a 100-byte JSON event. Every n gives a different one.
func loadBody(n int64) string {
	s := `{"id":"evt_` + strconv.FormatInt(n, 36) + `","type":"payment.succeeded","data":{"amount":1000,"currency":"BRL"}}`
	return s + strings.Repeat(" ", max(0, 100-len(s)))
}

func sameBody(int64) string { return loadBody(-1) }

// measure sends requests to target with *loadConc senders until
// *loadRequests were sent or *loadDuration passed. body(base+n) is the body
// of request n; unless key is nil, key(base+n) is its X-Idempotency-Key
// header (the Fiber rows' key).
func measure(target string, base int64, body, key func(n int64) string) loadResult {
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: *loadConc * 2, MaxIdleConnsPerHost: *loadConc * 2, DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	send := func(n int64) (time.Duration, bool) {
		start := time.Now()
		req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(body(n)))
		if err != nil {
			return time.Since(start), false
		}
		req.Header.Set("Content-Type", "application/json")
		if key != nil {
			req.Header.Set(fiberKeyHeader, key(n))
		}
		resp, err := client.Do(req)
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
	start, cpu := time.Now(), proccpu.Used()
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
	elapsed, cpu := time.Since(start), proccpu.Used()-cpu
	slices.Sort(all)
	r := loadResult{requests: len(all), errors: int(errs.Load()), elapsed: elapsed, cpu: cpu}
	if len(all) > 0 {
		r.p50 = all[len(all)*50/100]
		r.p99 = all[len(all)*99/100]
	}
	return r
}

// serveLoopback serves h on a free loopback port until the test ends and
// returns its base URL.
func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// loadRow is one setup under one traffic, measured once per round.
type loadRow struct {
	group    string // "gateway" or "library"
	name     string
	replay   bool
	url      string
	baseline *loadRow // nil for a baseline
	// key gives request n its X-Idempotency-Key header; nil for the rows
	// whose key is the body (every row but Fiber's).
	key    func(n int64) string
	rounds []loadResult
}

func (r *loadRow) traffic() string {
	if r.replay {
		return "replays"
	}
	return "first deliveries"
}

// ratios returns r's throughput over its baseline's, round by round.
func (r *loadRow) ratios() []float64 {
	out := make([]float64, len(r.rounds))
	for i, m := range r.rounds {
		out[i] = m.rps() / r.baseline.rounds[i].rps()
	}
	return out
}

func medianOf(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// extraCPU returns r's CPU time per request over its baseline's, in
// microseconds, round by round. The senders run in the process for both,
// so the difference is what r's setup adds to a request: the middleware,
// the gateway's idempotency layer, the store's client.
func (r *loadRow) extraCPU() []float64 {
	out := make([]float64, len(r.rounds))
	for i, m := range r.rounds {
		out[i] = m.cpuPerRequest() - r.baseline.rounds[i].cpuPerRequest()
	}
	return out
}

// medianRound is the round with the median throughput.
func (r *loadRow) medianRound() loadResult {
	rs := slices.Clone(r.rounds)
	slices.SortFunc(rs, func(a, b loadResult) int { return cmp.Compare(a.rps(), b.rps()) })
	return rs[len(rs)/2]
}

func TestLoadComparison(t *testing.T) {
	if !*loadRun {
		t.Skip("the load comparison runs with -load (see docs/benchmarks.md)")
	}
	if *loadRounds < 1 || *loadConc < 1 || *loadRequests < 1 || *loadDuration <= 0 {
		t.Fatal("-load.rounds, -load.concurrency, -load.requests and -load.duration must be positive")
	}
	// The upstream, and the library's bare handler: read the body, answer a
	// small JSON document.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	})
	upURL := serveLoopback(t, handler)

	// The reverse proxy: one hop, no idempotency, with the settings of the
	// gateway's pooled transport and buffer pool (gateway/proxy.go), so
	// that the difference to the gateway is the idempotency layer alone.
	target, _ := url.Parse(upURL)
	proxyURL := serveLoopback(t, &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          512,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
		},
		BufferPool: &loadBuffers{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}},
	}) + "/hook"

	redisURL := os.Getenv("IDEMHOOK_REDIS_URL")
	prefix := fmt.Sprintf("idemhook-load-%d:", time.Now().UnixNano())
	var rdb *redis.Client
	if redisURL == "" {
		t.Log("IDEMHOOK_REDIS_URL is not set: no Redis rows")
	} else {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			t.Fatal(err)
		}
		rdb = redis.NewClient(opts)
		if err := rdb.Ping(t.Context()).Err(); err != nil {
			t.Fatalf("IDEMHOOK_REDIS_URL=%s: %v", redisURL, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			redistest.DeletePrefix(ctx, rdb, prefix) //nolint:errcheck // a load run's own keys, best effort
			rdb.Close()
		})
	}

	var rows []*loadRow
	pair := func(group, name, url string, base [2]*loadRow) [2]*loadRow {
		first := &loadRow{group: group, name: name, url: url, baseline: base[0]}
		again := &loadRow{group: group, name: name, url: url, replay: true, baseline: base[1]}
		rows = append(rows, first, again)
		return [2]*loadRow{first, again}
	}
	wanted := func(name string) bool { return strings.Contains(name, *loadOnly) }

	// Gateway rows.
	up := &loadRow{group: "gateway", name: "upstream alone", url: upURL + "/hook"}
	rows = append(rows, up)
	proxy := pair("gateway", "httputil.ReverseProxy, pooled transport", proxyURL, [2]*loadRow{})
	proxy[0].baseline, proxy[1].baseline = nil, nil
	up.baseline = proxy[0]
	dir := t.TempDir()
	gateways := []struct{ name, store, audit string }{
		{"gateway, memory", "{driver: memory}", "none"},
		{"gateway, SQLite", fmt.Sprintf("{driver: sqlite, path: %q}", filepath.Join(dir, "a.db")), "none"},
		{"gateway, SQLite + SQLite audit (default)", fmt.Sprintf("{driver: sqlite, path: %q}", filepath.Join(dir, "b.db")), "sqlite"},
	}
	if rdb != nil {
		gateways = append(gateways, struct{ name, store, audit string }{
			"gateway, Redis", fmt.Sprintf("{driver: redis, url: %q, prefix: %q}", redisURL, prefix+"gw:"), "none"})
	}
	if pgURL := os.Getenv(pgtest.EnvVar); pgURL == "" {
		t.Log(pgtest.EnvVar + " is not set: no PostgreSQL rows")
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
	for _, gwc := range gateways {
		if !wanted(gwc.name) {
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
		g := testgw.Start(t, gatewaytest.WriteConfig(t, t.TempDir(), cfg), nil)
		pair("gateway", gwc.name, g.URL("/hook"), proxy)
	}

	// Library rows.
	bare := pair("library", "bare net/http handler", serveLoopback(t, handler), [2]*loadRow{})
	bare[0].baseline, bare[1].baseline = nil, nil
	protect := func(st idemhook.Store) http.Handler {
		mw, err := idemhook.New(st, idemhook.Options{})
		if err != nil {
			t.Fatal(err)
		}
		route, err := mw.Route(idemhook.Route{Source: "load"})
		if err != nil {
			t.Fatal(err)
		}
		return route(handler)
	}
	if wanted("middleware, memory") {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		pair("library", "middleware, memory", serveLoopback(t, protect(mem)), bare)
	}
	for _, unbatched := range []bool{false, true} {
		name := "middleware, Redis" // redisstore's default: batched
		if unbatched {
			name += " (Unbatched)"
		}
		if rdb == nil || !wanted(name) {
			continue
		}
		opts, _ := redis.ParseURL(redisURL)
		opts.MaxRetries, opts.DialerRetries = -1, 1 // redisstore's advice for a webhook path
		client := redis.NewClient(opts)
		t.Cleanup(func() { client.Close() })
		st, err := redisstore.New(client, redisstore.Config{Prefix: fmt.Sprintf("%slib%t:", prefix, unbatched), Unbatched: unbatched})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		pair("library", name, serveLoopback(t, protect(st)), bare)
	}
	if rdb != nil && wanted("middleware, Redis (rueidis)") {
		opt, err := rueidis.ParseURL(redisURL)
		if err != nil {
			t.Fatal(err)
		}
		opt.DisableCache, opt.DisableRetry = true, true // NewRueidis's advice for a webhook path
		client, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		st, err := redisstore.NewRueidis(client, redisstore.Config{Prefix: prefix + "librueidis:"})
		if err != nil {
			t.Fatal(err)
		}
		pair("library", "middleware, Redis (rueidis)", serveLoopback(t, protect(st)), bare)
	}
	addFiberRows(t, pair, wanted, redisURL, rdb)

	// Every row runs once per round, the rows interleaved. That way the
	// noise of a shared machine weighs on every row alike, and so does
	// whatever drifts during the run (the memory store's heap grows with
	// every first delivery). Each ratio compares two measurements of the
	// same round.
	start := time.Now()
	for round := range *loadRounds {
		for i, r := range rows {
			body := loadBody
			if r.replay {
				body = sameBody
			}
			profiling := *loadProfile != "" && r.baseline != nil && round == *loadRounds-1
			if profiling {
				startProfile(t, filepath.Join(*loadProfile, profileName(r)))
			}
			r.rounds = append(r.rounds, measure(r.url, int64(round)<<40|int64(i)<<32, body, r.key))
			if profiling {
				pprof.StopCPUProfile()
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n%s %s/%s, GOMAXPROCS=%d, NumCPU=%d, %d senders, each measurement bounded by %d requests or %s, %d interleaved rounds, %s in all\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU(), *loadConc, *loadRequests, *loadDuration, *loadRounds, time.Since(start).Round(time.Second))
	for _, group := range []string{"gateway", "library"} {
		fmt.Fprintf(&b, "\n| %s | traffic | req/s (median round) | p50 | p99 | ratio, median | ratio, spread | CPU µs/req (process) | CPU over baseline, median (spread) | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", group)
		for _, r := range rows {
			if r.group != group {
				continue
			}
			m := r.medianRound()
			ratio, spread, extra := "1.00x (baseline)", "", ""
			if r.baseline != nil {
				rs := r.ratios()
				ratio = fmt.Sprintf("%.2fx", medianOf(rs))
				spread = fmt.Sprintf("%.2f-%.2fx", slices.Min(rs), slices.Max(rs))
				cs := r.extraCPU()
				extra = fmt.Sprintf("%+.1f (%+.1f to %+.1f)", medianOf(cs), slices.Min(cs), slices.Max(cs))
			}
			cpus := make([]float64, len(r.rounds))
			for i, x := range r.rounds {
				cpus[i] = x.cpuPerRequest()
			}
			errs := 0
			for _, x := range r.rounds {
				errs += x.errors
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | %s | %.1f | %s | %d |\n", r.name, r.traffic(), m.rps(),
				m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond), ratio, spread, medianOf(cpus), extra, errs)
		}
	}
	t.Log(b.String())
	for _, r := range rows {
		for _, x := range r.rounds {
			if x.errors > 0 {
				t.Errorf("%s, %s: %d requests did not get 200", r.name, r.traffic(), x.errors)
			}
		}
	}
	if *loadChart != "" {
		title := fmt.Sprintf("idemhook load comparison, %s, %d senders, median and spread of %d interleaved rounds", time.Now().UTC().Format("2006-01-02 15:04 UTC"), *loadConc, *loadRounds)
		var bars []chartBar
		for _, r := range rows {
			if r.baseline == nil {
				continue
			}
			rs := r.ratios()
			label := r.name + ", " + r.traffic()
			switch {
			case r.group == "gateway":
				label += " (vs proxy)"
			case r.key != nil: // the Fiber rows
				label += " (vs Fiber bare)"
			default:
				label += " (vs bare)"
			}
			bars = append(bars, chartBar{label: label, median: medianOf(rs), lo: slices.Min(rs), hi: slices.Max(rs), replay: r.replay})
		}
		if err := writeChart(*loadChart, title, bars); err != nil {
			t.Fatal(err)
		}
		t.Logf("chart written to %s", *loadChart)
	}
}

// profileName is the file name of r's CPU profile.
func profileName(r *loadRow) string {
	name := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			return c
		}
		if c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return '-'
	}, r.name+" "+r.traffic())
	return name + ".pprof"
}

func startProfile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
}

// loadBuffers is the gateway's buffer pool of 32 KiB copy buffers, for the
// baseline proxy.
type loadBuffers struct{ p sync.Pool }

func (bp *loadBuffers) Get() []byte  { return *bp.p.Get().(*[]byte) }
func (bp *loadBuffers) Put(b []byte) { bp.p.Put(&b) }
