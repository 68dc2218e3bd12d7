package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// queuePending reads, through the admin API (which reads the engine
// itself), the events of the gateway's queued routes not yet delivered.
func queuePending(t *testing.T, adminURL string) int64 {
	t.Helper()
	q := gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, adminURL+"/admin/queue", ""))
	var n int64
	for _, r := range q.Routes {
		n += r.Queued + r.Retrying + r.Running
	}
	return n
}

// sendAll sends each event once from senders concurrent senders, and
// returns the events answered 503 (the provider keeps them); it adds the
// 202s to accepted. Any other answer fails the test.
func sendAll(t *testing.T, url string, ids []string, senders int, accepted *atomic.Int64) []string {
	t.Helper()
	work := make(chan string)
	var (
		mu      sync.Mutex
		refused []string
		wg      sync.WaitGroup
	)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				r := gatewaytest.Post(t, url, `{"id":"`+id+`"}`, "X-Event-Id", id)
				switch r.Status {
				case http.StatusAccepted:
					accepted.Add(1)
				case http.StatusServiceUnavailable:
					mu.Lock()
					refused = append(refused, id)
					mu.Unlock()
				default:
					t.Errorf("event %s: %d %s", id, r.Status, r.Body)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return refused
}

// max_queued is a bound under concurrency: 32 senders of distinct events
// against a route with max_queued 200, whose backend is down so that
// nothing leaves the queue, get exactly 200 events accepted, however the
// accepts interleave (before the bound reserved a place ahead of each
// write, concurrent accepts read the same last free place: 228 got in).
// The senders send the refused events again, as a provider would, until
// the queue holds 200; the accepts never pass 200, and once it holds 200
// every event is refused.
func TestQueueMaxQueuedIsABoundUnderConcurrency(t *testing.T) {
	const maxQueued, senders, events = 200, 32, 400
	b := newBackend(t)
	b.down.Store(true)
	url, g, _ := startGateway(t, queueConfig(t.TempDir(), b.up.Srv.URL, fmt.Sprintf("max_queued: %d, backoff_min: 1h, backoff_max: 1h", maxQueued)))
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	ids := make([]string, events)
	for i := range ids {
		ids[i] = fmt.Sprint("e", i)
	}
	var accepted atomic.Int64
	refused := sendAll(t, url+"/webhooks/test", ids, senders, &accepted)
	if n := accepted.Load(); n > maxQueued {
		t.Fatalf("%d events accepted by %d concurrent senders; max_queued is %d", n, senders, maxQueued)
	}
	// A count of the store's that overlapped accepts may count some twice
	// until the next one (the bound errs on the side of refusing): send
	// the refused events again until the queue holds max_queued.
	testutil.Eventually(t, "the queue holds max_queued events", func() bool {
		if accepted.Load() < maxQueued {
			refused = sendAll(t, url+"/webhooks/test", refused, senders, &accepted)
		}
		return accepted.Load() >= maxQueued
	})
	if n := accepted.Load(); n != maxQueued {
		t.Fatalf("%d events accepted; want exactly max_queued, %d", n, maxQueued)
	}
	if n := queuePending(t, admin.URL); n != maxQueued {
		t.Fatalf("the queue holds %d events; want %d", n, maxQueued)
	}
	if again := sendAll(t, url+"/webhooks/test", refused[:senders], senders, &accepted); len(again) != senders || accepted.Load() != maxQueued {
		t.Fatalf("with the queue full, %d of %d new events refused (%d accepted in all)", len(again), senders, accepted.Load())
	}
}

// A re-delivery of an event the queue accepted is answered its stored
// accept (a replay) while the queue is full: the bound is checked only
// once the claim found nothing stored, so only new events are refused.
// Nothing is queued twice: once the backend is back, each accepted event
// reaches it exactly once.
func TestQueueReplaysAcceptedEventsWhenTheQueueIsFull(t *testing.T) {
	b := newBackend(t)
	b.down.Store(true)
	url, _, _ := startGateway(t, queueConfig(t.TempDir(), b.up.Srv.URL, `max_queued: 2, backoff_min: 20ms, backoff_max: 50ms`))
	hook := url + "/webhooks/test"
	for _, id := range []string{"a", "b"} {
		if r := gatewaytest.Post(t, hook, "{}", "X-Event-Id", id); r.Status != http.StatusAccepted || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("event %s: %d %v; want 202, not a replay", id, r.Status, r.Header)
		}
	}
	if r := gatewaytest.Post(t, hook, "{}", "X-Event-Id", "c"); r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a new event with the queue full: %d %v; want 503 with Retry-After", r.Status, r.Header)
	}
	for _, id := range []string{"a", "b", "a"} {
		r := gatewaytest.Post(t, hook, "{}", "X-Event-Id", id)
		if r.Status != http.StatusAccepted || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("re-delivery of accepted event %s with the queue full: %d %v %s; want its accept replayed", id, r.Status, r.Header, r.Body)
		}
	}
	b.down.Store(false)
	testutil.Eventually(t, "both events delivered", func() bool { k, _ := b.count(); return k == 2 })
	testutil.Eventually(t, "room again for the refused event", func() bool {
		return gatewaytest.Post(t, hook, "{}", "X-Event-Id", "c").Status == http.StatusAccepted
	})
	testutil.Eventually(t, "the refused event delivered", func() bool { k, _ := b.count(); return k == 3 })
	if _, n := b.count(); n != 3 {
		t.Fatalf("%d deliveries of 3 events; want each once", n)
	}
}

