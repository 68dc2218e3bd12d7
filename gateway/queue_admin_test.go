package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// refusingBackend answers 400 (not retried: the event is dead at once)
// while refuse is set, else 200, and counts the 200s per Idempotency-Key.
type refusingBackend struct {
	up        *gatewaytest.Upstream
	refuse    atomic.Bool
	mu        sync.Mutex
	delivered map[string]int
}

func newRefusingBackend(t *testing.T) *refusingBackend {
	b := &refusingBackend{up: gatewaytest.NewUpstream(t), delivered: map[string]int{}}
	b.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if b.refuse.Load() {
			http.Error(w, "unknown customer", http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.delivered[r.Header.Get(gateway.HeaderIdempotencyKey)]++
		b.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
	return b
}

func (b *refusingBackend) deliveries(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.delivered[key]
}

// queueAdmin serves a queued gateway's admin handler (token "tok") and
// returns its URL and the gateway's.
func queueAdmin(t *testing.T, upstream string) (gwURL, adminURL string) {
	t.Helper()
	text := strings.Replace(queueConfig(t.TempDir(), upstream, `backoff_min: 20ms, backoff_max: 50ms`),
		"admin: {listen: off}", `admin: {listen: "127.0.0.1:0", token: tok}`, 1)
	gwURL, g, _ := startGateway(t, text)
	srv := httptest.NewServer(g.AdminHandler())
	t.Cleanup(srv.Close)
	return gwURL, srv.URL
}

// adminCall calls the admin API with the token; body, when not empty, is
// sent as JSON.
func adminCall(t *testing.T, method, url, body string) gatewaytest.Response {
	t.Helper()
	return gatewaytest.Do(t, method, url, body, "Authorization", "Bearer tok", "Content-Type", "application/json")
}

func queueRoute(t *testing.T, admin string) adminapi.QueueRoute {
	t.Helper()
	r := adminCall(t, "GET", admin+"/admin/queue", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /admin/queue: %d %s", r.Status, r.Body)
	}
	q := gatewaytest.DecodeJSON[adminapi.Queue](t, r)
	if len(q.Routes) != 1 || q.Routes[0].Path != "/webhooks/test" {
		t.Fatalf("GET /admin/queue: routes %+v; want /webhooks/test alone", q.Routes)
	}
	return q.Routes[0]
}

func deadEvents(t *testing.T, admin string) []adminapi.QueueEvent {
	t.Helper()
	r := adminCall(t, "GET", admin+"/admin/queue/events?route=/webhooks/test&state=dead", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /admin/queue/events: %d %s", r.Status, r.Body)
	}
	return gatewaytest.DecodeJSON[adminapi.QueueEvents](t, r).Events
}

func wantProblem(t *testing.T, what string, r gatewaytest.Response, status int, detail string) {
	t.Helper()
	p := gatewaytest.DecodeJSON[adminapi.Problem](t, r)
	if r.Status != status || r.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, detail) {
		t.Fatalf("%s: %d %s %s; want %d problem+json saying %q", what, r.Status, r.Header.Get("Content-Type"), r.Body, status, detail)
	}
}

// TestQueueAdmin drives the queue's admin API over HTTP against a real
// queued gateway: events the backend refuses (400) are dead at once, with
// their attempts; a redrive of one, then by filter, delivers each exactly
// once; a paused route accepts but delivers nothing until resumed; a purge
// needs the count it selects as confirm.
func TestQueueAdmin(t *testing.T) {
	b := newRefusingBackend(t)
	b.refuse.Store(true)
	start := time.Now()
	url, admin := queueAdmin(t, b.up.Srv.URL)
	post := func(id string) {
		t.Helper()
		if r := gatewaytest.Post(t, url+"/webhooks/test", `{"id":"`+id+`"}`, "X-Event-Id", id); r.Status != http.StatusAccepted {
			t.Fatalf("event %s: %d %s; want 202", id, r.Status, r.Body)
		}
	}

	if r := gatewaytest.Do(t, "GET", admin+"/admin/queue", ""); r.Status != http.StatusUnauthorized {
		t.Fatalf("without the token: %d; want 401", r.Status)
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		post(id)
	}
	testutil.Eventually(t, "three dead events", func() bool { return queueRoute(t, admin).Dead == 3 })
	dead := deadEvents(t, admin)
	if len(dead) != 3 {
		t.Fatalf("dead events %+v; want 3", dead)
	}
	for i, e := range dead {
		if e.Key != "idem:test:e"+fmt.Sprint(i+1) || e.State != "dead" || e.Attempt != 1 || e.LastStatus != 400 || !strings.Contains(e.Reason, "400") {
			t.Fatalf("dead event %d: %+v; want idem:test:e%d, dead after one attempt answered 400", i, e, i+1)
		}
	}

	// The event's detail: its one attempt, with the backend's answer.
	r := adminCall(t, "GET", admin+fmt.Sprintf("/admin/queue/events/%d", dead[0].ID), "")
	detail := gatewaytest.DecodeJSON[adminapi.QueueEventDetail](t, r)
	if r.Status != 200 || detail.ID != dead[0].ID || len(detail.Attempts) != 1 {
		t.Fatalf("event detail: %d %s; want the event with one attempt", r.Status, r.Body)
	}
	if a := detail.Attempts[0]; a.Attempt != 1 || a.Status != 400 || a.BodyHead != "unknown customer\n" || a.Worker == "" || a.LatencyMS < 0 || a.Time.IsZero() {
		t.Fatalf("attempt %+v; want attempt 1, 400, the backend's body, the worker", a)
	}
	var raw map[string]any
	json.Unmarshal([]byte(r.Body), &raw)
	if _, err := time.Parse(time.RFC3339, raw["received_at"].(string)); err != nil {
		t.Fatalf("received_at %v is not RFC 3339: %v", raw["received_at"], err)
	}
	wantProblem(t, "an event that is not there", adminCall(t, "GET", admin+"/admin/queue/events/999999", ""), 404, "no event 999999")
	wantProblem(t, "an unknown state", adminCall(t, "GET", admin+"/admin/queue/events?state=lost", ""), 400, `"lost" is not a state`)
	wantProblem(t, "a route that is not queued", adminCall(t, "GET", admin+"/admin/queue/events?route=/nope", ""), 400, "not a queued route")
	wantProblem(t, "a redrive without a route", adminCall(t, "POST", admin+"/admin/queue/redrive", `{"state":"dead"}`), 400, "route is required")
	wantProblem(t, "a redrive of running events", adminCall(t, "POST", admin+"/admin/queue/redrive", `{"route":"/webhooks/test","state":"running"}`), 400, "queued or dead")
	wantProblem(t, "a field that is not one", adminCall(t, "POST", admin+"/admin/queue/redrive", `{"route":"/webhooks/test","filter":"x"}`), 400, "unknown field")
	wantProblem(t, "a history too long", adminCall(t, "GET", admin+"/admin/queue?minutes=0", ""), 400, "minutes")

	// Redrive one, then the rest by filter: each is delivered once.
	b.refuse.Store(false)
	r = adminCall(t, "POST", admin+"/admin/queue/redrive", fmt.Sprintf(`{"route":"/webhooks/test","ids":[%d]}`, dead[0].ID))
	if got := gatewaytest.DecodeJSON[adminapi.QueueRedriven](t, r); r.Status != 200 || got.Redriven != 1 {
		t.Fatalf("redrive one: %d %s; want redriven 1", r.Status, r.Body)
	}
	testutil.Eventually(t, "e1 delivered", func() bool { return b.deliveries("idem:test:e1") == 1 })
	if n := len(deadEvents(t, admin)); n != 2 {
		t.Fatalf("%d dead after redriving one; want 2", n)
	}
	r = adminCall(t, "POST", admin+"/admin/queue/redrive", `{"route":"/webhooks/test","state":"dead","reason":"400"}`)
	if got := gatewaytest.DecodeJSON[adminapi.QueueRedriven](t, r); r.Status != 200 || got.Redriven != 2 {
		t.Fatalf("redrive by filter: %d %s; want redriven 2", r.Status, r.Body)
	}
	testutil.Eventually(t, "e2 and e3 delivered", func() bool {
		return b.deliveries("idem:test:e2") == 1 && b.deliveries("idem:test:e3") == 1
	})

	// Pause: the event is accepted and not delivered; resume delivers it.
	r = adminCall(t, "POST", admin+"/admin/queue/pause", `{"route":"/webhooks/test"}`)
	if r.Status != 200 || !queueRoute(t, admin).Paused {
		t.Fatalf("pause: %d %s; want the route paused", r.Status, r.Body)
	}
	post("e4")
	time.Sleep(500 * time.Millisecond) // a delivery would come now
	if st := queueRoute(t, admin); b.deliveries("idem:test:e4") != 0 || st.Queued != 1 || !st.Paused {
		t.Fatalf("paused: e4 delivered %d times, counts %+v; want it queued, undelivered", b.deliveries("idem:test:e4"), st)
	}
	r = adminCall(t, "POST", admin+"/admin/queue/resume", `{"route":"/webhooks/test"}`)
	if r.Status != 200 || queueRoute(t, admin).Paused {
		t.Fatalf("resume: %d %s; want the route not paused", r.Status, r.Body)
	}
	testutil.Eventually(t, "e4 delivered after the resume", func() bool { return b.deliveries("idem:test:e4") == 1 })

	// Purge: 409 with the count until confirmed with it.
	b.refuse.Store(true)
	post("e5")
	post("e6")
	testutil.Eventually(t, "two dead events", func() bool { return queueRoute(t, admin).Dead == 2 })
	r = adminCall(t, "POST", admin+"/admin/queue/purge", `{"route":"/webhooks/test","state":"dead"}`)
	if p := gatewaytest.DecodeJSON[adminapi.QueuePurgeConfirm](t, r); r.Status != 409 || p.Count != 2 || !strings.Contains(p.Detail, `"confirm": 2`) {
		t.Fatalf("purge without confirm: %d %s; want 409 with count 2 and how to confirm", r.Status, r.Body)
	}
	r = adminCall(t, "POST", admin+"/admin/queue/purge", `{"route":"/webhooks/test","state":"dead","confirm":1}`)
	if p := gatewaytest.DecodeJSON[adminapi.QueuePurgeConfirm](t, r); r.Status != 409 || p.Count != 2 {
		t.Fatalf("purge with a wrong confirm: %d %s; want 409 with count 2", r.Status, r.Body)
	}
	if n := len(deadEvents(t, admin)); n != 2 {
		t.Fatalf("%d dead after unconfirmed purges; want 2 (nothing purged)", n)
	}
	r = adminCall(t, "POST", admin+"/admin/queue/purge", `{"route":"/webhooks/test","state":"dead","confirm":2}`)
	if got := gatewaytest.DecodeJSON[adminapi.QueuePurged](t, r); r.Status != 200 || got.Purged != 2 {
		t.Fatalf("confirmed purge: %d %s; want purged 2", r.Status, r.Body)
	}
	if st := queueRoute(t, admin); st.Dead != 0 || st.Queued+st.Retrying+st.Running != 0 {
		t.Fatalf("after the purge: %+v; want an empty queue", st)
	}

	// Each event exactly once, and the history counted what happened.
	time.Sleep(300 * time.Millisecond)
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		if n := b.deliveries("idem:test:" + id); n != 1 {
			t.Fatalf("%s delivered %d times; want once", id, n)
		}
	}
	var sum adminapi.QueueMinute
	hist := queueRoute(t, admin).History
	// By default the history spans the data, here the minutes since the
	// gateway started, not the 360 it can hold.
	if up := int(time.Now().Unix()/60-start.Unix()/60) + 1; len(hist) < 1 || len(hist) > up {
		t.Fatalf("%d minutes of history; want the data's span, at most the %d since the start", len(hist), up)
	}
	for _, m := range hist {
		sum.Accepted += m.Accepted
		sum.Delivered += m.Delivered
		sum.Dead += m.Dead
		sum.Retried += m.Retried
	}
	if sum.Accepted != 6 || sum.Delivered != 4 || sum.Dead != 5 || sum.Retried != 0 {
		t.Fatalf("history sums %+v; want 6 accepted, 4 delivered, 5 dead, 0 retried", sum)
	}
	r = adminCall(t, "GET", admin+"/admin/queue?minutes=5", "")
	if q := gatewaytest.DecodeJSON[adminapi.Queue](t, r); len(q.Routes) != 1 || len(q.Routes[0].History) != 5 {
		t.Fatalf("?minutes=5: %s; want 5 minutes", r.Body)
	}
}

// A gateway with no queued route answers 404 on the queue's endpoints.
func TestQueueAdminWithoutAQueue(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: "127.0.0.1:0", token: tok}
audit: {sink: none}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
`, filepath.Join(t.TempDir(), "idemhook.db"), up.Srv.URL)
	_, g, _ := startGateway(t, text)
	srv := httptest.NewServer(g.AdminHandler())
	defer srv.Close()
	wantProblem(t, "GET /admin/queue", adminCall(t, "GET", srv.URL+"/admin/queue", ""), 404, "deliver: queue")
	wantProblem(t, "POST /admin/queue/redrive", adminCall(t, "POST", srv.URL+"/admin/queue/redrive", `{"route":"/webhooks/test"}`), 404, "deliver: queue")
}
