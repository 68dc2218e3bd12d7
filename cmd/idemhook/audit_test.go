package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// PostgreSQL is down when the gateway starts, then up, then down again while
// it runs (a proxy in front of the real server cuts and restores it). The
// gateway starts, and every delivery is forwarded and answered as usual.
// The entries wait up to audit.buffer, and the rest are counted as dropped.
// /readyz says the audit sink is down but stays 200. Once the server is
// back, every waiting entry is written exactly once.
func TestAuditPostgresDownAtStartAndLater(t *testing.T) {
	raw := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if raw == "" {
		t.Skip("IDEMHOOK_POSTGRES_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/test): skipping the PostgreSQL outage test")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("IDEMHOOK_POSTGRES_URL is set but PostgreSQL is unreachable: %v", err)
	}
	table := fmt.Sprintf("idemhook_outage_%d", time.Now().UnixNano())
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	rows := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			return -1 // not created yet
		}
		return n
	}

	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	proxy.down() // PostgreSQL is down when the gateway starts
	u.Host = proxy.addr

	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "audit: {sink: none}",
		fmt.Sprintf("audit: {sink: postgres, url: \"${PG}\", table: %s, buffer: 10}", table), 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{getenv: envOf("PG", u.String())})
	if !strings.Contains(g.stderr.String(), "idemhook audit sink unreachable at start") {
		t.Errorf("no WARN about the sink at start:\n%s", g.stderr)
	}
	send := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if r := post(t, g.url("/webhooks/test"), fmt.Sprintf(`{"id":%d}`, i)); r.Status != 200 {
				t.Fatalf("delivery %d with the audit sink down: %d %s", i, r.Status, r.Body)
			}
		}
	}
	send(0, 25)
	if n := up.Calls.Load(); n != 25 {
		t.Fatalf("the upstream ran %d times for 25 events", n)
	}
	r := do(t, "GET", g.adminURL("/readyz"), "")
	if r.Status != 200 || !strings.Contains(r.Body, "audit (postgres ") || !strings.Contains(r.Body, "): down, ") {
		t.Errorf("/readyz with the audit sink down = %d %q, want 200 saying audit is down", r.Status, r.Body)
	}
	if d := metricValue(t, g.adminURL("/metrics"), "idemhook_audit_dropped_total"); d != 15 {
		t.Errorf("idemhook_audit_dropped_total = %v for 25 entries over a buffer of 10, want 15", d)
	}

	proxy.up()
	eventually(t, "the 10 waiting entries are written", func() bool { return rows() == 10 })
	eventually(t, "/readyz says the audit sink is ok", func() bool {
		return strings.Contains(do(t, "GET", g.adminURL("/readyz"), "").Body, "): ok\n") &&
			!strings.Contains(do(t, "GET", g.adminURL("/readyz"), "").Body, "down")
	})

	proxy.down() // and down again, later
	send(100, 5)
	eventually(t, "/readyz says the audit sink is down again", func() bool {
		return strings.Contains(do(t, "GET", g.adminURL("/readyz"), "").Body, "): down, ")
	})
	proxy.up()
	eventually(t, "the entries of the second outage are written", func() bool { return rows() == 15 })
	if err := g.stop(); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 15 {
		t.Errorf("%d rows after the gateway stopped, want 15 (10 + 5, no entry twice)", n)
	}
	var distinct int
	if err := pool.QueryRow(ctx, "SELECT count(DISTINCT key) FROM "+table).Scan(&distinct); err != nil || distinct != 15 {
		t.Errorf("%d distinct keys (%v), want 15", distinct, err)
	}
	if n := up.Calls.Load(); n != 30 {
		t.Errorf("the upstream ran %d times for 30 events", n)
	}
}

