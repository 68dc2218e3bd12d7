package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// TestAdminStats runs real deliveries through a gateway and reads them
// back from GET /admin/stats, on the SQLite trail and, when
// IDEMHOOK_POSTGRES_URL is set, on the PostgreSQL one.
func TestAdminStats(t *testing.T) {
	run := func(t *testing.T, g *gw) {
		body := `{"id":"evt_stats"}`
		post(t, g.url("/webhooks/test"), body)                                   // processed
		post(t, g.url("/webhooks/test"), body)                                   // replayed
		post(t, g.url("/webhooks/test"), `{"id":"a"}`, "Idempotency-Key", "hk")  // processed
		post(t, g.url("/webhooks/test"), `{"id":"b"}`, "Idempotency-Key", "hk")  // mismatch: refused
		post(t, g.url("/webhooks/other"), `{"id":"c"}`, "Idempotency-Key", "hk") // processed (another source)
		deliveries(t, g, "", 5)
		r := do(t, "GET", g.adminURL("/admin/stats"), "")
		if r.Status != 200 {
			t.Fatalf("GET /admin/stats = %d %s", r.Status, r.Body)
		}
		s := decodeJSON[adminapi.Stats](t, r)
		want := adminapi.Window{Total: 4, Processed: 2, Replayed: 1, Refused: 1, Duplicates: 1, DuplicateRate: rate(0.25),
			Outcomes: map[string]int64{"processed": 2, "replayed": 1, "mismatch": 1}}
		test := sourceStats(t, s, "test")
		sameWindow(t, "test, last hour", test.Hour, want)
		sameWindow(t, "test, last day", test.Day, want)
		sameWindow(t, "other, last hour", sourceStats(t, s, "other").Hour, adminapi.Window{Total: 1, Processed: 1,
			DuplicateRate: rate(0), Outcomes: map[string]int64{"processed": 1}})

		if r := do(t, "GET", g.adminURL("/admin/stats?source=test"), ""); r.Status != 400 {
			t.Errorf("GET /admin/stats?source=test = %d, want 400", r.Status)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		up := newUpstream(t)
		dir := t.TempDir()
		run(t, startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.Srv.URL, "")), startOpts{}))
	})
	t.Run("postgres", func(t *testing.T) {
		raw := pgtest.URL(t)
		table := pgtest.Table(t, pgtest.Pool(t), "idemhook_statstest")
		up := newUpstream(t)
		dir := t.TempDir()
		cfg := sqliteConfig(dir, up.Srv.URL, "") +
			fmt.Sprintf("audit: {sink: postgres, url: \"${PG}\", table: %s}\n", table)
		run(t, startGateway(t, writeConfig(t, dir, cfg), startOpts{getenv: envOf("PG", raw)}))
	})
	t.Run("not queryable", func(t *testing.T) {
		up := newUpstream(t)
		g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})
		if r := do(t, "GET", g.adminURL("/admin/stats"), ""); r.Status != http.StatusNotImplemented ||
			!strings.Contains(r.Body, `the audit sink is \"none\"`) {
			t.Errorf("GET /admin/stats with sink none = %d %s, want 501", r.Status, r.Body)
		}
	})
}
