// Package integration holds tests that run the middleware against real
// servers. They cover Redis that is killed and restarted, Redis command
// counts, and the concurrency tests on every store.
package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/syncbuf"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
)

func newRedisStore(t testing.TB, url string) (*redisstore.Store, *redis.Client) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries, opts.DialerRetries = -1, 1 // redisstore's advice for a webhook path
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return st, client
}

func body(id string) string { return `{"id":"` + id + `","type":"payment.succeeded"}` }

func post(t testing.TB, client *http.Client, url, b string) (int, string, http.Header) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(b))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}

// TestRedisOutage kills the Redis the middleware uses while webhooks arrive.
// Every request must still get the handler's answer (fail-open). The
// middleware must log the NestJS guard's WARN messages that alerts match. The breaker must keep a
// dead Redis off the request path. Restarted, Redis deduplicates again.
func TestRedisOutage(t *testing.T) {
	redistest.URL(t) // the skip/fail rule: this test runs where Redis tests run
	srv := redistest.StartServer(t)
	store, _ := newRedisStore(t, srv.URL())

	logs := &syncbuf.Buffer{}
	var outcomes sync.Map // outcome -> *atomic.Int64
	count := func(o idemhook.Outcome) int64 {
		v, _ := outcomes.LoadOrStore(o, new(atomic.Int64))
		return v.(*atomic.Int64).Load()
	}
	var skipped, called atomic.Int64
	var breakerOpen atomic.Bool
	mw, err := idemhook.New(store, idemhook.Options{
		Logger:          slog.New(slog.NewTextHandler(logs, nil)),
		BreakerCooldown: 200 * time.Millisecond,
		OnBreakerChange: breakerOpen.Store,
		OnDelivery: func(d idemhook.DeliveryInfo) {
			v, _ := outcomes.LoadOrStore(d.Outcome, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		},
		OnStoreCall: func(c idemhook.StoreCallInfo) {
			if c.Skipped {
				skipped.Add(1)
			} else {
				called.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "stone"})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var killDuringHandler atomic.Bool
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if killDuringHandler.CompareAndSwap(true, false) {
			srv.Kill() // Redis dies between the claim and the write of the response
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"run":%d}`, n)
	})
	bare := httptest.NewServer(handler)
	defer bare.Close()
	mux := http.NewServeMux() // a fixed route: the guard's unscoped keys
	mux.Handle("/{$}", route(handler))
	protected := httptest.NewServer(mux)
	defer protected.Close()
	client := protected.Client()

	// Redis up: duplicates are replayed.
	for i := range 20 {
		for range 2 {
			if code, _, _ := post(t, client, protected.URL, body("up-"+strconv.Itoa(i))); code != 200 {
				t.Fatalf("status %d with Redis up", code)
			}
		}
	}
	if got := runs.Load(); got != 20 {
		t.Fatalf("Redis up: handler ran %d times for 20 events sent twice, want 20", got)
	}

	// Redis dies while a delivery runs: its response can't be stored.
	killDuringHandler.Store(true)
	if code, _, _ := post(t, client, protected.URL, body("during")); code != 200 {
		t.Fatalf("status %d for the delivery that saw Redis die", code)
	}
	if !strings.Contains(logs.String(), `msg="WebhookIdempotencyInterceptor cache write failed for key=idem:stone:sha256:`) {
		t.Fatalf("no cache write WARN after Redis died mid-delivery; logs:\n%s", logs)
	}

	// Redis down: every request still reaches the handler and gets its answer.
	const down = 300
	runsBefore := runs.Load()
	downLatency := make([]time.Duration, 0, down)
	for i := range down {
		start := time.Now()
		code, got, _ := post(t, client, protected.URL, body("down-"+strconv.Itoa(i%50)))
		downLatency = append(downLatency, time.Since(start))
		if code != 200 || !strings.HasPrefix(got, `{"run":`) {
			t.Fatalf("request %d with Redis down: %d %q", i, code, got)
		}
	}
	if got := runs.Load() - runsBefore; got != down {
		t.Fatalf("Redis down: handler ran %d times for %d requests; fail-open must run it every time", got, down)
	}
	if !strings.Contains(logs.String(), `msg="WebhookIdempotencyGuard Redis error for key=idem:stone:sha256:`) {
		t.Fatalf("no Redis error WARN; logs:\n%s", logs)
	}
	if skipped.Load() == 0 {
		t.Fatalf("the breaker never skipped the dead store (%d calls made)", called.Load())
	}
	if got := count(idemhook.OutcomeStoreErrorOpen); got != down {
		t.Fatalf("store_error_open outcomes = %d, want %d", got, down)
	}
	bareLatency := make([]time.Duration, 0, down)
	for i := range down {
		start := time.Now()
		post(t, bare.Client(), bare.URL, body("bare-"+strconv.Itoa(i)))
		bareLatency = append(bareLatency, time.Since(start))
	}
	t.Logf("Redis down, %d requests: p50 %v p99 %v max %v; bare handler: p50 %v p99 %v max %v; store calls made %d, skipped by the breaker %d",
		down, pct(downLatency, 50), pct(downLatency, 99), pct(downLatency, 100),
		pct(bareLatency, 50), pct(bareLatency, 99), pct(bareLatency, 100), called.Load(), skipped.Load())

	// Redis comes back empty, because it keeps nothing on disk. After the
	// cooldown a probe closes the breaker and deduplication resumes.
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for breakerOpen.Load() && time.Now().Before(deadline) {
		post(t, client, protected.URL, body("probe-"+strconv.FormatInt(time.Now().UnixNano(), 10)))
		time.Sleep(50 * time.Millisecond)
	}
	if breakerOpen.Load() {
		t.Fatal("the breaker did not close within 10s of Redis coming back")
	}
	runsBefore = runs.Load()
	_, first, _ := post(t, client, protected.URL, body("after"))
	_, second, h := post(t, client, protected.URL, body("after"))
	if runs.Load()-runsBefore != 1 || first != second || h.Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("after restart: handler ran %d times, %q vs %q, replayed %q", runs.Load()-runsBefore, first, second, h.Get(idemhook.ReplayedHeader))
	}
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

// TestRedisCorruptValue checks a value that isn't an idemhook record (say,
// left by another writer). It gives the NestJS guard's parse-error WARN,
// and the handler runs.
func TestRedisCorruptValue(t *testing.T) {
	store, client := newRedisStore(t, redistest.URL(t))
	logs := &syncbuf.Buffer{}
	mw, err := idemhook.New(store, idemhook.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	route, _ := mw.Route(idemhook.Route{Source: "stone"})
	var runs atomic.Int64
	h := http.NewServeMux() // a fixed route: the guard's unscoped keys
	h.Handle("/{$}", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) })))

	b := body("corrupt-" + strconv.FormatInt(time.Now().UnixNano(), 10))
	key := idemhook.StoreKey("stone", idemhook.BodyKey([]byte(b)))
	if err := client.Set(t.Context(), key, `{"statusCode":200}`, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.Background(), key) })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(b)))
	if rec.Code != 200 || runs.Load() != 1 {
		t.Fatalf("status %d, handler ran %d times", rec.Code, runs.Load())
	}
	if !strings.Contains(logs.String(), `msg="WebhookIdempotencyGuard cached value parse error for key=`+key) {
		t.Fatalf("no parse error WARN; logs:\n%s", logs)
	}
}

