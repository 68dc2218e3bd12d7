package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// startGateway serves a gateway built from the configuration text and
// returns its URL; the gateway is closed when the test ends unless the
// test closes it first through the returned function.
func startGateway(t testing.TB, text string) (string, *gateway.Gateway, func()) {
	t.Helper()
	cfg, err := config.Parse("idemhook.yaml", []byte(text), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	return serveConfig(t, cfg)
}

// serveConfig is startGateway on a configuration already parsed.
func serveConfig(t testing.TB, cfg *config.Config) (string, *gateway.Gateway, func()) {
	t.Helper()
	g, err := gateway.New(t.Context(), cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(g.Handler())
	srv.Config.BaseContext = func(net.Listener) context.Context { return g.Context() }
	srv.Start()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return srv.URL, g, stop
}

// testWriter sends the gateway's log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// backend counts the successful deliveries of each Idempotency-Key and
// fails every attempt while down.
type backend struct {
	up        *gatewaytest.Upstream
	down      atomic.Bool
	mu        sync.Mutex
	delivered map[string]int      // successful deliveries per key
	order     map[string][]string // group -> bodies delivered, in order
	attempts  map[string][]int    // key -> attempt numbers seen
}

func newBackend(t *testing.T) *backend {
	b := &backend{up: gatewaytest.NewUpstream(t), delivered: map[string]int{}, order: map[string][]string{}, attempts: map[string][]int{}}
	b.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		key := r.Header.Get(gateway.HeaderIdempotencyKey)
		attempt, _ := strconv.Atoi(r.Header.Get(gateway.HeaderAttempt))
		b.mu.Lock()
		b.attempts[key] = append(b.attempts[key], attempt)
		b.mu.Unlock()
		if b.down.Load() {
			http.Error(w, "deploy gone wrong", http.StatusServiceUnavailable)
			return
		}
		body := b.up.Received()[n-1].Body // Upstream read it
		b.mu.Lock()
		b.delivered[key]++
		if g := r.Header.Get("X-Group"); g != "" {
			b.order[g] = append(b.order[g], string(body))
		}
		b.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
	return b
}

func (b *backend) count() (keys, deliveries int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.delivered {
		keys++
		deliveries += n
	}
	return keys, deliveries
}

func queueConfig(dir, upstream string, queue string) string {
	return gatewaytest.QueueConfig(fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(dir, "idemhook.db")), upstream, queue)
}

// The backend is down while events arrive: each is answered 202 at once,
// a re-delivery is replayed the same answer and queued no second time, and
// once the backend is back every event reaches it exactly once, in order
// within its group, with its Idempotency-Key on every attempt.
func TestQueueDeliversOnceAfterAnOutage(t *testing.T) {
	b := newBackend(t)
	b.down.Store(true)
	url, g, _ := startGateway(t, queueConfig(t.TempDir(), b.up.Srv.URL, `backoff_min: 20ms, backoff_max: 200ms, order_by: "header:X-Group"`))

	const events = 60
	for i := range events {
		r := gatewaytest.Post(t, url+"/webhooks/test", fmt.Sprintf(`{"n":%d}`, i), "X-Event-Id", fmt.Sprint("evt-", i), "X-Group", fmt.Sprint("g", i%3))
		if r.Status != http.StatusAccepted || r.Body != config.DefaultAcceptBody || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("event %d: %d %q %v; want 202 with the accept body", i, r.Status, r.Body, r.Header)
		}
	}
	for i := range 10 { // the provider's retries
		r := gatewaytest.Post(t, url+"/webhooks/test", fmt.Sprintf(`{"n":%d}`, i), "X-Event-Id", fmt.Sprint("evt-", i), "X-Group", fmt.Sprint("g", i%3))
		if r.Status != http.StatusAccepted || r.Body != config.DefaultAcceptBody || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("re-delivery %d: %d %q %v; want the accept answer replayed", i, r.Status, r.Body, r.Header)
		}
	}
	testutil.Eventually(t, "attempts while the backend is down", func() bool { return b.up.Calls.Load() >= 3 })
	b.down.Store(false)
	testutil.Eventually(t, "every event delivered", func() bool { k, _ := b.count(); return k == events })
	queueDrained(t, g) // a second delivery would come before
	keys, deliveries := b.count()
	if keys != events || deliveries != events {
		t.Fatalf("%d keys in %d deliveries; want %d once each", keys, deliveries, events)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, attempts := range b.attempts {
		if !strings.HasPrefix(key, "idem:test:evt-") {
			t.Fatalf("Idempotency-Key %q; want the event's store key", key)
		}
		for i := 1; i < len(attempts); i++ {
			if attempts[i] != attempts[i-1]+1 {
				t.Fatalf("%s: attempts %v; want 1, 2, 3...", key, attempts)
			}
		}
	}
	for g, bodies := range b.order {
		last := -1
		for _, body := range bodies {
			var n int
			fmt.Sscanf(body, `{"n":%d}`, &n)
			if n <= last {
				t.Fatalf("group %s delivered out of order: %v", g, bodies)
			}
			last = n
		}
	}
}

