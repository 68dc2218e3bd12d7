package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/redis/go-redis/v9"
)

func TestForwardIntact(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})

	body := "{\n  \"id\": \"evt_1\",\n  \"amount\": 10\n}"
	r := post(t, g.url("/webhooks/test?attempt=1"), body,
		"Content-Type", "application/json", "X-Signature", "abc", "User-Agent", "provider/1.0")
	if r.Status != http.StatusOK {
		t.Fatalf("status = %d, body %s", r.Status, r.Body)
	}
	got := up.Received()
	if len(got) != 1 {
		t.Fatalf("upstream received %d requests, want 1", len(got))
	}
	in := got[0]
	checks := []struct{ name, got, want string }{
		{"method", in.Method, http.MethodPost},
		{"path", in.Path, "/hook"},
		{"query", in.Query, "attempt=1"},
		{"body sha256", sha(in.Body), sha([]byte(body))},
		{"Content-Type", in.Header.Get("Content-Type"), "application/json"},
		{"X-Signature", in.Header.Get("X-Signature"), "abc"},
		{"User-Agent", in.Header.Get("User-Agent"), "provider/1.0"},
		{"X-Forwarded-For", in.Header.Get("X-Forwarded-For"), "127.0.0.1"},
		{"X-Forwarded-Host", in.Header.Get("X-Forwarded-Host"), g.Listen},
		{"X-Forwarded-Proto", in.Header.Get("X-Forwarded-Proto"), "http"},
		{"Content-Length", in.Header.Get("Content-Length"), strconv.Itoa(len(body))},
		{"Host", in.Host, strings.TrimPrefix(up.Srv.URL, "http://")},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("upstream %s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

func TestReplayFidelity(t *testing.T) {
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Content-Type", "application/vnd.test+json")
		w.Header().Set("Set-Cookie", "session=secret")
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"call":%d}`, n)
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})

	first := post(t, g.url("/webhooks/test"), `{"id":"evt_1"}`)
	again := post(t, g.url("/webhooks/test"), `{ "id" : "evt_1" }`) // same JSON, other spacing
	if up.Calls.Load() != 1 {
		t.Fatalf("upstream calls = %d, want 1", up.Calls.Load())
	}
	if first.Header.Get(idemhook.ReplayedHeader) != "" {
		t.Errorf("first delivery has %s", idemhook.ReplayedHeader)
	}
	if first.Header.Get("Set-Cookie") == "" {
		t.Errorf("first delivery lost the upstream's Set-Cookie")
	}
	tests := []struct{ name, got, want string }{
		{"status", strconv.Itoa(again.Status), "201"},
		{"body", again.Body, first.Body},
		{"Content-Type", again.Header.Get("Content-Type"), "application/vnd.test+json"},
		{idemhook.ReplayedHeader, again.Header.Get(idemhook.ReplayedHeader), "true"},
		{"Set-Cookie", again.Header.Get("Set-Cookie"), ""},
		{"X-Upstream (not in replay_headers)", again.Header.Get("X-Upstream"), ""},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("replay %s = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestReplayHeadersAndHeaderKey(t *testing.T) {
	up := newUpstream(t)
	cfg := routeConfig(up.Srv.URL, "header: X-Event-Id", "replay_headers: [Content-Type, X-Upstream]")
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})

	a := post(t, g.url("/webhooks/test"), `{"n":1}`, "X-Event-Id", "e-1")
	b := post(t, g.url("/webhooks/test"), `{"n":1}`, "X-Event-Id", "e-1")
	c := post(t, g.url("/webhooks/test"), `{"n":2}`, "X-Event-Id", "e-1") // same key, other body
	d := post(t, g.url("/webhooks/test"), `{"n":1}`, "X-Event-Id", "e-2")
	if a.Status != 200 || b.Status != 200 || b.Body != a.Body || b.Header.Get("X-Upstream") != "yes" {
		t.Errorf("replay = %d %q X-Upstream=%q, want 200 %q yes", b.Status, b.Body, b.Header.Get("X-Upstream"), a.Body)
	}
	if c.Status != http.StatusUnprocessableEntity {
		t.Errorf("same key, other body: status %d, want 422", c.Status)
	}
	if d.Status != 200 || d.Header.Get(idemhook.ReplayedHeader) != "" {
		t.Errorf("other key: status %d replayed %q, want a fresh 200", d.Status, d.Header.Get(idemhook.ReplayedHeader))
	}
	if n := up.Calls.Load(); n != 2 {
		t.Errorf("upstream calls = %d, want 2 (e-1 once, e-2 once)", n)
	}
}

func TestTTLExpiry(t *testing.T) {
	up := newUpstream(t)
	clock := newFakeClock()
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "ttl: 1m")), startOpts{now: clock.Now})

	post(t, g.url("/webhooks/test"), `{"id":1}`)
	clock.Advance(59 * time.Second)
	if r := post(t, g.url("/webhooks/test"), `{"id":1}`); r.Header.Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("before the ttl: not replayed (status %d)", r.Status)
	}
	clock.Advance(2 * time.Second)
	if r := post(t, g.url("/webhooks/test"), `{"id":1}`); r.Header.Get(idemhook.ReplayedHeader) != "" {
		t.Fatalf("after the ttl: replayed, want a fresh delivery")
	}
	if n := up.Calls.Load(); n != 2 {
		t.Errorf("upstream calls = %d, want 2", n)
	}
}

// blockingUpstream holds its first call until release is closed, and
// signals arrived when that call is in.
func blockingUpstream(t *testing.T) (up *upstream, arrived chan struct{}, release chan struct{}) {
	up = newUpstream(t)
	arrived, release = make(chan struct{}), make(chan struct{})
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			close(arrived)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "call %d", n)
	}
	return up, arrived, release
}

func TestInFlightPolicies(t *testing.T) {
	const body = `{"id":"evt_slow"}`
	tests := []struct {
		policy     string
		dups       int
		wantStatus int    // of each duplicate sent while the first runs
		wantCalls  int64  // upstream calls in the end
		wantBody   string // of each duplicate
	}{
		{policy: "proceed", dups: 3, wantStatus: 200, wantCalls: 4},
		{policy: "reject", dups: 3, wantStatus: http.StatusConflict, wantCalls: 1},
		{policy: "wait", dups: 5, wantStatus: 200, wantCalls: 1, wantBody: "call 1"},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			up, arrived, release := blockingUpstream(t)
			g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "in_flight: "+tt.policy)), startOpts{})

			firstc := make(chan response, 1)
			go func() { firstc <- post(t, g.url("/webhooks/test"), body) }()
			<-arrived // the first delivery holds its claim

			dups := make([]response, tt.dups)
			var wg sync.WaitGroup
			for i := range dups {
				wg.Go(func() { dups[i] = post(t, g.url("/webhooks/test"), body) })
			}
			if tt.policy != "wait" {
				wg.Wait() // proceed and reject answer without waiting for the first
			}
			close(release)
			wg.Wait()
			first := <-firstc
			if first.Status != 200 || first.Body != "call 1" {
				t.Errorf("first = %d %q, want 200 \"call 1\"", first.Status, first.Body)
			}
			for i, d := range dups {
				if d.Status != tt.wantStatus {
					t.Errorf("duplicate %d: status %d, want %d (%s)", i, d.Status, tt.wantStatus, d.Body)
				}
				if tt.wantBody != "" && d.Body != tt.wantBody {
					t.Errorf("duplicate %d: body %q, want %q", i, d.Body, tt.wantBody)
				}
				if tt.policy == "reject" && d.Header.Get("Retry-After") == "" {
					t.Errorf("duplicate %d: 409 without Retry-After", i)
				}
			}
			if n := up.Calls.Load(); n != tt.wantCalls {
				t.Errorf("upstream calls = %d, want %d", n, tt.wantCalls)
			}
			// Whatever the policy, the event is now stored.
			if r := post(t, g.url("/webhooks/test"), body); r.Header.Get(idemhook.ReplayedHeader) != "true" {
				t.Errorf("after the first finished: not replayed (status %d)", r.Status)
			}
		})
	}
}

func TestUpstreamFailureReleases(t *testing.T) {
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			http.Error(w, "database down", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "ok %d", n)
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})

	steps := []struct {
		wantStatus   int
		wantBody     string
		wantReplayed string
		wantCalls    int64
	}{
		{500, "database down\n", "", 1}, // passed through, claim released
		{200, "ok 2", "", 2},            // the retry reaches the upstream
		{200, "ok 2", "true", 2},        // and is now stored
	}
	for i, s := range steps {
		r := post(t, g.url("/webhooks/test"), `{"id":"evt_5xx"}`)
		if r.Status != s.wantStatus || r.Body != s.wantBody || r.Header.Get(idemhook.ReplayedHeader) != s.wantReplayed {
			t.Errorf("delivery %d = %d %q replayed=%q, want %d %q replayed=%q", i+1, r.Status, r.Body,
				r.Header.Get(idemhook.ReplayedHeader), s.wantStatus, s.wantBody, s.wantReplayed)
		}
		if n := up.Calls.Load(); n != s.wantCalls {
			t.Errorf("after delivery %d: upstream calls = %d, want %d", i+1, n, s.wantCalls)
		}
	}
}

func TestUpstreamDown(t *testing.T) {
	// A port nothing listens on, taken again later for the upstream.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig("http://"+addr)), startOpts{})
	if !strings.Contains(g.stderr.String(), "upstream unreachable at start") {
		t.Errorf("no WARN about the upstream at start; log:\n%s", g.stderr)
	}
	r := post(t, g.url("/webhooks/test"), `{"id":"evt_down"}`)
	if r.Status != http.StatusBadGateway || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("upstream down: %d %s %q, want 502 problem+json", r.Status, r.Header.Get("Content-Type"), r.Body)
	}
	var p adminapi.Problem
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil || p.Status != 502 || !strings.Contains(p.Detail, "connection refused") {
		t.Errorf("problem body = %s (%v)", r.Body, err)
	}

	// The backend comes back: the provider's retry is forwarded.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("could not listen again on %s: %v", addr, err)
	}
	up := &upstream{}
	srv := &http.Server{Handler: up}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r = post(t, g.url("/webhooks/test"), `{"id":"evt_down"}`)
	if r.Status != 200 || r.Header.Get(idemhook.ReplayedHeader) != "" || up.Calls.Load() != 1 {
		t.Errorf("retry after the upstream came back = %d replayed=%q calls=%d, want 200, fresh, 1 call",
			r.Status, r.Header.Get(idemhook.ReplayedHeader), up.Calls.Load())
	}
}

func TestUpstreamTimeout(t *testing.T) {
	up, _, release := blockingUpstream(t)
	defer close(release)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "upstream_timeout: 50ms")), startOpts{})
	r := post(t, g.url("/webhooks/test"), `{"id":"evt_slow"}`)
	if r.Status != http.StatusGatewayTimeout {
		t.Fatalf("status = %d (%s), want 504", r.Status, r.Body)
	}
	// The claim was released: the retry reaches the upstream (call 2 answers at once).
	r = post(t, g.url("/webhooks/test"), `{"id":"evt_slow"}`)
	if r.Status != 200 || r.Body != "call 2" {
		t.Errorf("retry = %d %q, want 200 \"call 2\"", r.Status, r.Body)
	}
}

func TestRestartSQLite(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	cfg := strings.Replace(routeConfig(up.Srv.URL), "store: {driver: memory}",
		fmt.Sprintf("store: {driver: sqlite, path: %q}", filepath.Join(dir, "state.db")), 1)
	path := writeConfig(t, dir, cfg)

	g := startGateway(t, path, startOpts{})
	first := post(t, g.url("/webhooks/test"), `{"id":"evt_restart"}`)
	if err := g.stop(); err != nil {
		t.Fatal(err)
	}
	g = startGateway(t, path, startOpts{})
	again := post(t, g.url("/webhooks/test"), `{"id":"evt_restart"}`)
	if again.Header.Get(idemhook.ReplayedHeader) != "true" || again.Body != first.Body {
		t.Errorf("after restart: replayed=%q body %q, want replay of %q", again.Header.Get(idemhook.ReplayedHeader), again.Body, first.Body)
	}
	if n := up.Calls.Load(); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
}

func TestRedis(t *testing.T) {
	raw := os.Getenv("IDEMHOOK_REDIS_URL")
	if raw == "" {
		t.Skip("IDEMHOOK_REDIS_URL is not set (e.g. redis://127.0.0.1:6379/0): skipping the Redis driver test")
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("IDEMHOOK_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("IDEMHOOK_REDIS_URL is set but Redis is unreachable: %v", err)
	}
	prefix := fmt.Sprintf("idemhook-gwtest-%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		keys, _ := client.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			client.Del(context.Background(), keys...)
		}
	})

	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "store: {driver: memory}",
		fmt.Sprintf("store: {driver: redis, url: \"${REDIS}\", prefix: %q}", prefix), 1)
	getenv := func(k string) string {
		if k == "REDIS" {
			return raw
		}
		return ""
	}
	path := writeConfig(t, t.TempDir(), cfg)
	g1 := startGateway(t, path, startOpts{getenv: getenv})
	g2 := startGateway(t, path, startOpts{getenv: getenv}) // a second instance sharing the store

	first := post(t, g1.url("/webhooks/test"), `{"id":"evt_redis"}`)
	again := post(t, g2.url("/webhooks/test"), `{"id":"evt_redis"}`)
	if first.Status != 200 || again.Header.Get(idemhook.ReplayedHeader) != "true" || again.Body != first.Body {
		t.Errorf("second instance: %d replayed=%q %q, want a replay of %q", again.Status, again.Header.Get(idemhook.ReplayedHeader), again.Body, first.Body)
	}
	if n := up.Calls.Load(); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
	key := prefix + idemhook.StoreKey("test", idemhook.BodyKey([]byte(`{"id":"evt_redis"}`)))
	if n, err := client.Exists(context.Background(), key).Result(); err != nil || n != 1 {
		t.Errorf("redis key %s: exists=%d err=%v", key, n, err)
	}
	if r := do(t, "GET", g2.adminURL("/readyz"), ""); r.Status != 200 {
		t.Errorf("readyz = %d %s", r.Status, r.Body)
	}
}

// stripeSignature is the Stripe-Signature header Stripe sends for body,
// signed at ts with secret.
func stripeSignature(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.%s", ts, body)
	return fmt.Sprintf("t=%d,v1=%s", ts, hex.EncodeToString(mac.Sum(nil)))
}

func TestProviderSignature(t *testing.T) {
	up := newUpstream(t)
	const secret = "whsec_test"
	cfg := routeConfig(up.Srv.URL, "provider: stripe", "secret_env: STRIPE_SECRET")
	getenv := func(k string) string {
		if k == "STRIPE_SECRET" {
			return secret
		}
		return ""
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{getenv: getenv})
	body := `{"id":"evt_stripe_1","type":"payment_intent.succeeded"}`
	sign := func(ts int64) string { return stripeSignature(secret, ts, []byte(body)) }
	now := time.Now().Unix()

	if r := post(t, g.url("/webhooks/test"), body); r.Status != http.StatusUnauthorized {
		t.Errorf("unsigned: status %d, want 401", r.Status)
	}
	if r := post(t, g.url("/webhooks/test"), body, "Stripe-Signature", sign(now)); r.Status != 200 {
		t.Errorf("signed: status %d (%s), want 200", r.Status, r.Body)
	}
	// Stripe re-signs its retries with a new timestamp. The preset keys on
	// the event id, so the retry is still a duplicate.
	if r := post(t, g.url("/webhooks/test"), body, "Stripe-Signature", sign(now+30)); r.Header.Get(idemhook.ReplayedHeader) != "true" {
		t.Errorf("re-signed retry: status %d, not replayed", r.Status)
	}
	if n := up.Calls.Load(); n != 1 {
		t.Errorf("upstream calls = %d, want 1 (the unsigned request must not reach it)", n)
	}
}

func TestGracefulShutdown(t *testing.T) {
	t.Run("running delivery finishes", func(t *testing.T) {
		up, arrived, release := blockingUpstream(t)
		g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)+"shutdown_timeout: 30s\n"), startOpts{})
		resc := make(chan response, 1)
		go func() { resc <- post(t, g.url("/webhooks/test"), `{"id":1}`) }()
		<-arrived
		stopped := make(chan error, 1)
		go func() { stopped <- g.stop() }()
		eventually(t, "the shutdown to start", func() bool { return strings.Contains(g.stderr.String(), "shutting down") })
		close(release)
		if r := <-resc; r.Status != 200 || r.Body != "call 1" {
			t.Errorf("delivery running at shutdown = %d %q, want 200 \"call 1\"", r.Status, r.Body)
		}
		if err := <-stopped; err != nil {
			t.Errorf("run = %v", err)
		}
	})
	t.Run("cut short after the bound, claim released", func(t *testing.T) {
		up, arrived, release := blockingUpstream(t)
		defer close(release)
		dir := t.TempDir()
		cfg := strings.Replace(routeConfig(up.Srv.URL), "store: {driver: memory}",
			fmt.Sprintf("store: {driver: sqlite, path: %q}", filepath.Join(dir, "s.db")), 1) + "shutdown_timeout: 100ms\n"
		path := writeConfig(t, dir, cfg)
		g := startGateway(t, path, startOpts{})
		resc := make(chan response, 1)
		go func() { resc <- post(t, g.url("/webhooks/test"), `{"id":2}`) }()
		<-arrived
		if err := g.stop(); err != nil {
			t.Errorf("run = %v", err)
		}
		if r := <-resc; r.Status != http.StatusBadGateway {
			t.Errorf("delivery cut short = %d %q, want 502", r.Status, r.Body)
		}
		// After a restart the provider's retry runs afresh: the claim was released.
		g = startGateway(t, path, startOpts{})
		if r := post(t, g.url("/webhooks/test"), `{"id":2}`); r.Status != 200 || r.Body != "call 2" {
			t.Errorf("retry after restart = %d %q, want 200 \"call 2\"", r.Status, r.Body)
		}
	})
}

func TestNoRoute(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})
	r := post(t, g.url("/elsewhere"), `{}`)
	if r.Status != http.StatusNotFound || up.Calls.Load() != 0 {
		t.Errorf("unknown path = %d, calls %d; want 404 and no upstream call", r.Status, up.Calls.Load())
	}
}

func TestPrefixRoute(t *testing.T) {
	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "path: /webhooks/test", "path: /hooks/", 1)
	cfg = strings.Replace(cfg, "/hook\n", "/in/?v=2\n", 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	tests := []struct{ give, wantPath, wantQuery string }{
		{"/hooks/github/push?x=1", "/in/github/push", "v=2&x=1"},
		{"/hooks/", "/in/", "v=2"},
	}
	for i, tt := range tests {
		if r := post(t, g.url(tt.give), fmt.Sprintf(`{"n":%d}`, i)); r.Status != 200 {
			t.Fatalf("POST %s = %d %s", tt.give, r.Status, r.Body)
		}
		got := up.Received()[i]
		if got.Path != tt.wantPath || got.Query != tt.wantQuery {
			t.Errorf("POST %s reached %s?%s, want %s?%s", tt.give, got.Path, got.Query, tt.wantPath, tt.wantQuery)
		}
	}
}

func TestRootRoute(t *testing.T) {
	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "path: /webhooks/test", "path: /", 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	if r := post(t, g.url("/any/where"), `{}`); r.Status != 200 || up.Received()[0].Path != "/hook/any/where" {
		t.Errorf("POST /any/where = %d, reached %q; want 200 and /hook/any/where", r.Status, up.Received()[0].Path)
	}
}

func TestStoreDown(t *testing.T) {
	// A Redis address nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	tests := []struct {
		policy     string
		wantStatus int
		wantCalls  int64
	}{
		{"open", 200, 1},   // fail-open: the event is not lost
		{"closed", 503, 0}, // the provider retries later
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			up := newUpstream(t)
			cfg := strings.Replace(routeConfig(up.Srv.URL, "on_store_error: "+tt.policy), "store: {driver: memory}",
				fmt.Sprintf("store: {driver: redis, url: \"redis://%s/0\"}", dead), 1)
			cfg = strings.Replace(cfg, "log: {level: debug}", "log: {level: debug, format: json}", 1)
			g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})

			r := post(t, g.url("/webhooks/test"), `{"id":"evt_store_down"}`)
			if r.Status != tt.wantStatus || up.Calls.Load() != tt.wantCalls {
				t.Errorf("store down, %s: status %d, upstream calls %d; want %d, %d", tt.policy, r.Status, up.Calls.Load(), tt.wantStatus, tt.wantCalls)
			}
			if r := do(t, "GET", g.adminURL("/readyz"), ""); r.Status != http.StatusServiceUnavailable {
				t.Errorf("readyz with the store down = %d, want 503", r.Status)
			}
			// The NestJS guard's WARN prefix, verbatim, because alerts
			// match it. The log is in JSON lines.
			var found bool
			for _, line := range strings.Split(strings.TrimSpace(g.stderr.String()), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line is not JSON: %q", line)
				}
				if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, "WebhookIdempotencyGuard Redis error for key=idem:test:sha256:") && rec["level"] == "WARN" {
					found = true
				}
			}
			if !found {
				t.Errorf("no WARN \"WebhookIdempotencyGuard Redis error for key=\" in the log:\n%s", g.stderr)
			}
		})
	}
}

// An answer never crosses paths. On a prefix route the keys are scoped by
// the path below the prefix, so acme's answer is not replayed to globex;
// another spelling of acme's path (a trailing slash, a percent-encoded
// letter) is acme's path, so a captured delivery re-sent on it is a
// duplicate.
func TestPrefixRouteScopesKeysByPath(t *testing.T) {
	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "path: /webhooks/test", "path: /t/", 1)
	cfg = strings.Replace(cfg, "/hook\n", "/t/\n", 1)
	cfg = strings.Replace(cfg, "audit: {sink: none}", "audit: {sink: memory}", 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	for _, tt := range []struct {
		path     string
		replayed bool
	}{{"/t/acme", false}, {"/t/globex", false}, {"/t/globex", true}, {"/t/acme", true}, {"/t/acme/", true}, {"/t/%61cme", true}} {
		r := post(t, g.url(tt.path), `{"e":2}`)
		if r.Status != 200 || (r.Header.Get("Idempotent-Replayed") == "true") != tt.replayed {
			t.Fatalf("POST %s: %d replayed=%q, want replayed %v", tt.path, r.Status, r.Header.Get("Idempotent-Replayed"), tt.replayed)
		}
	}
	got := up.Received()
	if len(got) != 2 || got[0].Path != "/t/acme" || got[1].Path != "/t/globex" {
		t.Fatalf("upstream got %+v, want one delivery for each tenant", got)
	}
	// The admin API finds a scoped key by its scope.
	key := "idem:test@/t/acme:" + idemhook.BodyKey([]byte(`{"e":2}`))
	r := do(t, http.MethodGet, g.adminURL("/admin/keys/test/"+idemhook.BodyKey([]byte(`{"e":2}`))+"?scope=/t/acme"), "")
	if r.Status != 200 || !strings.Contains(r.Body, key) {
		t.Fatalf("GET the scoped key: %d %s", r.Status, r.Body)
	}
	// The audit trail records each delivery's scope, which the console
	// passes back to delete the key. The next acme delivery is forwarded.
	page := deliveries(t, g, "limit=10", 6)
	first := page.Deliveries[len(page.Deliveries)-1]
	if first.Scope != "/t/acme" || first.Key != idemhook.BodyKey([]byte(`{"e":2}`)) {
		t.Fatalf("audit entry of the first delivery: %+v", first)
	}
	for _, d := range page.Deliveries[:2] {
		if d.Scope != "/t/acme" || d.Outcome != "replayed" {
			t.Errorf("audit entry of a re-spelled acme delivery: %+v, want scope /t/acme, replayed", d)
		}
	}
	if r := do(t, http.MethodDelete, g.adminURL("/admin/keys/test/"+first.Key+"?scope="+first.Scope), ""); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE the scoped key: %d %s", r.Status, r.Body)
	}
	post(t, g.url("/t/acme"), `{"e":2}`)
	if n := up.Calls.Load(); n != 3 {
		t.Fatalf("after deleting acme's key the upstream got %d calls, want 3", n)
	}
}

// A gzip-compressing upstream and Go's default client (which asks for
// gzip). The decoded replay equals the decoded first answer byte for byte.
func TestCompressedUpstreamIsReplayedAsSent(t *testing.T) {
	up := newUpstream(t)
	body := strings.Repeat(`{"line":"compressible text"}`, 100)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			t.Errorf("the sender's Accept-Encoding did not reach the upstream: %q", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		fmt.Fprintf(zw, `{"call":%d,"items":[%s]}`, n, body)
		zw.Close()
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})
	send := func() (string, *http.Response) {
		resp, err := http.Post(g.url("/webhooks/test"), "application/json", strings.NewReader(`{"id":"evt_gz"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		return string(b), resp
	}
	first, fr := send()
	replay, rr := send()
	if !fr.Uncompressed || up.Calls.Load() != 1 || rr.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first gzip-decoded %v, upstream calls %d, replayed %q", fr.Uncompressed, up.Calls.Load(), rr.Header.Get("Idempotent-Replayed"))
	}
	if replay != first || !rr.Uncompressed {
		t.Fatalf("replay (gzip-decoded %v) differs from the first answer:\nfirst  %.60q\nreplay %.60q", rr.Uncompressed, first, replay)
	}
}

