package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/pgtest"
)

// TestOutcomeClasses: every outcome this build knows is in exactly one
// class of the console's table, other than "other" (kept for outcomes it
// doesn't know), so a new outcome can't silently fall out of the counts.
func TestOutcomeClasses(t *testing.T) {
	if len(outcomeClass) != len(idemhook.Outcomes()) {
		t.Errorf("%d outcomes classified, %d outcomes exist", len(outcomeClass), len(idemhook.Outcomes()))
	}
	for _, o := range idemhook.Outcomes() {
		switch outcomeClass[o] {
		case classProcessed, classReplayed, classRefused, classFailed, classUnprotected:
		default:
			t.Errorf("outcome %s has no class", o)
		}
	}
}

// TestWindowAdds: each outcome is counted in one column of a window, and
// the columns add up to the total, an unknown outcome included.
func TestWindowAdds(t *testing.T) {
	tests := []struct {
		give string
		want windowJSON
	}{
		{"processed", windowJSON{Processed: 1}},
		{"replayed", windowJSON{Replayed: 1, Duplicates: 1}},
		{"in_flight_waited", windowJSON{Replayed: 1, Duplicates: 1}},
		{"in_flight_rejected", windowJSON{Refused: 1, Duplicates: 1}},
		{"in_flight_abandoned", windowJSON{Refused: 1, Duplicates: 1}},
		{"mismatch", windowJSON{Refused: 1}},
		{"signature_invalid", windowJSON{Refused: 1}},
		{"too_large", windowJSON{Refused: 1}},
		{"store_error_closed", windowJSON{Refused: 1}},
		{"failed_released", windowJSON{Failed: 1}},
		{"in_flight_proceeded", windowJSON{Unprotected: 1, Duplicates: 1}},
		{"store_error_open", windowJSON{Unprotected: 1}},
		{"key_error", windowJSON{Unprotected: 1}},
		{"a_future_outcome", windowJSON{Other: 1}},
	}
	for _, tt := range tests {
		w := windowJSON{Outcomes: map[string]int64{}}
		w.add(tt.give, 1)
		tt.want.Total = 1
		tt.want.DuplicateRate = rate(float64(tt.want.Duplicates))
		tt.want.Outcomes = map[string]int64{tt.give: 1}
		sameWindow(t, tt.give, w, tt.want)
		if sum := w.Processed + w.Replayed + w.Refused + w.Failed + w.Unprotected + w.Other; sum != w.Total {
			t.Errorf("%s: the columns add up to %d, total %d", tt.give, sum, w.Total)
		}
	}
}

// statsOf serves GET /admin/stats through h and decodes it.
func statsOf(t *testing.T, h http.Handler, auth string) statsJSON {
	t.Helper()
	req := httptest.NewRequest("GET", "/admin/stats", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	if rr.Code != 200 {
		t.Fatalf("GET /admin/stats = %d %s", rr.Code, rr.Body)
	}
	return decodeJSON[statsJSON](t, response{Status: rr.Code, Body: rr.Body.String()})
}

func sourceStats(t *testing.T, s statsJSON, source string) sourceStatsJSON {
	t.Helper()
	for _, x := range s.Sources {
		if x.Source == source {
			return x
		}
	}
	t.Fatalf("source %q not in %+v", source, s.Sources)
	return sourceStatsJSON{}
}

func rate(f float64) *float64 { return &f }

func sameWindow(t *testing.T, what string, got windowJSON, want windowJSON) {
	t.Helper()
	rateOf := func(p *float64) string {
		if p == nil {
			return "null"
		}
		return fmt.Sprintf("%.6f", *p)
	}
	if got.Total != want.Total || got.Processed != want.Processed || got.Replayed != want.Replayed ||
		got.Refused != want.Refused || got.Failed != want.Failed || got.Unprotected != want.Unprotected ||
		got.Other != want.Other || got.Duplicates != want.Duplicates ||
		rateOf(got.DuplicateRate) != rateOf(want.DuplicateRate) || fmt.Sprint(got.Outcomes) != fmt.Sprint(want.Outcomes) {
		t.Errorf("%s:\n got %+v rate %s\nwant %+v rate %s", what, got, rateOf(got.DuplicateRate), want, rateOf(want.DuplicateRate))
	}
}

// newStatsGateway returns a gateway, not serving, of sqliteConfig's two
// routes in dir (the file idemhook.yaml there, so that it can reload).
func newStatsGateway(t *testing.T, dir string) *gateway {
	t.Helper()
	cfg, err := config.Load(writeConfig(t, dir, sqliteConfig(dir, "http://127.0.0.1:1", "")), envOf())
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGateway(t.Context(), cfg, slog.New(slog.DiscardHandler), time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.res.close() })
	return g
}