// With the memory store the trail is a ring in the process. With Redis it
// is a stream on the store's Redis, shared by every gateway on it. Both
// answer /admin/deliveries with the filters and the cursor of the SQL
// sinks, and each entry says why a delivery was refused and which gateway
// answered.
func TestAuditOnEveryStore(t *testing.T) {
	check := func(t *testing.T, gws []*gw) {
		t.Helper()
		for i, g := range gws {
			post(t, g.url("/webhooks/test"), fmt.Sprintf(`{"id":"e%d"}`, i))
			post(t, g.url("/webhooks/test"), fmt.Sprintf(`{"id":"e%d"}`, i))                                // replayed
			post(t, g.url("/webhooks/test"), strings.Repeat("x", 2048))                                     // 413
			post(t, g.url("/webhooks/test"), `{"id":"k"}`, "Idempotency-Key", fmt.Sprintf("key-%d", i))     // processed
			post(t, g.url("/webhooks/test"), `{"id":"other"}`, "Idempotency-Key", fmt.Sprintf("key-%d", i)) // 422
		}
		for _, g := range gws { // every gateway sees every gateway's entries
			page := deliveries(t, g, "limit=1000", 5*len(gws))
			seen := map[string]int{}
			for _, d := range page.Deliveries {
				seen[d.Instance]++
				switch d.Outcome {
				case "too_large":
					if d.Reason != "request body over max_body (1024 bytes)" || d.Status != 413 {
						t.Errorf("413 entry: %+v", d)
					}
				case "mismatch":
					if !strings.Contains(d.Reason, "different body") || d.Status != 422 {
						t.Errorf("422 entry: %+v", d)
					}
				case "processed", "replayed":
					if d.Reason != "" {
						t.Errorf("an ordinary delivery has a reason: %+v", d)
					}
				default:
					t.Errorf("unexpected outcome: %+v", d)
				}
			}
			for i := range gws {
				if seen[fmt.Sprintf("gw-%d", i)] != 5 {
					t.Errorf("entries by instance: %v, want 5 from each of %d", seen, len(gws))
				}
			}
			// Filters and the cursor.
			if p := deliveries(t, g, "outcome=too_large", len(gws)); p.Next != "" {
				t.Errorf("one page has a next cursor: %+v", p)
			}
			first := deliveries(t, g, "limit=2", 2)
			if first.Next == "" {
				t.Fatalf("a page of 2 of %d entries has no next cursor", 5*len(gws))
			}
			rest := deliveries(t, g, "limit=1000&cursor="+first.Next, 5*len(gws)-2)
			all := append(first.Deliveries, rest.Deliveries...)
			ids := map[int64]bool{}
			for _, d := range all {
				ids[d.ID] = true
			}
			if len(ids) != 5*len(gws) {
				t.Errorf("following the cursor gave %d distinct entries, want %d", len(ids), 5*len(gws))
			}
		}
	}
	config := func(upstreamURL, store, instance string) string {
		return strings.NewReplacer(
			"store: {driver: memory}", "store: "+store,
			"audit: {sink: none}", "audit: {instance: "+instance+"}",
		).Replace(routeConfig(upstreamURL, "max_body: 1KiB"))
	}
	t.Run("memory", func(t *testing.T) {
		up := newUpstream(t)
		g := startGateway(t, writeConfig(t, t.TempDir(), config(up.Srv.URL, "{driver: memory}", "gw-0")), startOpts{})
		check(t, []*gw{g})
	})
	t.Run("redis", func(t *testing.T) {
		raw := os.Getenv("IDEMHOOK_REDIS_URL")
		if raw == "" {
			t.Skip("IDEMHOOK_REDIS_URL is not set: skipping the Redis audit stream test")
		}
		prefix := fmt.Sprintf("auditgw%d:", time.Now().UnixNano())
		store := fmt.Sprintf("{driver: redis, url: %q, prefix: %q}", raw, prefix)
		var gws []*gw
		for i := range 2 {
			up := newUpstream(t)
			gws = append(gws, startGateway(t, writeConfig(t, t.TempDir(), config(up.Srv.URL, store, fmt.Sprintf("gw-%d", i))), startOpts{}))
		}
		t.Cleanup(func() { cleanRedisPrefix(t, raw, prefix) })
		check(t, gws)
	})
}

// The log sink at log.level debug writes the key decision of each
// delivery: claimed, waited then replayed, replayed.
func TestAuditLogDecisions(t *testing.T) {
	up, arrived, release := blockingUpstream(t)
	cfg := strings.Replace(routeConfig(up.Srv.URL, "in_flight: wait"), "audit: {sink: none}", "audit: {sink: log}", 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	first := make(chan response, 1)
	go func() { first <- post(t, g.url("/webhooks/test"), `{"id":"d"}`) }()
	<-arrived
	second := make(chan response, 1)
	go func() { second <- post(t, g.url("/webhooks/test"), `{"id":"d"}`) }()
	// The duplicate has met the running delivery once its claim is counted.
	eventually(t, "the duplicate claimed", func() bool { return claims(t, g.adminURL("/metrics")) >= 2 })
	close(release)
	<-first
	<-second
	post(t, g.url("/webhooks/test"), `{"id":"d"}`)
	if err := g.stop(); err != nil {
		t.Fatal(err)
	}
	log := g.stderr.String()
	for _, want := range []string{
		`decision="claimed the key, forwarded, stored the answer"`,
		`decision="waited `,
		`for the running delivery of the key, then replayed its stored answer"`,
		`decision="found a stored answer: replayed it, not forwarded"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the debug log lacks %s:\n%s", want, log)
		}
	}
}

// cleanRedisPrefix deletes the keys a test wrote under prefix.
func cleanRedisPrefix(t *testing.T, raw, prefix string) {
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Error(err)
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	if _, err := redistest.DeletePrefix(context.Background(), c, prefix); err != nil {
		t.Error(err)
	}
}