// Only a success is final. A 404 during a deploy is not replayed, and the
// provider's retry reaches the upstream. store_statuses makes a 410 final.
func TestOnlySuccessIsStoredByDefault(t *testing.T) {
	up := newUpstream(t)
	status := atomic.Int64{}
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) { w.WriteHeader(int(status.Load())) }
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)+`  - path: /gone
    upstream: `+up.Srv.URL+`/gone
    source: gone
    store_statuses: [410]
`), startOpts{})
	status.Store(404)
	for range 2 {
		if r := post(t, g.url("/webhooks/test"), `{"id":1}`); r.Status != 404 || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("404 answer: %d replayed=%q", r.Status, r.Header.Get("Idempotent-Replayed"))
		}
	}
	status.Store(200)
	post(t, g.url("/webhooks/test"), `{"id":1}`)
	if r := post(t, g.url("/webhooks/test"), `{"id":1}`); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the 200 after the 404s was not stored")
	}
	if n := up.Calls.Load(); n != 3 {
		t.Fatalf("upstream called %d times, want 3 (two 404s released, then one success)", n)
	}
	status.Store(410)
	post(t, g.url("/gone"), `{"id":1}`)
	if r := post(t, g.url("/gone"), `{"id":1}`); r.Status != 410 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("store_statuses [410]: retry got %d replayed=%q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
}