// TestAdminStatsWindows writes entries of known ages into the gateway's
// SQLite trail and checks the hour and day windows, the classes and the
// duplicate rate of GET /admin/stats.
func TestAdminStatsWindows(t *testing.T) {
	g := newStatsGateway(t, t.TempDir())

	now := time.Now()
	var entries []audit.Entry
	add := func(age time.Duration, source, outcome string, n int) {
		for range n {
			entries = append(entries, audit.Entry{Time: now.Add(-age), Route: "/webhooks/" + source, Source: source,
				Key: "k", Outcome: outcome, Status: 200})
		}
	}
	add(time.Minute, "test", "processed", 4)
	add(time.Minute, "test", "replayed", 2)
	add(time.Minute, "test", "in_flight_waited", 1)
	add(time.Minute, "test", "in_flight_rejected", 1)
	add(time.Minute, "test", "signature_invalid", 1)
	add(time.Minute, "test", "failed_released", 1)
	add(2*time.Hour, "test", "processed", 3)
	add(2*time.Hour, "test", "mismatch", 1)
	add(2*time.Hour, "test", "in_flight_proceeded", 1)
	add(25*time.Hour, "test", "processed", 10) // older than a day: in neither window
	add(3*time.Hour, "gone", "replayed", 2)    // a source no route has any more
	if err := g.audit.querier.(audit.Sink).Write(t.Context(), entries); err != nil {
		t.Fatal(err)
	}

	s := statsOf(t, g.admin, "")
	if got := fmt.Sprint(s.Routes); got != "[{/webhooks/test test} {/webhooks/other other}]" {
		t.Errorf("routes = %s", got)
	}
	if len(s.Outcomes) != len(idemhook.Outcomes()) || s.Outcomes[1] != (outcomeJSON{"replayed", "replayed"}) {
		t.Errorf("outcomes = %+v", s.Outcomes)
	}
	var names []string
	for _, x := range s.Sources {
		names = append(names, x.Source)
	}
	if got := strings.Join(names, ","); got != "gone,other,test" {
		t.Errorf("sources = %s, want gone,other,test (sorted; other has no delivery)", got)
	}

	test := sourceStats(t, s, "test")
	// Hour: 10 deliveries, duplicates replayed 2 + waited 1 + rejected 1.
	sameWindow(t, "test, last hour", test.Hour, windowJSON{Total: 10, Processed: 4, Replayed: 3, Refused: 2, Failed: 1,
		Duplicates: 4, DuplicateRate: rate(0.4), Outcomes: map[string]int64{"processed": 4, "replayed": 2,
			"in_flight_waited": 1, "in_flight_rejected": 1, "signature_invalid": 1, "failed_released": 1}})
	// Day: 15 deliveries, duplicates 4 + in_flight_proceeded 1.
	sameWindow(t, "test, last day", test.Day, windowJSON{Total: 15, Processed: 7, Replayed: 3, Refused: 3, Failed: 1, Unprotected: 1,
		Duplicates: 5, DuplicateRate: rate(5.0 / 15), Outcomes: map[string]int64{"processed": 7, "replayed": 2,
			"in_flight_waited": 1, "in_flight_rejected": 1, "signature_invalid": 1, "failed_released": 1,
			"mismatch": 1, "in_flight_proceeded": 1}})
	other := sourceStats(t, s, "other")
	sameWindow(t, "other, last day", other.Day, windowJSON{Outcomes: map[string]int64{}})
	gone := sourceStats(t, s, "gone")
	sameWindow(t, "gone, last hour", gone.Hour, windowJSON{Outcomes: map[string]int64{}})
	sameWindow(t, "gone, last day", gone.Day, windowJSON{Total: 2, Replayed: 2, Duplicates: 2, DuplicateRate: rate(1),
		Outcomes: map[string]int64{"replayed": 2}})

	// An answer is reused until it is maxAge old.
	h := &statsHandler{g: g, maxAge: time.Hour}
	first := statsOf(t, h, "")
	if err := g.audit.querier.(audit.Sink).Write(t.Context(), []audit.Entry{{Time: time.Now(), Route: "/webhooks/other",
		Source: "other", Key: "k", Outcome: "processed", Status: 200}}); err != nil {
		t.Fatal(err)
	}
	if again := statsOf(t, h, ""); !again.Now.Equal(first.Now) || sourceStats(t, again, "other").Hour.Total != 0 {
		t.Errorf("a second answer within maxAge was counted again: now %v, then %v", first.Now, again.Now)
	}
	h.maxAge = 0
	if fresh := sourceStats(t, statsOf(t, h, ""), "other"); fresh.Hour.Total != 1 {
		t.Errorf("an answer older than maxAge was reused: other's hour = %+v", fresh.Hour)
	}
}

