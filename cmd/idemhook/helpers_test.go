package main

import (
	"context"
	"io"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/syncbuf"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

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
	reload <-chan os.Signal // a value on it is a SIGHUP: the gateway reloads its file
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
			reload: o.reload,
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

// The helpers shared with the other gateway tests (internal/testutil/gatewaytest).
const minimal = gatewaytest.Minimal

type (
	upstream = gatewaytest.Upstream
	received = gatewaytest.Received
	response = gatewaytest.Response
)

var (
	newUpstream  = gatewaytest.NewUpstream
	sha          = gatewaytest.SHA
	post         = gatewaytest.Post
	do           = gatewaytest.Do
	eventually   = testutil.Eventually
	envOf        = gatewaytest.EnvOf
	writeConfig  = gatewaytest.WriteConfig
	routeConfig  = gatewaytest.RouteConfig
	sqliteConfig = gatewaytest.SQLiteConfig
	sourceStats  = gatewaytest.SourceStats
	rate         = gatewaytest.Rate
	sameWindow   = gatewaytest.SameWindow
)

func decodeJSON[T any](t *testing.T, r response) T {
	t.Helper()
	return gatewaytest.DecodeJSON[T](t, r)
}