// Deliveries that differ only in the query string are distinct events. A
// route with require_key refuses a delivery without a key.
func TestQueryStringEventsAndRequireKey(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)+`  - path: /strict
    upstream: `+up.Srv.URL+`/strict
    source: strict
    require_key: true
`), startOpts{})
	for _, q := range []string{"?topic=payment&id=0", "?topic=payment&id=1", "?topic=payment&id=2", "?topic=payment&id=1"} {
		post(t, g.url("/webhooks/test"+q), "")
	}
	if n := up.Calls.Load(); n != 3 {
		t.Fatalf("upstream called %d times for 3 distinct events (one sent twice), want 3", n)
	}
	r := post(t, g.url("/strict"), `{"id":1}`)
	if r.Status != 400 || !strings.Contains(r.Body, "Idempotency-Key") || up.Calls.Load() != 3 {
		t.Fatalf("no key on a require_key route: %d %s (upstream calls %d)", r.Status, r.Body, up.Calls.Load())
	}
	if r := post(t, g.url("/strict"), `{"id":1}`, "Idempotency-Key", "k1"); r.Status != 200 || up.Calls.Load() != 4 {
		t.Fatalf("with a key: %d", r.Status)
	}
}

// By default a duplicate that arrives while the first delivery is still at
// the upstream waits for it. The upstream runs the event once.
func TestConcurrentDuplicatesReachTheUpstreamOnce(t *testing.T) {
	up := newUpstream(t)
	release := make(chan struct{})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseOnce) // a failed test must not leave the upstream held
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		<-release
		fmt.Fprintf(w, `{"call":%d}`, n)
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})
	const copies = 20
	var wg sync.WaitGroup
	bodies := make([]string, copies)
	for i := range copies {
		wg.Go(func() { bodies[i] = post(t, g.url("/webhooks/test"), `{"id":"evt_dup"}`).Body })
	}
	// Hold the first copy at the upstream until every copy has made its
	// claim (and found the first one's pending). Then each of them met the
	// running delivery, and under proceed they would all reach the upstream.
	eventually(t, "every copy claimed", func() bool { return claims(t, g.adminURL("/metrics")) >= copies })
	releaseOnce()
	wg.Wait()
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("upstream ran the event %d times, want 1", n)
	}
	for i, b := range bodies {
		if b != `{"call":1}` {
			t.Fatalf("copy %d got %q", i, b)
		}
	}
}

