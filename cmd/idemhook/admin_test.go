package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// deliveries polls GET /admin/deliveries?query until it lists want entries:
// the recorder writes in batches, in the background.
func deliveries(t *testing.T, g *gw, query string, want int) adminapi.Deliveries {
	t.Helper()
	var page adminapi.Deliveries
	eventually(t, fmt.Sprintf("%d audit rows for %q", want, query), func() bool {
		r := do(t, "GET", g.adminURL("/admin/deliveries?"+query), "")
		if r.Status != 200 {
			t.Fatalf("GET /admin/deliveries?%s = %d %s", query, r.Status, r.Body)
		}
		page = decodeJSON[adminapi.Deliveries](t, r)
		return len(page.Deliveries) >= want
	})
	if len(page.Deliveries) != want {
		t.Fatalf("GET /admin/deliveries?%s: %d rows, want %d", query, len(page.Deliveries), want)
	}
	return page
}

func TestAdminAPI(t *testing.T) {
	up := newUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if r.URL.Path == "/other" {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write([]byte{0xff, 0x00, 0xfe})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"call":%d}`, n)
	}
	dir := t.TempDir()
	g := startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.Srv.URL, "")), startOpts{})
	start := time.Now().Add(-time.Second)

	body := `{"id":"evt_admin"}`
	key := idemhook.BodyKey([]byte(body))
	post(t, g.url("/webhooks/test"), body)                                    // processed
	post(t, g.url("/webhooks/test"), body)                                    // replayed
	post(t, g.url("/webhooks/other"), `{"id":"x"}`)                           // processed, binary answer
	post(t, g.url("/webhooks/other"), `{"id":"x"}`, "Idempotency-Key", "k 1") // header key

	t.Run("health", func(t *testing.T) {
		if r := do(t, "GET", g.adminURL("/healthz"), ""); r.Status != 200 || r.Body != "ok\n" {
			t.Errorf("GET /healthz = %d %q", r.Status, r.Body)
		}
		r := do(t, "GET", g.adminURL("/readyz"), "")
		if r.Status != 200 || !strings.HasPrefix(r.Body, "ok\n") || !strings.Contains(r.Body, "\nstore (sqlite ") ||
			!strings.Contains(r.Body, "idemhook.db): ok\n") || !strings.Contains(r.Body, "\naudit (sqlite ") {
			t.Errorf("GET /readyz = %d %q", r.Status, r.Body)
		}
	})

	t.Run("deliveries", func(t *testing.T) {
		all := deliveries(t, g, "", 4)
		newest := all.Deliveries[0]
		if newest.Route != "/webhooks/other" || newest.Source != "other" || newest.Key != "k 1" || newest.Outcome != "processed" ||
			newest.Status != 200 || newest.RequestBytes != int64(len(`{"id":"x"}`)) || newest.ResponseBytes != 3 || newest.Time.Before(start) {
			t.Errorf("newest row = %+v", newest)
		}
		replayed := deliveries(t, g, "outcome=replayed", 1).Deliveries[0]
		if replayed.Source != "test" || replayed.Key != key || replayed.Status != 200 {
			t.Errorf("replayed row = %+v", replayed)
		}
		deliveries(t, g, "source=test", 2)
		deliveries(t, g, "route=/webhooks/other&outcome=processed", 2)
		deliveries(t, g, "since="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), 0)
		deliveries(t, g, "until="+url.QueryEscape(start.Format(time.RFC3339)), 0)

		// Pages of 3 then 1, each row once.
		p1 := deliveries(t, g, "limit=3", 3)
		if p1.Next == "" {
			t.Fatal("first page of 3 (of 4) has no next cursor")
		}
		p2 := deliveries(t, g, "limit=3&cursor="+url.QueryEscape(p1.Next), 1)
		if p2.Next != "" || p2.Deliveries[0].ID != all.Deliveries[3].ID {
			t.Errorf("second page = %+v, want the oldest row %+v", p2, all.Deliveries[3])
		}
	})

	t.Run("deliveries bad queries", func(t *testing.T) {
		tests := []struct{ query, want string }{
			{"since=yesterday", `since: "yesterday" is not an RFC 3339 time (e.g. 2026-11-30T04:00:00Z)`},
			{"limit=0", `limit: "0" is not a positive integer (at most 1000)`},
			{"outcome=done", `outcome: unknown "done" (known: processed, replayed, in_flight_proceeded, in_flight_waited, in_flight_rejected, in_flight_abandoned, mismatch, failed_released, store_error_open, store_error_closed, key_error, signature_invalid, too_large, overloaded, not_queued, filtered, queue_delivered, queue_dead)`},
			{"cursor=garbage", `cursor: not one returned as next by this endpoint`},
			{"sort=asc", `unknown parameter "sort" (known: source, outcome, route, since, until, limit, cursor)`},
		}
		for _, tt := range tests {
			r := do(t, "GET", g.adminURL("/admin/deliveries?"+tt.query), "")
			p := decodeJSON[adminapi.Problem](t, r)
			if r.Status != 400 || p.Detail != tt.want {
				t.Errorf("?%s = %d %q, want 400 %q", tt.query, r.Status, p.Detail, tt.want)
			}
		}
	})

	t.Run("keys", func(t *testing.T) {
		r := do(t, "GET", g.adminURL("/admin/keys/test/"+key), "")
		if r.Status != 200 {
			t.Fatalf("GET key = %d %s", r.Status, r.Body)
		}
		rec := decodeJSON[adminapi.Record](t, r)
		if rec.StoreKey != "idem:test:"+key || rec.State != "completed" || rec.Status != 200 || rec.Body == nil ||
			*rec.Body != `{"call":1}` || rec.BodyEncoding != "text" || rec.Headers["Content-Type"][0] != "application/json" || rec.CreatedAt.IsZero() {
			t.Errorf("record = %+v", rec)
		}

		bin := decodeJSON[adminapi.Record](t, do(t, "GET", g.adminURL("/admin/keys/other/"+idemhook.BodyKey([]byte(`{"id":"x"}`))), ""))
		if raw, err := base64.StdEncoding.DecodeString(*bin.Body); bin.BodyEncoding != "base64" || err != nil || !bytes.Equal(raw, []byte{0xff, 0, 0xfe}) {
			t.Errorf("binary record body = %q %s (%v)", *bin.Body, bin.BodyEncoding, err)
		}
		if r := do(t, "GET", g.adminURL("/admin/keys/other/k%201"), ""); r.Status != 200 {
			t.Errorf("GET header key with a space = %d", r.Status)
		}

		if r := do(t, "GET", g.adminURL("/admin/keys/test/sha256:nothing"), ""); r.Status != 404 {
			t.Errorf("GET missing key = %d, want 404", r.Status)
		}
		if r := do(t, "DELETE", g.adminURL("/admin/keys/test/"+key), ""); r.Status != 204 {
			t.Errorf("DELETE key = %d %s, want 204", r.Status, r.Body)
		}
		if r := do(t, "DELETE", g.adminURL("/admin/keys/test/"+key), ""); r.Status != 404 {
			t.Errorf("DELETE deleted key = %d, want 404", r.Status)
		}
		if r := do(t, "GET", g.adminURL("/admin/keys/test/"+key), ""); r.Status != 404 {
			t.Errorf("GET deleted key = %d, want 404", r.Status)
		}
		// Deleting forces reprocessing.
		calls := up.Calls.Load()
		if r := post(t, g.url("/webhooks/test"), body); r.Header.Get(idemhook.ReplayedHeader) != "" || up.Calls.Load() != calls+1 {
			t.Errorf("after DELETE: replayed=%q, upstream calls %d, want a fresh delivery", r.Header.Get(idemhook.ReplayedHeader), up.Calls.Load()-calls)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		r := do(t, "GET", g.adminURL("/metrics"), "")
		for _, want := range []string{
			`idemhook_deliveries_total{outcome="processed",source="test"} 2`,
			`idemhook_deliveries_total{outcome="replayed",source="test"} 1`,
			`idemhook_deliveries_total{outcome="processed",source="other"} 2`,
			`idemhook_store_operation_duration_seconds_count{op="claim"} 5`,
			`idemhook_store_operation_duration_seconds_count{op="complete"} 4`,
			`idemhook_upstream_duration_seconds_count{route="/webhooks/test"} 2`,
			`idemhook_breaker_open 0`,
			`idemhook_audit_dropped_total 0`,
		} {
			if !strings.Contains(r.Body, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	})
}

func TestAdminToken(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	g := startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.Srv.URL, ", token: \"${TOKEN}\"")),
		startOpts{getenv: envOf("TOKEN", "s3cret")})
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 401},
		{"/metrics", "Bearer s3cret", 200},
		{"/admin/deliveries", "", 401},
		{"/admin/deliveries", "Bearer wrong", 401},
		{"/admin/deliveries", "s3cret", 401},
		{"/admin/deliveries", "Bearer s3cret", 200},
		{"/admin/keys/test/k", "Bearer s3cret", 404},
		{"/admin/keys/test/k", "", 401},
	}
	for _, tt := range tests {
		var h []string
		if tt.auth != "" {
			h = []string{"Authorization", tt.auth}
		}
		if r := do(t, "GET", g.adminURL(tt.path), "", h...); r.Status != tt.want {
			t.Errorf("GET %s with %q = %d, want %d", tt.path, tt.auth, r.Status, tt.want)
		}
	}
}

func TestAuditSinks(t *testing.T) {
	t.Run("log", func(t *testing.T) {
		up := newUpstream(t)
		cfg := strings.Replace(routeConfig(up.Srv.URL), "audit: {sink: none}", "audit: {sink: log}", 1)
		g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
		post(t, g.url("/webhooks/test"), `{"id":"logged"}`)
		r := do(t, "GET", g.adminURL("/admin/deliveries"), "")
		if r.Status != http.StatusNotImplemented {
			t.Errorf("deliveries with sink log = %d, want 501", r.Status)
		}
		if err := g.stop(); err != nil { // flushes the recorder
			t.Fatal(err)
		}
		if log := g.stderr.String(); !strings.Contains(log, "outcome=processed") || !strings.Contains(log, idemhook.BodyKey([]byte(`{"id":"logged"}`))) {
			t.Errorf("the log sink wrote no line for the delivery:\n%s", log)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		raw := pgtest.URL(t)
		pool := pgtest.Pool(t)
		table := pgtest.Table(t, pool, "idemhook_gwtest")
		ctx := t.Context()

		up := newUpstream(t)
		cfg := strings.Replace(routeConfig(up.Srv.URL), "audit: {sink: none}",
			fmt.Sprintf("audit: {sink: postgres, url: \"${PG}\", table: %s}", table), 1)
		g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{getenv: envOf("PG", raw)})
		post(t, g.url("/webhooks/test"), `{"id":"pg"}`)
		post(t, g.url("/webhooks/test"), `{"id":"pg"}`)
		page := deliveries(t, g, "source=test", 2)
		if page.Deliveries[0].Outcome != "replayed" || page.Deliveries[1].Outcome != "processed" {
			t.Errorf("rows = %+v", page.Deliveries)
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 2 {
			t.Errorf("rows in %s = %d (%v), want 2", table, n, err)
		}
	})
}

// TestAdminKeysOddKeys stores deliveries under header keys an operator will
// then look up through /admin/keys/{source}/{key}: a GitHub-style
// "hookid:guid", keys holding "/" and "//" (sent percent-encoded), a key
// longer than the middleware keeps as is (stored under its SHA-256), and a
// quoted structured-field key (stored unquoted). GET must find each one and
// DELETE must remove it, so the retry is forwarded again.
func TestAdminKeysOddKeys(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "header: x-key")), startOpts{})
	long := strings.Repeat("k", 200)
	tests := []struct {
		name, key, path string
	}{
		{"colon", "12345:72d3162e-cc78-11e3-81ab-4c9367dc0958", "12345:72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		{"slash", "order/42", "order%2F42"},
		{"slash raw", "order/43", "order/43"},
		{"double slash", "a//b", "a%2F%2Fb"},
		{"long", long, long},
		{"quoted", `"sf-key"`, url.PathEscape(`"sf-key"`)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"n":` + string(rune('0'+i)) + `}`
			if r := post(t, g.url("/webhooks/test"), body, "x-key", tt.key); r.Status != http.StatusOK {
				t.Fatalf("POST = %d %s", r.Status, r.Body)
			}
			if r := do(t, "GET", g.adminURL("/admin/keys/test/"+tt.path), ""); r.Status != http.StatusOK {
				t.Fatalf("GET /admin/keys/test/%s = %d %s", tt.path, r.Status, r.Body)
			}
			if r := do(t, "DELETE", g.adminURL("/admin/keys/test/"+tt.path), ""); r.Status != http.StatusNoContent {
				t.Fatalf("DELETE /admin/keys/test/%s = %d %s", tt.path, r.Status, r.Body)
			}
			before := len(up.Received())
			if r := post(t, g.url("/webhooks/test"), body, "x-key", tt.key); r.Status != http.StatusOK {
				t.Fatalf("retry POST = %d %s", r.Status, r.Body)
			}
			if got := len(up.Received()); got != before+1 {
				t.Fatalf("after DELETE the retry was not forwarded (upstream calls %d, want %d)", got, before+1)
			}
		})
	}
}