// A full queue answers a new event 503 with Retry-After (its claim
// released), so the provider keeps the event; once there is room the retry
// is accepted.
func TestQueueFullAnswers503(t *testing.T) {
	b := newBackend(t)
	b.down.Store(true)
	url, _, _ := startGateway(t, queueConfig(t.TempDir(), b.up.Srv.URL, `max_queued: 3, backoff_min: 20ms, backoff_max: 50ms`))
	for i := range 3 {
		if r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", fmt.Sprint("e", i)); r.Status != http.StatusAccepted {
			t.Fatalf("event %d: %d", i, r.Status)
		}
	}
	r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", "e3")
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("over max_queued: %d %v; want 503 with Retry-After", r.Status, r.Header)
	}
	b.down.Store(false)
	testutil.Eventually(t, "the queue drained", func() bool { k, _ := b.count(); return k == 3 })
	testutil.Eventually(t, "room again", func() bool {
		return gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", "e3").Status == http.StatusAccepted
	})
	testutil.Eventually(t, "the refused event delivered", func() bool { k, _ := b.count(); return k == 4 })
	if _, n := b.count(); n != 4 {
		t.Fatalf("%d deliveries; want 4", n)
	}
}

// Events still queued when the gateway stops are delivered by the next one
// on the same file.
func TestQueueSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t)
	b.down.Store(true)
	settings := `backoff_min: 50ms, backoff_max: 100ms`
	url, _, stop := startGateway(t, queueConfig(dir, b.up.Srv.URL, settings))
	for i := range 5 {
		if r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", fmt.Sprint("e", i)); r.Status != http.StatusAccepted {
			t.Fatalf("event %d: %d", i, r.Status)
		}
	}
	testutil.Eventually(t, "first attempts", func() bool { return b.up.Calls.Load() >= 5 })
	stop()
	b.down.Store(false)
	_, g, _ := startGateway(t, queueConfig(dir, b.up.Srv.URL, settings))
	testutil.Eventually(t, "delivered after the restart", func() bool { k, _ := b.count(); return k == 5 })
	queueDrained(t, g)
	if _, n := b.count(); n != 5 {
		t.Fatalf("%d deliveries; want 5", n)
	}
}