// TestNoRouteHidesConfigPath: anyone on the internet can request an
// unknown path. The 404 must not tell them where the gateway's
// configuration file is on disk.
func TestNoRouteHidesConfigPath(t *testing.T) {
	up := newUpstream(t)
	path := writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL))
	g := startGateway(t, path, startOpts{})
	r := post(t, g.url("/elsewhere"), `{}`)
	if r.Status != http.StatusNotFound {
		t.Fatalf("status = %d, want 404", r.Status)
	}
	if strings.Contains(r.Body, path) || strings.Contains(r.Body, "idemhook.yaml") {
		t.Errorf("404 body shows the config file: %s", r.Body)
	}
	if !strings.Contains(r.Body, "/elsewhere") {
		t.Errorf("404 body does not name the path: %s", r.Body)
	}
}

// TestForgedFirstClaimsNothing: forged deliveries carrying a real event's id
// (wrong secret, stale and future timestamps, a v0-only header) arrive
// before the real one. Each is refused 401 with a problem+json body and
// audited as signature_invalid. None claims the key, so the genuine
// delivery that follows is forwarded (not answered as a duplicate). The
// secret appears neither in the answers nor in the log.
func TestForgedFirstClaimsNothing(t *testing.T) {
	up := newUpstream(t)
	const secret = "whsec_gatewaySecretValue"
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
routes:
  - path: /webhooks/stripe
    upstream: %s/hook
    source: stripe
    provider: stripe
    secret_env: STRIPE_SECRET
`, filepath.Join(dir, "idemhook.db"), up.Srv.URL)
	g := startGateway(t, writeConfig(t, dir, cfg), startOpts{getenv: envOf("STRIPE_SECRET", secret)})
	body := `{"id":"evt_real","type":"charge.succeeded"}`
	sign := func(key string, ts int64, scheme string) string {
		mac := hmac.New(sha256.New, []byte(key))
		fmt.Fprintf(mac, "%d.%s", ts, body)
		return fmt.Sprintf("t=%d,%s=%s", ts, scheme, hex.EncodeToString(mac.Sum(nil)))
	}
	now := time.Now().Unix()
	forged := []struct{ name, header string }{
		{"wrong secret", sign("whsec_attacker", now, "v1")},
		{"stale", sign(secret, now-int64(10*time.Minute/time.Second), "v1")},
		{"future", sign(secret, now+int64(10*time.Minute/time.Second), "v1")},
		{"v0 only", sign(secret, now, "v0")},
		{"garbage", "t=abc,v1=zz"},
	}
	for _, f := range forged {
		r := post(t, g.url("/webhooks/stripe"), body, "Stripe-Signature", f.header)
		if r.Status != http.StatusUnauthorized || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s, want 401 problem+json", f.name, r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		if strings.Contains(r.Body, secret) {
			t.Errorf("%s: the answer shows the secret: %s", f.name, r.Body)
		}
	}
	r := post(t, g.url("/webhooks/stripe"), body, "Stripe-Signature", sign(secret, now, "v1"))
	if r.Status != http.StatusOK || r.Header.Get(idemhook.ReplayedHeader) != "" {
		t.Fatalf("genuine delivery after forgeries = %d replayed=%q %s, want 200 forwarded", r.Status, r.Header.Get(idemhook.ReplayedHeader), r.Body)
	}
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
	deliveries(t, g, "outcome=signature_invalid", len(forged))
	deliveries(t, g, "outcome=processed", 1)
	if strings.Contains(g.stderr.String(), secret) {
		t.Errorf("the log shows the secret:\n%s", g.stderr)
	}
}

// trusted_proxies: from a listed peer (here the test, on 127.0.0.1) the
// incoming X-Forwarded-For is kept and the peer appended, and -Host and
// -Proto are kept. From a peer not listed they are replaced, as without
// the setting.
func TestTrustedProxies(t *testing.T) {
	tests := []struct {
		name, proxies        string
		wantFor, wantProto   string
		wantHostFromIncoming bool
	}{
		{"peer trusted", "trusted_proxies: [127.0.0.0/8]\n", "203.0.113.9, 127.0.0.1", "https", true},
		{"peer trusted by address", "trusted_proxies: [127.0.0.1]\n", "203.0.113.9, 127.0.0.1", "https", true},
		{"peer not trusted", "trusted_proxies: [10.0.0.0/8]\n", "127.0.0.1", "http", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t)
			g := startGateway(t, writeConfig(t, t.TempDir(), tt.proxies+routeConfig(up.Srv.URL)), startOpts{})
			if r := post(t, g.url("/webhooks/test"), `{"id":"xff"}`,
				"X-Forwarded-For", "203.0.113.9", "X-Forwarded-Host", "hooks.example", "X-Forwarded-Proto", "https"); r.Status != 200 {
				t.Fatalf("status %d", r.Status)
			}
			in := up.Received()[0]
			wantHost := g.Listen
			if tt.wantHostFromIncoming {
				wantHost = "hooks.example"
			}
			if got := in.Header.Get("X-Forwarded-For"); got != tt.wantFor {
				t.Errorf("X-Forwarded-For = %q, want %q", got, tt.wantFor)
			}
			if got := in.Header.Get("X-Forwarded-Proto"); got != tt.wantProto {
				t.Errorf("X-Forwarded-Proto = %q, want %q", got, tt.wantProto)
			}
			if got := in.Header.Get("X-Forwarded-Host"); got != wantHost {
				t.Errorf("X-Forwarded-Host = %q, want %q", got, wantHost)
			}
		})
	}
}

// lease, max_stored_body and retry_after per route reach the middleware.
func TestRouteSettings(t *testing.T) {
	t.Run("max_stored_body", func(t *testing.T) {
		up := newUpstream(t)
		up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("a", 100))
		}
		g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "max_stored_body: 10B")), startOpts{})
		first := post(t, g.url("/webhooks/test"), `{"id":1}`)
		replay := post(t, g.url("/webhooks/test"), `{"id":1}`)
		if len(first.Body) != 100 || replay.Status != 200 || replay.Body != "" || replay.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("first %d bytes; replay %d %q replayed=%q; want 100 bytes, then 200 with an empty body",
				len(first.Body), replay.Status, replay.Body, replay.Header.Get("Idempotent-Replayed"))
		}
		if n := up.Calls.Load(); n != 1 {
			t.Errorf("upstream ran %d times", n)
		}
	})
	hold := func(t *testing.T, extra ...string) (*gw, chan struct{}) {
		up, arrived, release := blockingUpstream(t)
		g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, extra...)), startOpts{})
		go post(t, g.url("/webhooks/test"), `{"id":"held"}`)
		<-arrived
		return g, release
	}
	t.Run("retry_after", func(t *testing.T) {
		g, release := hold(t, "in_flight: reject", "retry_after: 9s")
		defer close(release)
		if r := post(t, g.url("/webhooks/test"), `{"id":"held"}`); r.Status != http.StatusConflict || r.Header.Get("Retry-After") != "9" {
			t.Errorf("duplicate: %d Retry-After %q, want 409 and 9", r.Status, r.Header.Get("Retry-After"))
		}
	})
	t.Run("lease", func(t *testing.T) {
		g, release := hold(t, "in_flight: wait", "wait_timeout: 50ms", "lease: 7s")
		defer close(release)
		if r := post(t, g.url("/webhooks/test"), `{"id":"held"}`); r.Status != http.StatusConflict || r.Header.Get("Retry-After") != "7" {
			t.Errorf("duplicate after wait_timeout: %d Retry-After %q, want 409 and 7 (the route's lease)", r.Status, r.Header.Get("Retry-After"))
		}
	})
}

// signalConfig is a gateway on a SQLite file (store and audit trail) with
// the routes given.
func signalConfig(db, routes string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %s}
admin: {listen: 127.0.0.1:0}
shutdown_timeout: 20s
routes:
%s`, db, routes)
}