// TestAdminTokenScheme: the auth scheme is case-insensitive (RFC 9110
// section 11.1), so "bearer" and "BEARER" work. A token that is a prefix or
// an extension of the configured one, an empty token and another scheme are
// refused.
func TestAdminTokenScheme(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	g := startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.Srv.URL, ", token: \"${TOKEN}\"")),
		startOpts{getenv: envOf("TOKEN", "s3cret")})
	tests := []struct {
		auth string
		want int
	}{
		{"Bearer s3cret", http.StatusOK},
		{"bearer s3cret", http.StatusOK},
		{"BEARER s3cret", http.StatusOK},
		{"Bearer s3cre", http.StatusUnauthorized},
		{"Bearer s3cret2", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Basic s3cret", http.StatusUnauthorized},
		{"Bearers3cret", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		if r := do(t, "GET", g.adminURL("/admin/deliveries"), "", "Authorization", tt.auth); r.Status != tt.want {
			t.Errorf("Authorization %q = %d, want %d", tt.auth, r.Status, tt.want)
		}
	}
}

// TestAdminKeysScoped: on a prefix route a key is stored under the
// request's path (its scope), so GET and DELETE /admin/keys without
// ?scope= answer 404. The 404 says the route is scoped and how to pass the
// scope, and names the scopes that hold the key, found through the audit
// trail and checked in the store. A ?scope= on a source with no prefix
// route is pointed out.
func TestAdminKeysScoped(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	g := startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.Srv.URL, "")+fmt.Sprintf(`  - path: /t/
    upstream: %s/tenant
    source: tenant
`, up.Srv.URL)), startOpts{})
	body := `{"id":"evt_scoped"}`
	key := idemhook.BodyKey([]byte(body))
	for _, p := range []string{"/t/acme/orders", "/t/globex/orders"} {
		if r := post(t, g.url(p), body); r.Status != http.StatusOK {
			t.Fatalf("POST %s = %d %s", p, r.Status, r.Body)
		}
	}
	post(t, g.url("/t/acme/orders"), `{"id":"evt_other"}`)
	deliveries(t, g, "source=tenant", 3)
	const within = "the audit trail's last 1000 deliveries of tenant"

	type keyProblemJSON struct {
		Status int      `json:"status"`
		Detail string   `json:"detail"`
		Scopes []string `json:"scopes"`
	}
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantDetail         string
		wantScopes         []string
	}{
		{"scoped, with its scope", "GET", "/admin/keys/tenant/" + key + "?scope=/t/acme/orders", http.StatusOK, "", nil},
		{"scoped, without a scope", "GET", "/admin/keys/tenant/" + key, http.StatusNotFound,
			"nothing stored under idem:tenant:" + key + `. Source "tenant" has the prefix route /t/, whose keys are scoped by the request's path: ` +
				"add ?scope=<path>, e.g. /admin/keys/tenant/" + key + "?scope=/t/globex/orders. " +
				`It is stored under the scopes /t/globex/orders, /t/acme/orders (from ` + within + `; "scopes" lists them).`,
			[]string{"/t/globex/orders", "/t/acme/orders"}},
		{"scoped, another scope", "GET", "/admin/keys/tenant/" + key + "?scope=/t/acme", http.StatusNotFound,
			"nothing stored under idem:tenant@/t/acme:" + key + " (scope /t/acme of the prefix route /t/). " +
				`It is stored under the scopes /t/globex/orders, /t/acme/orders (from ` + within + `; "scopes" lists them).`,
			[]string{"/t/globex/orders", "/t/acme/orders"}},
		{"scoped, never delivered", "GET", "/admin/keys/tenant/sha256:nothing", http.StatusNotFound,
			`nothing stored under idem:tenant:sha256:nothing. Source "tenant" has the prefix route /t/, whose keys are scoped by the request's path: ` +
				"add ?scope=<path>, e.g. /admin/keys/tenant/sha256:nothing?scope=/t/acme. " +
				"The key is not among " + within + ", so no scope holding it can be named.", nil},
		{"delete, without a scope", "DELETE", "/admin/keys/tenant/" + key, http.StatusNotFound, "", []string{"/t/globex/orders", "/t/acme/orders"}},
		{"delete, with its scope", "DELETE", "/admin/keys/tenant/" + key + "?scope=/t/globex/orders", http.StatusNoContent, "", nil},
		{"scoped, one scope left", "GET", "/admin/keys/tenant/" + key, http.StatusNotFound, "", []string{"/t/acme/orders"}},
		{"scoped, the only one asked", "GET", "/admin/keys/tenant/" + key + "?scope=/t/globex/orders", http.StatusNotFound,
			"nothing stored under idem:tenant@/t/globex/orders:" + key + " (scope /t/globex/orders of the prefix route /t/). " +
				`It is stored under scope /t/acme/orders (from ` + within + `; "scopes" lists it).`, []string{"/t/acme/orders"}},
		{"exact, with a scope", "GET", "/admin/keys/test/k?scope=/t/acme", http.StatusNotFound,
			`nothing stored under idem:test@/t/acme:k. No prefix route has source "test", so its keys have no scope: drop ?scope=`, nil},
		{"exact, missing", "GET", "/admin/keys/test/k", http.StatusNotFound, "nothing stored under idem:test:k (never stored, expired or deleted)", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, g.adminURL(tt.path), "")
			if r.Status != tt.wantStatus {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, r.Status, r.Body, tt.wantStatus)
			}
			if r.Status != http.StatusNotFound {
				return
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q", ct)
			}
			p := decodeJSON[keyProblemJSON](t, r)
			if p.Status != http.StatusNotFound || (tt.wantDetail != "" && p.Detail != tt.wantDetail) {
				t.Errorf("detail\n got %q\nwant %q", p.Detail, tt.wantDetail)
			}
			if !slices.Equal(p.Scopes, tt.wantScopes) {
				t.Errorf("scopes = %q, want %q", p.Scopes, tt.wantScopes)
			}
		})
	}
}