// commandCalls sums INFO commandstats calls, leaving out the commands the
// measurement itself sends.
func commandCalls(t testing.TB, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || name == "config|resetstat" || name == "ping" || name == "hello" || name == "client|setinfo" {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		out[name] = n
	}
	return out
}

// commandCounter is a go-redis hook that counts the commands the client
// sends, one per round trip (scripts count once, whatever they call inside).
type commandCounter struct {
	mu    sync.Mutex
	names []string
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.names = append(c.names, cmd.Name())
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		for _, cmd := range cmds {
			c.names = append(c.names, cmd.Name())
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (c *commandCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}

// TestRedisCommandsPerDelivery counts, on a private server, the commands a
// first delivery and a duplicate send. docs/design.md (Targets) says 2 and 1. It
// counts on the client (round trips) and logs the server's commandstats,
// which also count the commands a script runs inside Redis.
func TestRedisCommandsPerDelivery(t *testing.T) {
	redistest.URL(t)
	srv := redistest.StartServer(t)
	store, client := newRedisStore(t, srv.URL())
	counter := &commandCounter{}
	client.AddHook(counter)
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		t.Fatal(err)
	}
	route, _ := mw.Route(idemhook.Route{Source: "stone"})
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	deliver := func(b string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(b)))
		if rec.Code != 200 {
			t.Fatalf("status %d", rec.Code)
		}
	}
	deliver(body("warm-up")) // loads the Lua script once (EVALSHA falls back to EVAL)
	counter.take()

	stats := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer stats.Close()
	measure := func(b string) ([]string, map[string]int) {
		if err := stats.ConfigResetStat(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		deliver(b)
		return counter.take(), commandCalls(t, stats)
	}
	first, firstServer := measure(body("evt-1"))
	dup, dupServer := measure(body("evt-1"))
	t.Logf("first delivery: client sent %v, server commandstats %v", first, firstServer)
	t.Logf("duplicate:      client sent %v, server commandstats %v", dup, dupServer)
	if fmt.Sprint(first) != "[set evalsha]" {
		t.Fatalf("first delivery sent %v, want one SET (claim) and one EVALSHA (complete)", first)
	}
	if fmt.Sprint(dup) != "[set]" || fmt.Sprint(dupServer) != "map[set:1]" {
		t.Fatalf("duplicate sent %v (server saw %v), want one SET", dup, dupServer)
	}
	if firstServer["evalsha"] != 1 || firstServer["set"] < 1 {
		t.Fatalf("server saw %v for a first delivery", firstServer)
	}
}
