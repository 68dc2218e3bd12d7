package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/gatewaytest"
	"github.com/idemhook/idemhook/internal/syncbuf"
)

// received is one request the test upstream got.
type received struct {
	Method, Path, Query, Host string
	Header                    http.Header
	Body                      []byte
}

// upstream is a backend that records what it receives. By default it
// answers 200 with a JSON body naming the call number and the body's hash,
// a Set-Cookie header (which must never be replayed) and X-Upstream.
type upstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	got   []received
	calls atomic.Int64
	// handle, if set, answers call n (1-based) instead of the default.
	handle func(w http.ResponseWriter, r *http.Request, n int64)
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock() // n and the append in one step: received()[n-1] is this request
	n := u.calls.Add(1)
	u.got = append(u.got, received{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), body})
	u.mu.Unlock()
	if u.handle != nil {
		u.handle(w, r, n)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Upstream", "yes")
	fmt.Fprintf(w, `{"call":%d,"sha256":%q}`, n, sha(body))
}

func (u *upstream) received() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.got...)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// gw is a gateway running in-process.
type gw struct {
	addrs
	stderr *syncbuf.Buffer
	stop   func() error // cancels run's context and returns run's error
}

// url returns the gateway URL of path.
func (g *gw) url(path string) string { return "http://" + g.Listen + path }

// adminURL returns the admin URL of path.
func (g *gw) adminURL(path string) string { return "http://" + g.Admin + path }

type startOpts struct {
	getenv func(string) string
	now    func() time.Time
}

// startGateway runs "idemhook serve --config FILE" with FILE holding text,
// and returns once it listens. It is stopped in t.Cleanup if the test
// didn't stop it.
func startGateway(t *testing.T, configPath string, o startOpts) *gw {
	t.Helper()
	if o.getenv == nil {
		o.getenv = func(string) string { return "" }
	}
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncbuf.Buffer{}
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- runEnv(ctx, env{
			args:   []string{"serve", "--config", configPath},
			getenv: o.getenv,
			stdout: io.Discard,
			stderr: stderr,
			ready:  func(a addrs) { ready <- a },
			now:    o.now,
		})
	}()
	g := &gw{stderr: stderr}
	select {
	case g.addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("gateway did not start: %v\nlog:\n%s", err, stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("gateway did not start within 30s\nlog:\n%s", stderr)
	}
	var once sync.Once
	var runErr error
	g.stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := g.stop(); err != nil {
			t.Errorf("gateway run returned %v\nlog:\n%s", err, stderr)
		}
	})
	return g
}

// response is what a sender got back.
type response struct {
	Status int
	Header http.Header
	Body   string
}

func post(t *testing.T, url, body string, header ...string) response {
	t.Helper()
	return do(t, http.MethodPost, url, body, header...)
}

// do sends a request. header is name, value pairs.
func do(t *testing.T, method, url, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

// metricValue reads one sample of the gateway's /metrics.
func metricValue(t *testing.T, adminURL, name string) float64 {
	t.Helper()
	r := do(t, "GET", adminURL, "")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(r.Body)
	if m == nil {
		t.Fatalf("/metrics has no %s:\n%s", name, r.Body)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var claimCount = regexp.MustCompile(`(?m)^idemhook_store_operation_duration_seconds_count\{op="claim"\} (\d+)$`)

// claims reads how many store claims the gateway has made, from its
// /metrics. A duplicate's claim counts once it has found the first
// delivery's pending claim, so a test can hold the first delivery until
// every copy has met it.
func claims(t *testing.T, adminURL string) int {
	t.Helper()
	m := claimCount.FindStringSubmatch(do(t, "GET", adminURL, "").Body)
	if m == nil {
		return 0 // absent until the first claim is observed
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// eventually polls cond until it holds. The deadline only guards against a
// hang and asserts nothing about speed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The helpers shared with the other gateway tests (internal/gatewaytest).
const minimal = gatewaytest.Minimal

var (
	envOf        = gatewaytest.EnvOf
	writeConfig  = gatewaytest.WriteConfig
	routeConfig  = gatewaytest.RouteConfig
	sqliteConfig = gatewaytest.SQLiteConfig
	sourceStats  = gatewaytest.SourceStats
	rate         = gatewaytest.Rate
	sameWindow   = gatewaytest.SameWindow
)