// An attempt still running when the shutdown bound ends is cut short and
// queued again, due at once: the next gateway sends it with the same
// Idempotency-Key and the next attempt number.
func TestQueueShutdownCutsAndRequeues(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t)
	release := make(chan struct{})
	var hold atomic.Bool
	hold.Store(true)
	inner := b.up.Handle
	b.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if hold.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		inner(w, r, n)
	}
	defer close(release)
	cfg, err := config.Parse("idemhook.yaml", []byte(queueConfig(dir, b.up.Srv.URL, `attempt_timeout: 1m`)), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(t.Context(), cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	if r := gatewaytest.Post(t, srv.URL+"/webhooks/test", "{}", "X-Event-Id", "slow"); r.Status != http.StatusAccepted {
		t.Fatalf("accept: %d", r.Status)
	}
	testutil.Eventually(t, "the first attempt running", func() bool { return b.up.Calls.Load() == 1 })
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	g.Close(ctx) //nolint:errcheck // the bound passes on purpose

	hold.Store(false)
	startGateway(t, queueConfig(dir, b.up.Srv.URL, `attempt_timeout: 1m`))
	testutil.Eventually(t, "delivered after the restart", func() bool { k, _ := b.count(); return k == 1 })
	var got []string
	for _, r := range b.up.Received() {
		if r.Header.Get(gateway.HeaderIdempotencyKey) != "idem:test:slow" {
			t.Fatalf("a request with Idempotency-Key %q", r.Header.Get(gateway.HeaderIdempotencyKey))
		}
		got = append(got, r.Header.Get(gateway.HeaderAttempt))
	}
	if strings.Join(got, ",") != "1,2" {
		t.Fatalf("attempts %v; want 1 (cut short) then 2", got)
	}
}

// Two gateways share one queue on PostgreSQL in front of a backend that
// fails one attempt in five: each event is delivered exactly once.
func TestQueueTwoGatewaysOnPostgres(t *testing.T) {
	pgURL := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if pgURL == "" {
		t.Skip("IDEMHOOK_POSTGRES_URL not set")
	}
	b := newBackend(t)
	inner := b.up.Handle
	b.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if n%5 == 0 {
			http.Error(w, "flaky", http.StatusInternalServerError)
			return
		}
		inner(w, r, n)
	}
	table := fmt.Sprintf("q_two_%d", time.Now().UnixNano())
	text := gatewaytest.QueueConfig(fmt.Sprintf("driver: postgres, url: %q, table: %s", pgURL, table), b.up.Srv.URL, "backoff_min: 20ms, backoff_max: 100ms")
	url1, g1, _ := startGateway(t, text)
	url2, _, _ := startGateway(t, text)
	const events = 100
	for i := range events {
		url := url1
		if i%2 == 1 {
			url = url2
		}
		if r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", fmt.Sprint("e", i)); r.Status != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, r.Status, r.Body)
		}
		// the provider's retry, to the other gateway
		other := url2
		if url == url2 {
			other = url1
		}
		if r := gatewaytest.Post(t, other+"/webhooks/test", "{}", "X-Event-Id", fmt.Sprint("e", i)); r.Status != http.StatusAccepted || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry of event %d on the other gateway: %d %v", i, r.Status, r.Header)
		}
	}
	testutil.Eventually(t, "every event delivered", func() bool { k, _ := b.count(); return k == events })
	queueDrained(t, g1) // the queue both share
	if k, n := b.count(); k != events || n != events {
		t.Fatalf("%d events in %d deliveries; want %d once each", k, n, events)
	}
}

// hybridConfig's budget is long enough for a backend that answers at once
// to be answered within it on a loaded machine; TestRespondWithin's slow
// backends answer only once the provider has had the accept answer.
func hybridConfig(dir, upstream string) string {
	return strings.Replace(queueConfig(dir, upstream, "backoff_min: 20ms, backoff_max: 100ms"), "    deliver: queue\n", "    respond_within: 3s\n", 1)
}

