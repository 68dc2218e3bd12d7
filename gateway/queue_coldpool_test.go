package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/jackc/pgx/v5"
)

// 32 senders of distinct events against a fresh gateway on PostgreSQL,
// whose pool is small, cold and kept busy (each accept holds a connection
// past the store's timeout): every event answered 202 is delivered once,
// and no event is answered 503 "could not tell whether ... committed" (the
// accept's own transaction committed, so the middleware needs no read-back
// to know it). An event answered 503 for another reason (its claim waited
// too long for a connection) was not queued, and is not delivered.
func TestQueueColdPostgresPoolAnswersWhatHappened(t *testing.T) {
	pgURL := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if pgURL == "" {
		t.Skip("IDEMHOOK_POSTGRES_URL not set")
	}
	sep := "?"
	if strings.Contains(pgURL, "?") {
		sep = "&"
	}
	small := pgURL + sep + "pool_max_conns=1"
	b := newBackend(t)
	table := fmt.Sprintf("q_cold_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgURL)
		if err == nil {
			conn.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+`_queue_attempts, `+table+`_queue, `+table+`_queue_routes, `+table)
			conn.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+table+`_slow`)
			conn.Close(context.Background())
		}
	})
	url, g, _ := startGateway(t, gatewaytest.QueueConfig(fmt.Sprintf("driver: postgres, url: %q, table: %s", small, table), b.up.Srv.URL, ""))
	// Each accept holds the pool's one connection for longer than the
	// store's timeout (250 ms): whatever waits behind it for a connection,
	// as a read-back after an accept would, times out.
	conn, err := pgx.Connect(t.Context(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range []string{
		`CREATE FUNCTION ` + table + `_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$`,
		`CREATE TRIGGER slow BEFORE INSERT ON ` + table + `_queue FOR EACH ROW EXECUTE FUNCTION ` + table + `_slow()`,
	} {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}

	const senders, events = 32, 64
	work := make(chan int)
	var (
		mu                    sync.Mutex
		accepted              = map[string]bool{}
		refused, couldNotTell int
		wg                    sync.WaitGroup
	)
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprint("cold-", i)
				r := gatewaytest.Post(t, url+"/webhooks/test", `{"id":"`+id+`"}`, "X-Event-Id", id)
				mu.Lock()
				switch {
				case r.Status == http.StatusAccepted:
					accepted[id] = true
				case r.Status == http.StatusServiceUnavailable && strings.Contains(r.Body, "could not tell"):
					couldNotTell++
				case r.Status == http.StatusServiceUnavailable:
					refused++
				default:
					t.Errorf("event %s: %d %s", id, r.Status, r.Body)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range events {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d events: %d accepted, %d refused 503, %d 503 'could not tell'", events, len(accepted), refused, couldNotTell)
	if couldNotTell != 0 {
		t.Errorf("%d events answered 503 'could not tell whether ... committed'; want none", couldNotTell)
	}
	queueDrained(t, g)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.delivered) != len(accepted) {
		t.Errorf("%d events delivered; want the %d accepted, no more", len(b.delivered), len(accepted))
	}
	for key, n := range b.delivered {
		if n != 1 {
			t.Errorf("%s delivered %d times; want once", key, n)
		}
	}
}

// A fresh gateway on PostgreSQL opens its pool's connections before any
// delivery arrives (pgx's default size, max(4, cores), when the URL sets
// no pool_min_conns), so that a first burst doesn't dial them inside the
// store's deadline.
func TestPostgresPoolOpenedBeforeTheFirstDelivery(t *testing.T) {
	pgURL := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if pgURL == "" {
		t.Skip("IDEMHOOK_POSTGRES_URL not set")
	}
	sep := "?"
	if strings.Contains(pgURL, "?") {
		sep = "&"
	}
	app := fmt.Sprintf("prewarm_%d", time.Now().UnixNano())
	table := "q_" + app
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgURL)
		if err == nil {
			conn.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+`_queue_attempts, `+table+`_queue, `+table+`_queue_routes, `+table)
			conn.Close(context.Background())
		}
	})
	b := newBackend(t)
	startGateway(t, gatewaytest.QueueConfig(fmt.Sprintf("driver: postgres, url: %q, table: %s", pgURL+sep+"application_name="+app, table), b.up.Srv.URL, ""))
	conn, err := pgx.Connect(t.Context(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	want := max(4, runtime.NumCPU())
	testutil.Eventually(t, fmt.Sprintf("%d connections open", want), func() bool {
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= want
	})
}
