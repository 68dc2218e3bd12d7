package integration

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	type row struct {
		setup, traffic string
		r              wrkResult
	}
	var rows []row
	for _, s := range setups {
		if s.name != "bare handler" && !strings.Contains(s.name, *loadOnly) {
			continue
		}
		srv := httptest.NewServer(s.h)
		for _, traffic := range []struct{ name, script string }{{"first deliveries", freshScript}, {"replays", sameScript}} {
			if s.name == "bare handler" && traffic.name == "replays" {
				continue // the bare handler has no replays: every request runs it
			}
			var results []wrkResult
			for range *loadRounds {
				results = append(results, runWrk(t, srv.URL, traffic.script))
			}
			// The median round by throughput.
			for i := range results {
				for j := i + 1; j < len(results); j++ {
					if results[j].rps < results[i].rps {
						results[i], results[j] = results[j], results[i]
					}
				}
			}
			r := results[len(results)/2]
			if r.non2xx != 0 {
				t.Errorf("%s, %s: %d non-2xx responses", s.name, traffic.name, r.non2xx)
			}
			rows = append(rows, row{s.name, traffic.name, r})
		}
		srv.Close()
	}
	base := rows[0].r.rps
	var b strings.Builder
	fmt.Fprintf(&b, "| setup | traffic | requests/s | vs bare | p50 | p99 |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2fx | %s | %s |\n", r.setup, r.traffic, r.r.rps, r.r.rps/base, r.r.p50, r.r.p99)
	}
	t.Logf("wrk -t 2 -c %d -d %v, median of %d rounds:\n%s", *loadConns, *loadDuration, *loadRounds, b.String())
}