func routeYAML(path, upstream, extra string) string {
	return fmt.Sprintf("  - path: %s\n    upstream: %s/hook\n    source: %s\n%s", path, upstream, strings.TrimPrefix(path, "/webhooks/"), extra)
}

// auditRows counts the audit trail's rows in the SQLite file of a stopped
// gateway.
func auditRows(t *testing.T, db string) int {
	t.Helper()
	d, err := sqlitestore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var n int
	if err := d.QueryRow("SELECT coalesce(sum(entries), 0) FROM audit_segments").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// traffic sends deliveries from workers, each on its own keep-alive
// connection, until stop is closed or each worker sent max. By default it
// sends every event twice (the second is a replay). It counts the answers
// and the failures.
type traffic struct {
	answered, failed atomic.Int64
	mu               sync.Mutex
	errs             []string
	wg               sync.WaitGroup

	// send, if set, sends delivery i of worker w instead, and returns
	// its status.
	send func(client *http.Client, url string, w, i int) (int, error)
}

func (tr *traffic) run(url string, workers, max int, stop <-chan struct{}) {
	send := tr.send
	if send == nil {
		send = func(client *http.Client, url string, w, i int) (int, error) {
			resp, err := client.Post(url, "application/json", strings.NewReader(fmt.Sprintf(`{"id":"w%d-%d"}`, w, i/2)))
			if err != nil {
				return 0, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil
		}
	}
	for w := range workers {
		tr.wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			defer client.CloseIdleConnections()
			for i := range max {
				select {
				case <-stop:
					return
				default:
				}
				status, err := send(client, url, w, i)
				if err != nil || status != 200 {
					tr.failed.Add(1)
					tr.mu.Lock()
					tr.errs = append(tr.errs, fmt.Sprintf("worker %d, delivery %d: %d %v", w, i, status, err))
					tr.mu.Unlock()
					if err != nil {
						continue
					}
				}
				tr.answered.Add(1)
			}
		})
	}
}