// respond_within: a backend that answers within the budget is answered as
// by a proxy route; one that takes longer leaves the provider with the
// accept answer at the budget, and its own answer settles the event: a
// success delivers it, a failure is retried from the queue.
func TestRespondWithin(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	var attempts sync.Map // key -> []string
	// The slow backends answer once the test lets them, after the provider
	// was answered at the budget: past it however fast the machine is.
	slowOK, slowFail := make(chan struct{}), make(chan struct{})
	var okOnce, failOnce sync.Once
	letOK := func() { okOnce.Do(func() { close(slowOK) }) }
	letFail := func() { failOnce.Do(func() { close(slowFail) }) }
	t.Cleanup(letOK)
	t.Cleanup(letFail)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		key := r.Header.Get(gateway.HeaderIdempotencyKey)
		prev, _ := attempts.Load(key)
		list, _ := prev.([]string)
		attempts.Store(key, append(list, r.Header.Get(gateway.HeaderAttempt)))
		switch {
		case strings.HasSuffix(key, "fast"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"made":"fast"}`)
		case strings.HasSuffix(key, "slow-ok"):
			<-slowOK
			w.WriteHeader(http.StatusOK)
		case strings.HasSuffix(key, "slow-fail") && len(list) == 0:
			<-slowFail
			http.Error(w, "failed late", http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}
	url, g, _ := startGateway(t, hybridConfig(t.TempDir(), up.Srv.URL))
	post := func(id string) gatewaytest.Response {
		return gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", id)
	}
	seen := func(id string) string {
		v, _ := attempts.Load("idem:test:" + id)
		list, _ := v.([]string)
		return strings.Join(list, ",")
	}

	if r := post("fast"); r.Status != http.StatusCreated || r.Body != `{"made":"fast"}` {
		t.Fatalf("fast backend: %d %q; want its own 201", r.Status, r.Body)
	}
	if r := post("fast"); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-delivery of the fast one: %d %v; want its 201 replayed", r.Status, r.Header)
	}
	if r := post("slow-ok"); r.Status != http.StatusAccepted || r.Body != config.DefaultAcceptBody {
		t.Fatalf("slow backend: %d %q; want the accept answer at the budget", r.Status, r.Body)
	}
	if r := post("slow-ok"); r.Status != http.StatusAccepted || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-delivery of the slow one: %d %v; want the accept answer replayed", r.Status, r.Header)
	}
	letOK()
	if r := post("slow-fail"); r.Status != http.StatusAccepted {
		t.Fatalf("slow failing backend: %d; want the accept answer", r.Status)
	}
	letFail()
	testutil.Eventually(t, "the late failure retried from the queue", func() bool { return seen("slow-fail") == "1,2" })
	queueDrained(t, g) // the slow success settles; a retry would come before
	if got := seen("slow-ok"); got != "1" {
		t.Fatalf("slow-ok attempts %q; want 1 only: its late 200 delivered it", got)
	}
	if got := seen("fast"); got != "1" {
		t.Fatalf("fast attempts %q; want 1", got)
	}
	if got := seen("slow-fail"); got != "1,2" {
		t.Fatalf("slow-fail attempts %q; want 1,2", got)
	}
}

// The end of each queued event is in the audit trail: the backend's answer
// to the attempt that delivered it, or why it is dead; the console's counts
// of the provider's deliveries leave them out.
func TestQueueEndsInTheAuditTrail(t *testing.T) {
	b := newBackend(t)
	inner := b.up.Handle
	b.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if strings.HasSuffix(r.Header.Get(gateway.HeaderIdempotencyKey), "bad") {
			http.Error(w, "no such order", http.StatusUnprocessableEntity)
			return
		}
		inner(w, r, n)
	}
	text := strings.Replace(queueConfig(t.TempDir(), b.up.Srv.URL, ""), "audit: {sink: none}\n", "", 1)
	url, g, _ := startGateway(t, text)
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	for _, id := range []string{"good", "bad"} {
		if r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", id); r.Status != http.StatusAccepted {
			t.Fatalf("%s: %d", id, r.Status)
		}
	}
	var got map[string]adminapi.Delivery
	testutil.Eventually(t, "both ends in the trail", func() bool {
		page := gatewaytest.DecodeJSON[adminapi.Deliveries](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/deliveries", ""))
		got = map[string]adminapi.Delivery{}
		for _, d := range page.Deliveries {
			got[d.Outcome+" "+d.Key] = d
		}
		return len(got) == 4
	})
	if d, ok := got["queue_delivered good"]; !ok || d.Status != http.StatusOK || d.Source != "test" || !strings.Contains(d.Reason, "attempt 1") {
		t.Errorf("delivered entry %+v; want the backend's 200 for key good", d)
	}
	if d, ok := got["queue_dead bad"]; !ok || d.Status != http.StatusUnprocessableEntity || !strings.Contains(d.Reason, "422, which is not retried") {
		t.Errorf("dead entry %+v; want the backend's 422 and the reason", d)
	}
	if _, ok := got["processed good"]; !ok {
		t.Errorf("entries %v; want the provider's delivery too (processed)", got)
	}
	for _, tt := range []struct{ give, want string }{
		{"queue_dead", "bad"},
		{"queue_delivered", "good"},
	} {
		r := gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/deliveries?outcome="+tt.give, "")
		if r.Status != http.StatusOK {
			t.Errorf("?outcome=%s: %d %s; want 200", tt.give, r.Status, r.Body)
			continue
		}
		page := gatewaytest.DecodeJSON[adminapi.Deliveries](t, r)
		if len(page.Deliveries) != 1 || page.Deliveries[0].Key != tt.want || page.Deliveries[0].Outcome != tt.give {
			t.Errorf("?outcome=%s: %+v; want the one entry of key %s", tt.give, page.Deliveries, tt.want)
		}
	}
	st := gatewaytest.DecodeJSON[adminapi.Stats](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/stats", ""))
	if s := gatewaytest.SourceStats(t, st, "test"); s.Hour.Total != 2 || s.Hour.Processed != 2 || s.Hour.Other != 0 {
		t.Errorf("stats %+v; want the 2 provider deliveries only", s.Hour)
	}
}

// A reload keeps the queue: a route taken out of the file stops
// delivering and its events wait in the store; back in the file, with new
// settings, its events are there, and a redrive delivers each once.
func TestQueueKeptAcrossReloads(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t)
	b.down.Store(true)
	// Short waits: while the route is in the file its events are tried
	// again at least once a second (the breaker's probe).
	url, g, _ := startGateway(t, queueConfig(dir, b.up.Srv.URL, `backoff_min: 10ms, backoff_max: 20ms`))
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	for i := range 3 {
		if r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", fmt.Sprint("e", i)); r.Status != http.StatusAccepted {
			t.Fatalf("event %d: %d", i, r.Status)
		}
	}
	testutil.Eventually(t, "retries while the backend is down", func() bool { return b.up.Calls.Load() >= 6 })
	reload := func(text string) {
		t.Helper()
		cfg, err := config.Parse("idemhook.yaml", []byte(text), gatewaytest.EnvOf())
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	reload(strings.Replace(queueConfig(dir, b.up.Srv.URL, ""), "/webhooks/test", "/webhooks/elsewhere", 1))
	// An attempt that was running when the route left ends (failing: the
	// backend is still down) before the backend comes back: the backend's
	// count stays still for half a second. On a loaded machine such an
	// attempt can take longer than any fixed pause.
	stable, last := 0, b.up.Calls.Load()
	for deadline := time.Now().Add(10 * time.Second); stable < 5 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if n := b.up.Calls.Load(); n != last {
			stable, last = 0, n
		} else {
			stable++
		}
	}
	b.down.Store(false)
	calls := b.up.Calls.Load()
	if r := gatewaytest.Post(t, admin.URL+"/admin/queue/redrive", `{"route":"/webhooks/test"}`); r.Status != http.StatusBadRequest {
		t.Fatalf("redrive of a route no longer in the file: %d %s; want 400", r.Status, r.Body)
	}
	// Due at once and the backend up: a route still delivering would have
	// sent them within its one-second probe.
	time.Sleep(1500 * time.Millisecond)
	if n := b.up.Calls.Load(); n != calls {
		t.Fatalf("%d attempts after the route left the file", n-calls)
	}
	if k, _ := b.count(); k != 0 {
		t.Fatalf("%d events delivered after the route left the file", k)
	}
	// Back in the file with long waits and the backend down again: each
	// event fails once more and waits an hour, kept until a redrive.
	b.down.Store(true)
	reload(queueConfig(dir, b.up.Srv.URL, `backoff_min: 1h, backoff_max: 1h`))
	var q adminapi.Queue
	testutil.Eventually(t, "the 3 kept events retrying", func() bool {
		q = gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/queue", ""))
		return len(q.Routes) == 1 && q.Routes[0].Retrying == 3
	})
	if len(q.Routes) != 1 || q.Routes[0].Retrying != 3 {
		t.Fatalf("queue after the route came back: %+v; want its 3 retries kept", q)
	}
	// Paused while the backend comes back, so that the breaker's probe
	// (one attempt a second) can't take an event before the redrive
	// counts them: a loaded machine met that.
	if r := gatewaytest.Post(t, admin.URL+"/admin/queue/pause", `{"route":"/webhooks/test"}`); r.Status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	testutil.Eventually(t, "no attempt running", func() bool {
		q = gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/queue", ""))
		return len(q.Routes) == 1 && q.Routes[0].Running == 0 && q.Routes[0].Retrying == 3
	})
	b.down.Store(false)
	if r := gatewaytest.Post(t, admin.URL+"/admin/queue/redrive", `{"route":"/webhooks/test","state":"queued"}`); r.Status != http.StatusOK || !strings.Contains(strings.Join(strings.Fields(r.Body), ""), `"redriven":3`) {
		t.Fatalf("redrive: %d %s", r.Status, r.Body)
	}
	if r := gatewaytest.Post(t, admin.URL+"/admin/queue/resume", `{"route":"/webhooks/test"}`); r.Status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.Status, r.Body)
	}
	testutil.Eventually(t, "the 3 kept events delivered", func() bool { k, _ := b.count(); return k == 3 })
	queueDrained(t, g)
	if k, n := b.count(); k != 3 || n != 3 {
		t.Fatalf("%d events in %d deliveries; want 3 once each", k, n)
	}
}

// queueDrained waits until no queued route of g holds an event that is
// not dead (its admin API reads the engine itself): from then on no attempt
// can come, so the backend's counts are final.
func queueDrained(t *testing.T, g *gateway.Gateway) {
	t.Helper()
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	testutil.Eventually(t, "the queue drained", func() bool {
		q := gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/queue", ""))
		for _, r := range q.Routes {
			if r.Queued+r.Retrying+r.Running != 0 {
				return false
			}
		}
		return true
	})
}

// A handshake (Meta's GET subscription challenge) on a queued route is
// answered at once by its preset, and nothing is queued or sent.
func TestQueueAnswersHandshakesAtOnce(t *testing.T) {
	b := newBackend(t)
	text := strings.Replace(queueConfig(t.TempDir(), b.up.Srv.URL, ""), "    header: x-event-id\n",
		"    provider: whatsapp-cloud\n    secrets: [app-secret]\n    provider_options: {verify_token: tok}\n", 1)
	url, g, _ := startGateway(t, text)
	r := gatewaytest.Do(t, http.MethodGet, url+"/webhooks/test?hub.mode=subscribe&hub.verify_token=tok&hub.challenge=1158201444", "")
	if r.Status != http.StatusOK || r.Body != "1158201444" {
		t.Fatalf("challenge: %d %q; want 200 with the challenge", r.Status, r.Body)
	}
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	q := gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/queue", ""))
	if len(q.Routes) != 1 || q.Routes[0].Queued+q.Routes[0].Running+q.Routes[0].Retrying+q.Routes[0].Dead != 0 {
		t.Fatalf("queue after a handshake: %+v; want it empty", q.Routes)
	}
	if n := b.up.Calls.Load(); n != 0 {
		t.Fatalf("the backend got %d requests; want none", n)
	}
}

// fenceConfig has a proxy route, a respond_within route and a queued route
// (/proxy, /hybrid, /queued; keyed by X-Event-Id) in front of upstream, on
// the store of storeLine.
func fenceConfig(storeLine, upstream string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {%s}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /proxy
    upstream: %[2]s/hook
    source: proxy
    header: x-event-id
  - path: /hybrid
    upstream: %[2]s/hook
    source: hybrid
    header: x-event-id
    respond_within: 300ms
    queue: {backoff_min: 20ms, backoff_max: 100ms}
  - path: /queued
    upstream: %[2]s/hook
    source: queued
    header: x-event-id
    deliver: queue
    queue: {backoff_min: 20ms, backoff_max: 100ms}
`, storeLine, upstream)
}

