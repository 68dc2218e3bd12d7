package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// TestOutcomeClasses: every outcome this build knows is in exactly one
// class of the console's table, other than "other" (kept for outcomes it
// doesn't know), so a new outcome can't silently fall out of the counts.
func TestOutcomeClasses(t *testing.T) {
	if len(outcomeClass) != len(deliveryOutcomes()) {
		t.Errorf("%d outcomes classified, %d outcomes exist", len(outcomeClass), len(deliveryOutcomes()))
	}
	for _, o := range deliveryOutcomes() {
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
		want adminapi.Window
	}{
		{"processed", adminapi.Window{Processed: 1}},
		{"replayed", adminapi.Window{Replayed: 1, Duplicates: 1}},
		{"in_flight_waited", adminapi.Window{Replayed: 1, Duplicates: 1}},
		{"in_flight_rejected", adminapi.Window{Refused: 1, Duplicates: 1}},
		{"in_flight_abandoned", adminapi.Window{Refused: 1, Duplicates: 1}},
		{"mismatch", adminapi.Window{Refused: 1}},
		{"signature_invalid", adminapi.Window{Refused: 1}},
		{"too_large", adminapi.Window{Refused: 1}},
		{"overloaded", adminapi.Window{Refused: 1}},
		{"store_error_closed", adminapi.Window{Refused: 1}},
		{"not_queued", adminapi.Window{Refused: 1}},
		{"failed_released", adminapi.Window{Failed: 1}},
		{"in_flight_proceeded", adminapi.Window{Unprotected: 1, Duplicates: 1}},
		{"store_error_open", adminapi.Window{Unprotected: 1}},
		{"key_error", adminapi.Window{Unprotected: 1}},
		{"a_future_outcome", adminapi.Window{Other: 1}},
	}
	for _, tt := range tests {
		w := adminapi.Window{Outcomes: map[string]int64{}}
		addOutcome(&w, tt.give, 1)
		tt.want.Total = 1
		tt.want.DuplicateRate = gatewaytest.Rate(float64(tt.want.Duplicates))
		tt.want.Outcomes = map[string]int64{tt.give: 1}
		gatewaytest.SameWindow(t, tt.give, w, tt.want)
		if sum := w.Processed + w.Replayed + w.Refused + w.Failed + w.Unprotected + w.Other; sum != w.Total {
			t.Errorf("%s: the columns add up to %d, total %d", tt.give, sum, w.Total)
		}
	}
}

// statsOf serves GET /admin/stats through h and decodes it.
func statsOf(t *testing.T, h http.Handler, auth string) adminapi.Stats {
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
	var st adminapi.Stats
	if err := json.Unmarshal(rr.Body.Bytes(), &st); err != nil {
		t.Fatalf("decode %q: %v", rr.Body, err)
	}
	return st
}

