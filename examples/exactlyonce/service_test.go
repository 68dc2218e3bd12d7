package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// testConfig returns a configuration on the test server with tables of the
// test's own.
func testConfig(t *testing.T, pool *pgxpool.Pool) config {
	t.Helper()
	return config{
		dbURL:       pgtest.URL(t),
		keysTable:   pgtest.Table(t, pool, "exactlyonce_keys"),
		ordersTable: pgtest.Table(t, pool, "exactlyonce_orders"),
		lease:       time.Second,
	}
}

func startService(t *testing.T, pool *pgxpool.Pool, cfg config) (*service, *httptest.Server) {
	t.Helper()
	svc, err := newService(t.Context(), pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.close)
	srv := httptest.NewServer(svc.handler())
	t.Cleanup(srv.Close)
	return svc, srv
}

type answer struct {
	status   int
	body     string
	replayed bool
	header   string // what a replay must repeat: every header but Date, Content-Length and Idempotent-Replayed, as lines
}

// orderHeader is the header of every answer with an order, first or replayed.
const orderHeader = "Cache-Control: no-store\r\nContent-Type: application/json\r\n"

func deliver(url, key, body string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/orders", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	var h strings.Builder
	resp.Header.WriteSubset(&h, map[string]bool{"Date": true, "Content-Length": true, idemhook.ReplayedHeader: true}) //nolint:errcheck // a Builder
	return answer{resp.StatusCode, string(b), resp.Header.Get(idemhook.ReplayedHeader) == "true", h.String()}, err
}

// orderRows returns the ids of the rows recorded for the event of key.
func orderRows(t *testing.T, pool *pgxpool.Pool, cfg config, key string) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id FROM "`+cfg.ordersTable+`" WHERE event_id = $1 ORDER BY id`, idemhook.StoreKey("shop", key))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func orderBody(id int64) string { return `{"order":` + strconv.FormatInt(id, 10) + "}\n" }

func TestRecordsAnOrderOnce(t *testing.T) {
	pool := pgtest.Pool(t)
	cfg := testConfig(t, pool)
	svc, srv := startService(t, pool, cfg)
	first, err := deliver(srv.URL, "evt_once", `{"sku":"book","qty":2}`)
	if err != nil {
		t.Fatal(err)
	}
	ids := orderRows(t, pool, cfg, "evt_once")
	if len(ids) != 1 || first.status != http.StatusCreated || first.body != orderBody(ids[0]) || first.replayed || first.header != orderHeader {
		t.Fatalf("first delivery: %+v, rows %v", first, ids)
	}
	again, err := deliver(srv.URL, "evt_once", `{"sku":"book","qty":2}`)
	if err != nil {
		t.Fatal(err)
	}
	if again != (answer{http.StatusCreated, first.body, true, first.header}) {
		t.Fatalf("re-delivery: %+v, want the first answer replayed: %+v", again, first)
	}
	if ids := orderRows(t, pool, cfg, "evt_once"); len(ids) != 1 || svc.runs.Load() != 1 {
		t.Fatalf("rows %v, runs %d; want one of each", ids, svc.runs.Load())
	}
	// A malformed order is refused and records nothing.
	bad, _ := deliver(srv.URL, "evt_bad", `{"sku":""}`)
	if bad.status != http.StatusUnprocessableEntity || len(orderRows(t, pool, cfg, "evt_bad")) != 0 {
		t.Fatalf("malformed order: %+v", bad)
	}
}

// TestConcurrentDuplicates sends 100 copies of one event at once over real
// HTTP while the first is still running, with each in-flight policy. The
// first is held either right after its claim or inside its transaction
// after CompleteTx (the idempotency row locked), until every copy's claim
// has returned: each has found the first's claim pending, however long the
// copies took to arrive. The order is recorded by one execution, in one
// row, and every success answer carries that order.
func TestConcurrentDuplicates(t *testing.T) {
	for _, tt := range []struct{ policy, holdAt string }{
		{"wait", "claimed"}, {"reject", "claimed"}, {"wait", "written"}, {"reject", "written"},
	} {
		policy := tt.policy
		t.Run(policy+"/held at "+tt.holdAt, func(t *testing.T) {
			pool := pgtest.Pool(t)
			cfg := testConfig(t, pool)
			cfg.inFlight = policy
			cfg.lease = 0 // the default 30s: the first delivery keeps its claim
			const copies = 100
			// The claims that returned: the first delivery's, then each
			// copy's, which found the first's pending while it was held.
			var claims atomic.Int32
			allClaimed := make(chan struct{})
			cfg.onStoreCall = func(c idemhook.StoreCallInfo) {
				if c.Op == "claim" && c.Err == nil && !c.Skipped && claims.Add(1) == copies {
					close(allClaimed)
				}
			}
			cfg.hook = func(point string) {
				if point == tt.holdAt {
					select {
					case <-allClaimed:
					case <-time.After(time.Minute): // only a failure waits this long
						t.Errorf("held at %s, the first delivery saw %d of %d claims return within a minute", tt.holdAt, claims.Load(), copies)
					}
				}
			}
			svc, srv := startService(t, pool, cfg)
			answers := make([]answer, copies)
			errs := make([]error, copies)
			var wg sync.WaitGroup
			for i := range copies {
				wg.Go(func() {
					answers[i], errs[i] = deliver(srv.URL, "evt_dup", `{"sku":"pen","qty":1}`)
					// Under wait, a copy that waited past WaitTimeout (the
					// copies were slow to arrive) gets the documented 409
					// with Retry-After: sent again, as a provider would, it
					// must get the replay.
					for policy == "wait" && errs[i] == nil && answers[i].status == http.StatusConflict && strings.Contains(answers[i].header, "Retry-After: ") {
						answers[i], errs[i] = deliver(srv.URL, "evt_dup", `{"sku":"pen","qty":1}`)
					}
				})
			}
			wg.Wait()
			ids := orderRows(t, pool, cfg, "evt_dup")
			if len(ids) != 1 || svc.runs.Load() != 1 {
				t.Fatalf("rows %v, executions %d; want exactly one of each", ids, svc.runs.Load())
			}
			counts := map[int]int{}
			for i, a := range answers {
				if errs[i] != nil {
					t.Fatalf("copy %d: %v", i, errs[i])
				}
				counts[a.status]++
				switch {
				case a.status == http.StatusCreated && (a.body != orderBody(ids[0]) || a.header != orderHeader):
					t.Fatalf("copy %d: 201 with %q %q, want %q %q", i, a.header, a.body, orderHeader, orderBody(ids[0]))
				case a.status == http.StatusConflict && policy == "reject":
				case a.status != http.StatusCreated:
					t.Fatalf("copy %d: status %d (%q) under policy %s", i, a.status, a.body, policy)
				}
			}
			if policy == "wait" && counts[http.StatusCreated] != copies {
				t.Fatalf("answers %v: under wait every copy gets the 201", counts)
			}
			if policy == "reject" && (counts[http.StatusConflict] != copies-1 || counts[http.StatusCreated] != 1) {
				t.Fatalf("answers %v: under reject the copies that came during the first get 409", counts)
			}
			t.Logf("%s, held at %s: answers by status %v", policy, tt.holdAt, counts)
		})
	}
}