// SIGHUP under traffic, then SIGTERM under traffic, to a real gateway
// process. A valid file replaces the routes without a failed request. An
// invalid one is refused with its errors, and the previous routes keep
// serving. SIGTERM drains. Every answered delivery is in the audit trail.
func TestSignalsUnderTraffic(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "idemhook.db")
	cfgPath := writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.Srv.URL, "")))
	c := startProc(t, cfgPath)

	tr := &traffic{}
	stop := make(chan struct{})
	tr.run(c.url("/webhooks/a"), 4, 400, stop)
	waitAnswered := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); tr.answered.Load() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("only %d answers within 30s", tr.answered.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}

	// A valid file: a second route, a smaller max_body on the first.
	waitAnswered(100)
	writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.Srv.URL, "    max_body: 1KiB\n")+routeYAML("/webhooks/b", up.Srv.URL, "")))
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "idemhook configuration reloaded")
	if r := post(t, c.url("/webhooks/b"), `{"id":"b1"}`); r.Status != 200 {
		t.Errorf("the route added by the reload: %d %s", r.Status, r.Body)
	}
	if r := post(t, c.url("/webhooks/a"), strings.Repeat("x", 2000)); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("the reloaded max_body of 1KiB: a 2000-byte body got %d", r.Status)
	}

	// An invalid file: refused, the running routes keep serving.
	waitAnswered(300)
	writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.Srv.URL, "    ttl: soon\n")))
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "idemhook reload refused")
	c.waitLog(t, `routes[0].ttl: invalid duration \"soon\"`) // the file's error, in a record of its own
	if r := post(t, c.url("/webhooks/b"), `{"id":"b2"}`); r.Status != 200 {
		t.Errorf("after a refused reload, the route of the last good file: %d", r.Status)
	}
	waitAnswered(500)
	if n := tr.failed.Load(); n != 0 {
		t.Fatalf("%d requests failed across the reloads: %v", n, tr.errs[:min(len(tr.errs), 5)])
	}

	// SIGTERM while the traffic goes on: what was answered is in the
	// trail, and the process exits 0.
	c.signal(t, syscall.SIGTERM)
	if err := c.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, c.stderr)
	}
	close(stop)
	tr.wg.Wait()
	answered := tr.answered.Load() + 3 // and the three sent by hand
	if rows := auditRows(t, db); int64(rows) != answered {
		t.Errorf("%d audit rows for %d answered deliveries", rows, answered)
	}
	t.Logf("%d answered, %d failed (after the listener closed), %d upstream calls", tr.answered.Load(), tr.failed.Load(), up.Calls.Load())
}