// A delivery a queued route refuses with 503 (here: the queue full) has
// the outcome not_queued, of class refused: the console and /admin/stats
// don't count it as forwarded unprotected (nothing reached the backend),
// /admin/deliveries filters on it with its reason, and the metrics count
// it.
func TestQueueRefusalIsNotQueued(t *testing.T) {
	b := newBackend(t)
	b.down.Store(true)
	dir := t.TempDir()
	_, g, _ := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: sqlite}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
    header: x-event-id
    deliver: queue
    queue: {max_queued: 1, backoff_min: 1h, backoff_max: 1h}
`, filepath.Join(dir, "idemhook.db"), b.up.Srv.URL))
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	if r := gatewaytest.Post(t, srv.URL+"/webhooks/test", "{}", "X-Event-Id", "a"); r.Status != http.StatusAccepted {
		t.Fatalf("first event: %d", r.Status)
	}
	if r := gatewaytest.Post(t, srv.URL+"/webhooks/test", "{}", "X-Event-Id", "b"); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("second event over max_queued 1: %d; want 503", r.Status)
	}
	var list adminapi.Deliveries
	testutil.Eventually(t, "the refusal in the trail", func() bool {
		list = gatewaytest.DecodeJSON[adminapi.Deliveries](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/deliveries?outcome=not_queued", ""))
		return len(list.Deliveries) > 0
	})
	if d := list.Deliveries; len(d) != 1 || d[0].Key != "b" || d[0].Status != http.StatusServiceUnavailable || !strings.Contains(d[0].Reason, "max_queued 1") {
		t.Fatalf("deliveries not_queued: %+v; want event b's, 503, with the bound in its reason", d)
	}
	st := gatewaytest.DecodeJSON[adminapi.Stats](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/stats", ""))
	gatewaytest.SameWindow(t, "test, last hour", gatewaytest.SourceStats(t, st, "test").Hour, adminapi.Window{Total: 2, Processed: 1, Refused: 1,
		DuplicateRate: gatewaytest.Rate(0), Outcomes: map[string]int64{"processed": 1, "not_queued": 1}})
	class := ""
	for _, o := range st.Outcomes {
		if o.Name == "not_queued" {
			class = o.Class
		}
	}
	if class != "refused" {
		t.Fatalf("/admin/stats gives not_queued the class %q; want refused", class)
	}
	resp, err := http.Get(admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `idemhook_deliveries_total{outcome="not_queued",source="test"} 1`) {
		t.Fatalf("/metrics counts no not_queued delivery:\n%s", grepLines(string(metrics), "idemhook_deliveries_total"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
