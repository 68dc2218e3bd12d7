package integration

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/redistest"
	"github.com/idemhook/idemhook/memstore"
)

// The middleware's load comparison behind docs/benchmarks.md: a bare handler
// and the same handler behind the middleware (memory and Redis stores), each
// served on loopback and driven in one run by wrk, a separate process. Off
// by default:
//
//	IDEMHOOK_REDIS_URL=redis://127.0.0.1:6379/0 \
//	  go test ./internal/integration -run TestMiddlewareLoad -count=1 -v -load
var (
	loadRun      = flag.Bool("load", false, "run TestMiddlewareLoad (needs wrk: apt-get install wrk)")
	loadDuration = flag.Duration("load.duration", 5*time.Second, "time of each wrk run")
	loadConns    = flag.Int("load.connections", 32, "wrk connections")
	loadRounds   = flag.Int("load.rounds", 3, "rounds of every setup; the median is reported")
	loadOnly     = flag.String("load.only", "", "measure only the middleware setups whose name contains this (the bare handler always runs)")
)

// wrk scripts: every request a new event, or one event over and over.
const (
	freshScript = `
local n = 0
local seed = 0
function init(args) seed = math.random(1, 1e9) end
function request()
  n = n + 1
  return wrk.format("POST", "/", {["Content-Type"] = "application/json"},
    '{"id":"evt_' .. seed .. '_' .. n .. '","type":"payment.succeeded","data":{"amount":1000,"currency":"BRL"}}')
end
`
	sameScript = `
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"id":"evt_replay","type":"payment.succeeded","data":{"amount":1000,"currency":"BRL"}}'
`
)

type wrkResult struct {
	rps      float64
	p50, p99 string
	non2xx   int
}

var (
	rpsRe    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	latRe    = regexp.MustCompile(`(?m)^\s+(50|99)%\s+(\S+)`)
	non2xxRe = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

func runWrk(t *testing.T, url, script string) wrkResult {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.lua")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("wrk", "-t", "2", "-c", strconv.Itoa(*loadConns), "-d", loadDuration.String(),
		"--latency", "-s", path, url).CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	var r wrkResult
	m := rpsRe.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no Requests/sec in wrk's output:\n%s", out)
	}
	r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	for _, l := range latRe.FindAllSubmatch(out, -1) {
		if string(l[1]) == "50" {
			r.p50 = string(l[2])
		} else {
			r.p99 = string(l[2])
		}
	}
	if m := non2xxRe.FindSubmatch(out); m != nil {
		r.non2xx, _ = strconv.Atoi(string(m[1]))
	}
	return r
}

func TestMiddlewareLoad(t *testing.T) {
	if !*loadRun {
		t.Skip("a load run: pass -load (see the comment at the top of load_test.go)")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Fatal("-load needs wrk on PATH: apt-get install wrk")
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`) //nolint:errcheck
	})
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	redisStore, _ := newRedisStore(t, redistest.URL(t))
	protect := func(st idemhook.Store) http.Handler {
		mw, err := idemhook.New(st, idemhook.Options{})
		if err != nil {
			t.Fatal(err)
		}
		route, err := mw.Route(idemhook.Route{Source: "load" + strconv.FormatInt(time.Now().UnixNano(), 36)})
		if err != nil {
			t.Fatal(err)
		}
		return route(handler)
	}
	setups := []struct {
		name string
		h    http.Handler
	}{
		{"bare handler", handler},
		{"middleware, memory", protect(mem)},
		{"middleware, Redis", protect(redisStore)},
	}
	// Every measurement, run round-robin over the rounds, so that whatever
	// drifts during the run (the memory store's heap grows with every first
	// delivery, other work on the machine) weighs on every setup alike.
	type row struct {
		setup, traffic, url, script string
		results                     []wrkResult
	}
	var rows []*row
	for _, s := range setups {
		if s.name != "bare handler" && !strings.Contains(s.name, *loadOnly) {
			continue
		}
		srv := httptest.NewServer(s.h)
		defer srv.Close()
		// For the bare handler the "replays" traffic is one body sent over
		// and over, every request running the handler: the baseline of the
		// replays (wrk spends less on a fixed body than on numbering them).
		rows = append(rows,
			&row{setup: s.name, traffic: "first deliveries", url: srv.URL, script: freshScript},
			&row{setup: s.name, traffic: "replays", url: srv.URL, script: sameScript})
	}
	for range *loadRounds {
		for _, r := range rows {
			r.results = append(r.results, runWrk(t, r.url, r.script))
		}
	}
	median := func(rs []wrkResult) wrkResult {
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b wrkResult) int { return cmp.Compare(a.rps, b.rps) })
		return rs[len(rs)/2]
	}
	for _, r := range rows {
		for _, res := range r.results {
			if res.non2xx != 0 {
				t.Errorf("%s, %s: %d non-2xx responses", r.setup, r.traffic, res.non2xx)
			}
		}
	}
	base := map[string]float64{} // traffic -> the bare handler's requests/s
	for _, r := range rows[:2] {
		base[r.traffic] = median(r.results).rps
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| setup | traffic | requests/s | vs bare, same traffic | p50 | p99 |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		m := median(r.results)
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2fx | %s | %s |\n", r.setup, r.traffic, m.rps, m.rps/base[r.traffic], m.p50, m.p99)
	}
	t.Logf("wrk -t 2 -c %d -d %v, median of %d rounds:\n%s", *loadConns, *loadDuration, *loadRounds, b.String())
}
