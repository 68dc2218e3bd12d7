package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/jackc/pgx/v5"
)

// metricValue reads one sample of the gateway's /metrics: the line that
// starts with series; -1 when there is none.
func metricValue(t *testing.T, admin, series string) float64 {
	t.Helper()
	body := gatewaytest.Do(t, http.MethodGet, admin+"/metrics", "").Body
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, line)
			}
			return f
		}
	}
	return -1
}

const (
	pendingSeries  = `idemhook_queue_settles_pending{destination="",route="/webhooks/test"}`
	failuresSeries = `idemhook_queue_settle_failures_total{destination="",route="/webhooks/test"}`
	readyLine      = "queue /webhooks/test: %d attempt outcomes not yet recorded by the store"
)

func adminQueueRoute(t *testing.T, admin string) adminapi.QueueRoute {
	t.Helper()
	q := gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, admin+"/admin/queue", ""))
	if len(q.Routes) != 1 {
		t.Fatalf("GET /admin/queue: %+v; want one route", q)
	}
	return q.Routes[0]
}

// gatedBackend holds every attempt until released, then accepts it.
func gatedBackend(t *testing.T) (*backend, chan struct{}, *atomic.Int64) {
	b := newBackend(t)
	release := make(chan struct{})
	var waiting atomic.Int64
	inner := b.up.Handle
	b.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		waiting.Add(1)
		<-release
		inner(w, r, n)
	}
	return b, release, &waiting
}

// checkOnce checks that each of events keys reached the backend in exactly
// one attempt, the first.
func checkOnce(t *testing.T, b *backend, events int) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.delivered) != events {
		t.Errorf("%d events delivered; want %d", len(b.delivered), events)
	}
	for key, attempts := range b.attempts {
		if len(attempts) != 1 || attempts[0] != 1 || b.delivered[key] != 1 {
			t.Errorf("%s: attempts %v, delivered %d times; want attempt 1 only, once", key, attempts, b.delivered[key])
		}
	}
}

// The gateway's PostgreSQL is restarted in the middle of a drain: the
// attempts the backend took while it was down can't be settled, so their
// settlements are kept (idemhook_queue_settles_pending, the /readyz line)
// and stored once the server is back, before the route claims anew. No
// event stays running and none is sent twice.
func TestQueueSettleKeptOverAPostgresRestart(t *testing.T) {
	srv := pgtest.StartServer(t)
	b, release, waiting := gatedBackend(t)
	text := gatewaytest.QueueConfig(fmt.Sprintf("driver: postgres, url: %q, timeout: 1s", srv.URL()), b.up.Srv.URL,
		"concurrency: 4, backoff_min: 20ms, backoff_max: 100ms")
	url, g, _ := startGateway(t, text)
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	const events = 12
	for i := range events {
		if r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", fmt.Sprint("e", i)); r.Status != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, r.Status, r.Body)
		}
	}
	testutil.Eventually(t, "4 attempts at the backend", func() bool { return waiting.Load() == 4 })
	srv.Stop()
	close(release) // the backend answers while the store is down
	testutil.Eventually(t, "4 settles pending", func() bool { return metricValue(t, admin.URL, pendingSeries) == 4 })
	if f := metricValue(t, admin.URL, failuresSeries); f < 4 {
		t.Errorf("%s = %v; want at least 4", failuresSeries, f)
	}
	ready := gatewaytest.Do(t, http.MethodGet, admin.URL+"/readyz", "")
	if !strings.Contains(ready.Body, fmt.Sprintf(readyLine, 4)) {
		t.Errorf("/readyz while settles are pending: %d %s", ready.Status, ready.Body)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "every event delivered", func() bool { k, _ := b.count(); return k == events })
	queueDrained(t, g)
	if rt := adminQueueRoute(t, admin.URL); rt.Running != 0 || rt.SettlesPending != 0 {
		t.Errorf("GET /admin/queue after the drain: %+v; want nothing running nor pending", rt)
	}
	if p := metricValue(t, admin.URL, pendingSeries); p != 0 {
		t.Errorf("%s = %v after the drain; want 0", pendingSeries, p)
	}
	checkOnce(t, b, events)
}

// A settle the store refuses while claims work (here a trigger refuses the
// delivered event's delete) is kept: GET /admin/queue shows it in
// settles_pending, /metrics counts it, /readyz names it and stays 200. Once
// the store takes the settle, each event has been sent once.
func TestQueueSettlesPendingShown(t *testing.T) {
	pgURL := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if pgURL == "" {
		t.Skip("IDEMHOOK_POSTGRES_URL not set")
	}
	b := newBackend(t)
	table := fmt.Sprintf("q_settle_%d", time.Now().UnixNano())
	text := gatewaytest.QueueConfig(fmt.Sprintf("driver: postgres, url: %q, table: %s", pgURL, table), b.up.Srv.URL,
		"backoff_min: 20ms, backoff_max: 100ms")
	url, g, _ := startGateway(t, text) // creates the tables
	conn, err := pgx.Connect(t.Context(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range []string{
		`CREATE FUNCTION ` + table + `_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
		`CREATE TRIGGER refuse BEFORE DELETE ON ` + table + `_queue FOR EACH ROW EXECUTE FUNCTION ` + table + `_refuse()`,
	} {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgURL)
		if err == nil {
			conn.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+`_queue_attempts, `+table+`_queue, `+table+`_queue_routes, `+table)
			conn.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+table+`_refuse`)
			conn.Close(context.Background())
		}
	})
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	const events = 3
	for i := range events {
		if r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", fmt.Sprint("e", i)); r.Status != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, r.Status, r.Body)
		}
	}
	testutil.Eventually(t, "3 settles pending in GET /admin/queue", func() bool { return adminQueueRoute(t, admin.URL).SettlesPending == events })
	testutil.Eventually(t, "the kept settles retried", func() bool { return metricValue(t, admin.URL, failuresSeries) >= 2*events })
	if p := metricValue(t, admin.URL, pendingSeries); p != events {
		t.Errorf("%s = %v; want %d", pendingSeries, p, events)
	}
	ready := gatewaytest.Do(t, http.MethodGet, admin.URL+"/readyz", "")
	if ready.Status != http.StatusOK || !strings.Contains(ready.Body, fmt.Sprintf(readyLine, events)) {
		t.Errorf("/readyz while settles are pending: %d %s; want 200 naming them", ready.Status, ready.Body)
	}
	if _, err := conn.Exec(t.Context(), `DROP TRIGGER refuse ON `+table+`_queue`); err != nil {
		t.Fatal(err)
	}
	queueDrained(t, g)
	if rt := adminQueueRoute(t, admin.URL); rt.SettlesPending != 0 || rt.Running != 0 {
		t.Errorf("GET /admin/queue after the trigger went: %+v; want nothing pending", rt)
	}
	ready = gatewaytest.Do(t, http.MethodGet, admin.URL+"/readyz", "")
	if ready.Status != http.StatusOK || strings.Contains(ready.Body, "not yet recorded") {
		t.Errorf("/readyz after the drain: %d %s", ready.Status, ready.Body)
	}
	checkOnce(t, b, events)
}