// A Stripe secret rotated with secret_file and SIGHUP, under a steady
// stream of signed deliveries to a gateway process: the file holds the
// old secret, then the old and the new (reload), the senders switch to the
// new one, then the file holds the new one only (reload). No correctly
// signed delivery gets a 401 at any point; once the old secret is removed,
// a delivery signed with it does.
func TestSecretRotationUnderTraffic(t *testing.T) {
	const (
		oldSecret = "whsec_old_0123456789"
		newSecret = "whsec_new_9876543210"
		workers   = 4
		perWorker = 400 // deliveries per worker at most
	)
	up := newUpstream(t)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "stripe.secrets")
	writeSecrets := func(text string) {
		t.Helper()
		if err := os.WriteFile(secretFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeSecrets("# the endpoint's secret\n" + oldSecret + "\n")
	c := startProc(t, writeConfig(t, dir, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: memory}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/stripe
    upstream: %s/hook
    source: stripe
    provider: stripe
    secret_file: %s
`, up.Srv.URL, secretFile)))
	url := c.url("/webhooks/stripe")
	deliver := func(client *http.Client, id, secret string) (int, error) {
		body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid"}`, id))
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", stripeSignature(secret, time.Now().Unix(), body))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	// The senders sign each delivery with the secret of the moment, and
	// record the secret of their last delivery.
	var current atomic.Pointer[string]
	oldP, newP := new(string), new(string)
	*oldP, *newP = oldSecret, newSecret
	current.Store(oldP)
	var (
		unauthorized atomic.Int64
		last         [workers]atomic.Pointer[string]
	)
	tr := &traffic{send: func(client *http.Client, _ string, w, i int) (int, error) {
		secret := current.Load()
		status, err := deliver(client, fmt.Sprintf("evt_w%d_%d", w, i), *secret)
		if status == http.StatusUnauthorized {
			unauthorized.Add(1)
		}
		last[w].Store(secret)
		return status, err
	}}
	stop := make(chan struct{})
	tr.run(url, workers, perWorker, stop)
	stopSenders := sync.OnceFunc(func() { close(stop); tr.wg.Wait() })
	t.Cleanup(stopSenders)
	answered := &tr.answered
	waitAnswered := func(n int64) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d answered deliveries", n), func() bool { return answered.Load() >= n })
	}
	reloads := 0
	reload := func() {
		t.Helper()
		reloads++
		c.signal(t, syscall.SIGHUP)
		eventually(t, fmt.Sprintf("reload %d", reloads), func() bool {
			if strings.Contains(c.stderr.String(), "idemhook reload refused") {
				t.Fatalf("a reload was refused:\n%s", c.stderr)
			}
			return strings.Count(c.stderr.String(), "idemhook configuration reloaded") == reloads
		})
	}
	single := func(id, secret string) int {
		t.Helper()
		status, err := deliver(http.DefaultClient, id, secret)
		if err != nil {
			t.Fatal(err)
		}
		return status
	}

	// The old secret only: the new one is not accepted yet.
	waitAnswered(100)
	if s := single("evt_early_new", newSecret); s != http.StatusUnauthorized {
		t.Errorf("signed with the new secret before the overlap: %d, want 401", s)
	}
	// The overlap: both secrets, then the senders switch to the new one.
	writeSecrets("# new, from today\n" + newSecret + "\n# old, until the senders have switched\n" + oldSecret + "\n")
	reload()
	waitAnswered(answered.Load() + 100)
	current.Store(newP)
	for w := range workers {
		eventually(t, fmt.Sprintf("sender %d on the new secret", w), func() bool { return last[w].Load() == newP })
	}
	waitAnswered(answered.Load() + 100)
	// The new secret only.
	writeSecrets(newSecret + "\n")
	reload()
	waitAnswered(answered.Load() + 100)
	if s := single("evt_late_old", oldSecret); s != http.StatusUnauthorized {
		t.Errorf("signed with the removed secret: %d, want 401", s)
	}
	if s := single("evt_late_new", newSecret); s != 200 {
		t.Errorf("signed with the new secret after the rotation: %d, want 200", s)
	}
	// A file gone wrong refuses the reload, and the running secrets serve on.
	writeSecrets("# emptied by mistake\n")
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "holds no secret")
	if s := single("evt_after_refusal", newSecret); s != 200 {
		t.Errorf("signed with the new secret after a refused reload: %d, want 200", s)
	}

	stopSenders()
	if n, failed := unauthorized.Load(), tr.failed.Load(); n != 0 || failed != 0 {
		t.Errorf("%d correctly signed deliveries got 401 and %d failed across the rotation: %v", n, failed, tr.errs[:min(len(tr.errs), 5)])
	}
	t.Logf("%d deliveries across the rotation, %d upstream calls", answered.Load(), up.Calls.Load())
}