// TestAdminStatsReload: the routes and sources of GET /admin/stats are
// those in service, so a route added by a reload is listed (the console
// offers it as a filter and gives its source a row).
func TestAdminStatsReload(t *testing.T) {
	dir := t.TempDir()
	g := newStatsGateway(t, dir)
	writeConfig(t, dir, sqliteConfig(dir, "http://127.0.0.1:1", "")+"  - path: /t/\n    upstream: http://127.0.0.1:1/t\n    source: tenant\n")
	g.reload(envOf())
	s := statsOf(t, &statsHandler{g: g}, "")
	if got := fmt.Sprint(s.Routes); got != "[{/webhooks/test test} {/webhooks/other other} {/t/ tenant}]" {
		t.Errorf("routes after a reload = %s, want the new one too, in the file's order", got)
	}
	sourceStats(t, s, "tenant")
}

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
		s := decodeJSON[statsJSON](t, r)
		want := windowJSON{Total: 4, Processed: 2, Replayed: 1, Refused: 1, Duplicates: 1, DuplicateRate: rate(0.25),
			Outcomes: map[string]int64{"processed": 2, "replayed": 1, "mismatch": 1}}
		test := sourceStats(t, s, "test")
		sameWindow(t, "test, last hour", test.Hour, want)
		sameWindow(t, "test, last day", test.Day, want)
		sameWindow(t, "other, last hour", sourceStats(t, s, "other").Hour, windowJSON{Total: 1, Processed: 1,
			DuplicateRate: rate(0), Outcomes: map[string]int64{"processed": 1}})

		if r := do(t, "GET", g.adminURL("/admin/stats?source=test"), ""); r.Status != 400 {
			t.Errorf("GET /admin/stats?source=test = %d, want 400", r.Status)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		up := newUpstream(t)
		dir := t.TempDir()
		run(t, startGateway(t, writeConfig(t, dir, sqliteConfig(dir, up.srv.URL, "")), startOpts{}))
	})
	t.Run("postgres", func(t *testing.T) {
		raw := pgtest.URL(t)
		table := pgtest.Table(t, pgtest.Pool(t), "idemhook_statstest")
		up := newUpstream(t)
		dir := t.TempDir()
		cfg := sqliteConfig(dir, up.srv.URL, "") +
			fmt.Sprintf("audit: {sink: postgres, url: \"${PG}\", table: %s}\n", table)
		run(t, startGateway(t, writeConfig(t, dir, cfg), startOpts{getenv: envOf("PG", raw)}))
	})
	t.Run("not queryable", func(t *testing.T) {
		up := newUpstream(t)
		g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.srv.URL)), startOpts{})
		if r := do(t, "GET", g.adminURL("/admin/stats"), ""); r.Status != http.StatusNotImplemented ||
			!strings.Contains(r.Body, `the audit sink is \"none\"`) {
			t.Errorf("GET /admin/stats with sink none = %d %s, want 501", r.Status, r.Body)
		}
	})
}