// newStatsGateway returns a gateway, not serving, of sqliteConfig's two
// routes in dir (the file idemhook.yaml there, so that it can reload).
func newStatsGateway(t *testing.T, dir string) *Gateway {
	t.Helper()
	cfg, err := config.Load(gatewaytest.WriteConfig(t, dir, gatewaytest.SQLiteConfig(dir, "http://127.0.0.1:1", "")), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(t.Context(), cfg, Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
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
	if got := fmt.Sprint(s.Routes); got != "[{/webhooks/test test []} {/webhooks/other other []}]" {
		t.Errorf("routes = %s", got)
	}
	if len(s.Outcomes) != len(deliveryOutcomes()) || s.Outcomes[1] != (adminapi.Outcome{Name: "replayed", Class: "replayed"}) {
		t.Errorf("outcomes = %+v", s.Outcomes)
	}
	var names []string
	for _, x := range s.Sources {
		names = append(names, x.Source)
	}
	if got := strings.Join(names, ","); got != "gone,other,test" {
		t.Errorf("sources = %s, want gone,other,test (sorted; other has no delivery)", got)
	}

	test := gatewaytest.SourceStats(t, s, "test")
	// Hour: 10 deliveries, duplicates replayed 2 + waited 1 + rejected 1.
	gatewaytest.SameWindow(t, "test, last hour", test.Hour, adminapi.Window{Total: 10, Processed: 4, Replayed: 3, Refused: 2, Failed: 1,
		Duplicates: 4, DuplicateRate: gatewaytest.Rate(0.4), Outcomes: map[string]int64{"processed": 4, "replayed": 2,
			"in_flight_waited": 1, "in_flight_rejected": 1, "signature_invalid": 1, "failed_released": 1}})
	// Day: 15 deliveries, duplicates 4 + in_flight_proceeded 1.
	gatewaytest.SameWindow(t, "test, last day", test.Day, adminapi.Window{Total: 15, Processed: 7, Replayed: 3, Refused: 3, Failed: 1, Unprotected: 1,
		Duplicates: 5, DuplicateRate: gatewaytest.Rate(5.0 / 15), Outcomes: map[string]int64{"processed": 7, "replayed": 2,
			"in_flight_waited": 1, "in_flight_rejected": 1, "signature_invalid": 1, "failed_released": 1,
			"mismatch": 1, "in_flight_proceeded": 1}})
	other := gatewaytest.SourceStats(t, s, "other")
	gatewaytest.SameWindow(t, "other, last day", other.Day, adminapi.Window{Outcomes: map[string]int64{}})
	gone := gatewaytest.SourceStats(t, s, "gone")
	gatewaytest.SameWindow(t, "gone, last hour", gone.Hour, adminapi.Window{Outcomes: map[string]int64{}})
	gatewaytest.SameWindow(t, "gone, last day", gone.Day, adminapi.Window{Total: 2, Replayed: 2, Duplicates: 2, DuplicateRate: gatewaytest.Rate(1),
		Outcomes: map[string]int64{"replayed": 2}})

	// An answer is reused until it is maxAge old.
	h := &statsHandler{g: g, maxAge: time.Hour}
	first := statsOf(t, h, "")
	if err := g.audit.querier.(audit.Sink).Write(t.Context(), []audit.Entry{{Time: time.Now(), Route: "/webhooks/other",
		Source: "other", Key: "k", Outcome: "processed", Status: 200}}); err != nil {
		t.Fatal(err)
	}
	if again := statsOf(t, h, ""); !again.Now.Equal(first.Now) || gatewaytest.SourceStats(t, again, "other").Hour.Total != 0 {
		t.Errorf("a second answer within maxAge was counted again: now %v, then %v", first.Now, again.Now)
	}
	h.maxAge = 0
	if fresh := gatewaytest.SourceStats(t, statsOf(t, h, ""), "other"); fresh.Hour.Total != 1 {
		t.Errorf("an answer older than maxAge was reused: other's hour = %+v", fresh.Hour)
	}
}

// TestAdminStatsReload: the routes and sources of GET /admin/stats are
// those in service, so a route added by a reload is listed (the console
// offers it as a filter and gives its source a row).
func TestAdminStatsReload(t *testing.T) {
	dir := t.TempDir()
	g := newStatsGateway(t, dir)
	gatewaytest.WriteConfig(t, dir, gatewaytest.SQLiteConfig(dir, "http://127.0.0.1:1", "")+"  - path: /t/\n    upstream: http://127.0.0.1:1/t\n    source: tenant\n")
	cfg, err := config.Load(filepath.Join(dir, "idemhook.yaml"), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	s := statsOf(t, &statsHandler{g: g}, "")
	if got := fmt.Sprint(s.Routes); got != "[{/webhooks/test test []} {/webhooks/other other []} {/t/ tenant []}]" {
		t.Errorf("routes after a reload = %s, want the new one too, in the file's order", got)
	}
	gatewaytest.SourceStats(t, s, "tenant")
}