// Reloads are counted in the metrics: a refused file (invalid, or one
// Gateway.Reload refuses) as a failure that sets
// idemhook_config_last_reload_successful to 0, a good one as a success
// that sets it back and moves the time of the last success.
func TestReloadMetrics(t *testing.T) {
	dir := t.TempDir()
	good := routeConfig("http://127.0.0.1:1")
	path := writeConfig(t, dir, good)
	cfg, err := config.Load(path, envOf())
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(t.Context(), cfg, gateway.Options{Logger: slog.New(slog.DiscardHandler), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	metrics := admin.URL + "/metrics"
	check := func(when string, success, failure, successful float64) float64 {
		t.Helper()
		for _, m := range []struct {
			name string
			want float64
		}{
			{`idemhook_config_reloads_total{result="success"}`, success},
			{`idemhook_config_reloads_total{result="failure"}`, failure},
			{`idemhook_config_last_reload_successful`, successful},
		} {
			if got := metricValue(t, metrics, m.name); got != m.want {
				t.Errorf("%s: %s = %v, want %v", when, m.name, got, m.want)
			}
		}
		return metricValue(t, metrics, "idemhook_config_last_reload_success_timestamp_seconds")
	}
	start := check("at the start", 0, 0, 1)
	if now := float64(time.Now().Unix()); start <= 0 || start > now+1 {
		t.Errorf("last success at the start: %v, want the start's time (now %v)", start, now)
	}
	writeConfig(t, dir, good+"    ttl: soon\n")
	reload(g, path, envOf(), slog.New(slog.DiscardHandler))
	if ts := check("after an invalid file", 0, 1, 0); ts != start {
		t.Errorf("last success moved to %v on a refused reload (was %v)", ts, start)
	}
	writeConfig(t, dir, good)
	reload(g, path, envOf(), slog.New(slog.DiscardHandler))
	if ts := check("after a good file", 1, 1, 1); ts < start {
		t.Errorf("last success %v after a good reload, before the start's %v", ts, start)
	}
}

// A refused reload logs a record saying so, then one record per error of
// the file: no record holds the whole list with its line breaks escaped.
func TestReloadLogsEachError(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			good := strings.Replace(routeConfig("http://127.0.0.1:1"), "log: {level: debug}", "log: {format: "+format+"}", 1)
			path := writeConfig(t, dir, good)
			cfg, err := config.Load(path, envOf())
			if err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			logger := cfg.Log.NewLogger(&log)
			g, err := gateway.New(t.Context(), cfg, gateway.Options{Logger: logger, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close(context.Background()) })

			writeConfig(t, dir, good+"    ttl: soon\n    in_flight: later\n")
			reload(g, path, envOf(), logger)
			lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
			want := []string{
				"idemhook reload refused: the configuration is invalid; the running one keeps serving",
				"idemhook reload refused: configuration error", // ttl
				"idemhook reload refused: configuration error", // in_flight
			}
			if len(lines) != len(want) {
				t.Fatalf("%d records, want %d:\n%s", len(lines), len(want), log.String())
			}
			errs := []string{"", path + `:10: routes[0].ttl: invalid duration "soon"`, path + `:11: routes[0].in_flight: invalid in_flight "later"`}
			for i, l := range lines {
				var rec struct{ Msg, Err, Level string }
				var count int
				if format == "json" {
					var raw map[string]any
					if err := json.Unmarshal([]byte(l), &raw); err != nil {
						t.Fatalf("record %d is not JSON: %v\n%s", i, err, l)
					}
					rec.Msg, _ = raw["msg"].(string)
					rec.Err, _ = raw["err"].(string)
					rec.Level, _ = raw["level"].(string)
					n, _ := raw["errors"].(float64)
					count = int(n)
				} else {
					rec.Level, _, _ = strings.Cut(strings.TrimPrefix(l[strings.Index(l, "level="):], "level="), " ")
					if m := regexp.MustCompile(`msg="([^"]*)"`).FindStringSubmatch(l); m != nil {
						rec.Msg = m[1]
					}
					if m := regexp.MustCompile(`err="((?:[^"\\]|\\.)*)"`).FindStringSubmatch(l); m != nil {
						rec.Err, _ = strconv.Unquote(`"` + m[1] + `"`)
					}
					if m := regexp.MustCompile(` errors=(\d+)`).FindStringSubmatch(l); m != nil {
						count, _ = strconv.Atoi(m[1])
					}
				}
				if strings.Contains(l, `\n`) {
					t.Errorf("record %d holds an escaped line break: %s", i, l)
				}
				if rec.Level != "ERROR" || rec.Msg != want[i] || !strings.HasPrefix(rec.Err, errs[i]) {
					t.Errorf("record %d: level %q msg %q err %q; want ERROR, %q, an err starting %q", i, rec.Level, rec.Msg, rec.Err, want[i], errs[i])
				}
				if i == 0 && count != 2 {
					t.Errorf("the first record counts %d errors, want 2: %s", count, l)
				}
			}
		})
	}
}

// SIGINT while deliveries are at the upstream. Each is answered, the
// process exits 0 once they are, and each is in the audit trail.
func TestSIGINTDrains(t *testing.T) {
	up := newUpstream(t)
	arrived, release := make(chan struct{}, 100), make(chan struct{})
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		arrived <- struct{}{}
		<-release
		fmt.Fprintf(w, "call %d", n)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "idemhook.db")
	c := startProc(t, writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.Srv.URL, ""))))
	const n = 10
	answers := make(chan int, n)
	for i := range n {
		go func() {
			resp, err := http.Post(c.url("/webhooks/a"), "application/json", strings.NewReader(fmt.Sprintf(`{"id":%d}`, i)))
			if err != nil {
				t.Logf("delivery %d: %v", i, err)
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	for range n {
		<-arrived
	}
	c.signal(t, syscall.SIGINT)
	c.waitLog(t, "idemhook shutting down")
	close(release)
	for range n {
		if s := <-answers; s != 200 {
			t.Errorf("a delivery running at SIGINT got %d", s)
		}
	}
	if err := c.wait(t); err != nil {
		t.Fatalf("exit after SIGINT: %v\n%s", err, c.stderr)
	}
	if rows := auditRows(t, db); rows != n {
		t.Errorf("%d audit rows for %d answered deliveries", rows, n)
	}
}

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its
// key, and returns its serial number.
func writeCert(t *testing.T, certPath, keyPath string) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "idemhook test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return serial
}

// The TLS listener serves the certificate of the files, and a SIGHUP after
// they are renewed serves the new one to new connections, while an open
// connection goes on.
func TestTLSCertificateReloadedOnSIGHUP(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := writeCert(t, certPath, keyPath)
	cfg := fmt.Sprintf("tls: {cert: %s, key: %s}\n", certPath, keyPath) +
		signalConfig(filepath.Join(dir, "idemhook.db"), routeYAML("/webhooks/a", up.Srv.URL, ""))
	c := startProc(t, writeConfig(t, dir, cfg))

	serialOf := func(client *http.Client, body string) *big.Int {
		t.Helper()
		resp, err := client.Post("https://"+c.Listen+"/webhooks/a", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.TLS == nil {
			t.Fatalf("HTTPS delivery: %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber
	}
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test's self-signed certificate
	}
	kept := newClient()
	if got := serialOf(kept, `{"id":1}`); got.Cmp(first) != 0 {
		t.Fatalf("served certificate %v, want %v", got, first)
	}
	second := writeCert(t, certPath, keyPath)
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "idemhook configuration reloaded")
	if got := serialOf(newClient(), `{"id":2}`); got.Cmp(second) != 0 {
		t.Errorf("after the reload a new connection got certificate %v, want the renewed %v", got, second)
	}
	if got := serialOf(kept, `{"id":3}`); got.Cmp(first) != 0 {
		t.Errorf("the connection opened before the reload changed certificate: %v", got)
	}
	c.signal(t, syscall.SIGTERM)
	if err := c.wait(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}