// The backend gets an Idempotent-Fence with every attempt, the one the
// provider sent dropped, and a later attempt of a key always carries a
// larger one than an earlier: the retry of a failed proxied delivery (a new
// claim), the queue's retry of a respond_within route's first attempt,
// sent on the proxy path with the claim's fence, and a queued retry. On
// SQLite, and on PostgreSQL (the database's clock) when
// IDEMHOOK_POSTGRES_URL is set.
func TestFenceHeader(t *testing.T) {
	stores := []struct {
		name string
		line func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string {
			return fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(t.TempDir(), "idemhook.db"))
		}},
		{"postgres", func(t *testing.T) string {
			pool := pgtest.Pool(t)
			table := pgtest.Table(t, pool, "idemhook_fence")
			t.Cleanup(func() {
				for _, suffix := range []string{"_queue_attempts", "_queue_routes", "_queue"} {
					pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+suffix) //nolint:errcheck // best effort
				}
			})
			return fmt.Sprintf("driver: postgres, url: %q, table: %s", pgtest.URL(t), table)
		}},
	}
	const forged = "18446744073709551615"
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			type seen struct{ attempt, fence string }
			var (
				mu       sync.Mutex
				attempts = map[string][]seen{} // by X-Event-Id
			)
			up := gatewaytest.NewUpstream(t)
			up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
				id := r.Header.Get("X-Event-Id")
				mu.Lock()
				attempts[id] = append(attempts[id], seen{r.Header.Get(gateway.HeaderAttempt), r.Header.Get(gateway.HeaderFence)})
				first := len(attempts[id]) == 1
				mu.Unlock()
				switch {
				case first && id == "hybrid":
					time.Sleep(time.Second) // past respond_within: the queue settles it
					fallthrough
				case first:
					http.Error(w, "failed", http.StatusInternalServerError)
				default:
					w.WriteHeader(http.StatusOK)
				}
			}
			url, g, _ := startGateway(t, fenceConfig(st.line(t), up.Srv.URL))
			send := func(route string) gatewaytest.Response {
				return gatewaytest.Post(t, url+"/"+route, "{}", "X-Event-Id", route, gateway.HeaderFence, forged)
			}
			if r := send("proxy"); r.Status != http.StatusInternalServerError {
				t.Fatalf("proxy, first delivery: %d; want the backend's 500", r.Status)
			}
			if r := send("proxy"); r.Status != http.StatusOK {
				t.Fatalf("proxy, the provider's retry: %d; want 200", r.Status)
			}
			if r := send("hybrid"); r.Status != http.StatusAccepted {
				t.Fatalf("respond_within: %d; want the accept answer at the budget", r.Status)
			}
			if r := send("queued"); r.Status != http.StatusAccepted {
				t.Fatalf("queued: %d; want the accept answer", r.Status)
			}
			done := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(attempts["hybrid"]) == 2 && len(attempts["queued"]) == 2
			}
			testutil.Eventually(t, "the queue's retries", done)
			queueDrained(t, g) // a further attempt would come before
			mu.Lock()
			defer mu.Unlock()
			for _, id := range []string{"proxy", "hybrid", "queued"} {
				got := attempts[id]
				if len(got) != 2 {
					t.Fatalf("%s: attempts %+v; want 2", id, got)
				}
				var fences [2]uint64
				for i, a := range got {
					f, err := strconv.ParseUint(a.fence, 10, 64)
					if err != nil || f == 0 || a.fence == forged {
						t.Fatalf("%s: attempt %d carried %s %q; want a fence of the gateway's, not the provider's", id, i+1, gateway.HeaderFence, a.fence)
					}
					fences[i] = f
				}
				if fences[1] <= fences[0] {
					t.Fatalf("%s: fences %d then %d; want the later attempt's larger", id, fences[0], fences[1])
				}
				if id != "proxy" && (got[0].attempt != "1" || got[1].attempt != "2") {
					t.Fatalf("%s: attempts %+v; want 1 then 2", id, got)
				}
			}
		})
	}
}
