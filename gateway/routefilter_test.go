package gateway_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/syncbuf"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/provider"
)

// signedStripe sends body to url signed now with secret, as Stripe does.
func signedStripe(t *testing.T, url, body, secret string) gatewaytest.Response {
	t.Helper()
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(stamp + "." + body))
	return gatewaytest.Post(t, url, body, "Stripe-Signature", "t="+stamp+",v1="+hex.EncodeToString(m.Sum(nil)))
}

// eventCounter counts what a backend receives, per path and event id.
type eventCounter struct {
	mu  sync.Mutex
	got map[string]int // "path id" -> deliveries
}

func newEventBackend(t *testing.T) (*gatewaytest.Upstream, *eventCounter) {
	c := &eventCounter{got: map[string]int{}}
	up := gatewaytest.NewUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		var ev struct{ ID string }
		_ = json.Unmarshal(up.Received()[n-1].Body, &ev)
		c.mu.Lock()
		c.got[r.URL.Path+" "+ev.ID]++
		c.mu.Unlock()
		fmt.Fprintf(w, `{"ran":%q}`, ev.ID)
	}
	return up, c
}

func (c *eventCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.got)
}

// A signed Stripe stream of mixed event types, each sent twice, through a
// proxy route and a queued route on SQLite that both filter
// body.type.startsWith("payment_intent."), beside a route without a
// filter: the backend runs each matching event exactly once per route and
// no other; a filtered event is answered the route's success (the queued
// route's accept answer), its re-delivery is a replay that reaches nobody;
// a forged signature is refused before the filter runs. The trail, the
// statistics and the metrics count the filtered deliveries as filtered.
func TestFilterRoutesOnSQLite(t *testing.T) {
	up, backend := newEventBackend(t)
	dir := t.TempDir()
	const secret = "whsec_filter"
	filter := `'body.type.startsWith("payment_intent.")'`
	_, g, _ := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %[1]q}
admin: {listen: off}
audit: {sink: sqlite}
routes:
  - path: /webhooks/stripe
    upstream: %[2]s/proxy
    source: stripe
    provider: stripe
    secrets: [%[3]s]
    filter: %[4]s
  - path: /webhooks/stripe-queued
    upstream: %[2]s/queued
    source: stripe-queued
    provider: stripe
    secrets: [%[3]s]
    deliver: queue
    queue: {backoff_min: 20ms, backoff_max: 100ms}
    filter: |
      json &&
        body.type.startsWith("payment_intent.")
  - path: /webhooks/plain
    upstream: %[2]s/plain
    source: plain
    header: x-event-id
`, filepath.Join(dir, "idemhook.db"), up.Srv.URL, secret, filter))
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()

	types := []string{"payment_intent.succeeded", "customer.created", "invoice.paid", "payment_intent.created", "charge.refunded"}
	const events = 20
	matching := map[string]bool{}
	body := func(i int) (string, string) {
		id := fmt.Sprintf("evt_%02d", i)
		typ := types[i%len(types)]
		matching[id] = strings.HasPrefix(typ, "payment_intent.")
		return id, fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"n":%d}}}`, id, typ, i)
	}
	nMatching := 0
	for i := range events {
		if _, _ = body(i); matching[fmt.Sprintf("evt_%02d", i)] {
			nMatching++
		}
	}
	nFiltered := events - nMatching

	for pass, replayed := range []string{"", "true"} {
		for i := range events {
			id, b := body(i)
			r := signedStripe(t, srv.URL+"/webhooks/stripe", b, secret)
			want := `{"status":"filtered"}` + "\n"
			if matching[id] {
				want = fmt.Sprintf(`{"ran":%q}`, id)
			}
			if r.Status != http.StatusOK || r.Body != want || r.Header.Get("Idempotent-Replayed") != replayed {
				t.Fatalf("pass %d, proxy route, %s: %d %q replayed=%q; want 200 %q replayed=%q", pass, id, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), want, replayed)
			}
			r = signedStripe(t, srv.URL+"/webhooks/stripe-queued", b, secret)
			if r.Status != http.StatusAccepted || r.Body != config.DefaultAcceptBody || r.Header.Get("Idempotent-Replayed") != replayed {
				t.Fatalf("pass %d, queued route, %s: %d %q replayed=%q; want the accept answer, replayed=%q", pass, id, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), replayed)
			}
			if i < 5 {
				r = gatewaytest.Post(t, srv.URL+"/webhooks/plain", fmt.Sprintf(`{"id":"plain_%d"}`, i), "X-Event-Id", fmt.Sprint("plain_", i))
				if r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != replayed {
					t.Fatalf("pass %d, plain route, %d: %d replayed=%q", pass, i, r.Status, r.Header.Get("Idempotent-Replayed"))
				}
			}
		}
	}
	// A forged signature: refused before anything is claimed or filtered.
	_, b := body(0)
	if r := signedStripe(t, srv.URL+"/webhooks/stripe", strings.Replace(b, "evt_00", "evt_forged", 1), "whsec_other"); r.Status != http.StatusUnauthorized {
		t.Fatalf("forged signature: %d; want 401", r.Status)
	}

	testutil.Eventually(t, "the queued route's matching events delivered", func() bool {
		n := 0
		for k, v := range backend.snapshot() {
			if strings.HasPrefix(k, "/queued ") {
				n += v
			}
		}
		return n >= nMatching
	})
	got := backend.snapshot()
	want := map[string]int{}
	for i := range events {
		id := fmt.Sprintf("evt_%02d", i)
		if matching[id] {
			want["/proxy "+id] = 1
			want["/queued "+id] = 1
		}
	}
	for i := range 5 {
		want[fmt.Sprintf("/plain plain_%d", i)] = 1
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the backend ran\n %v\nwant each matching event once per route, and no filtered one:\n %v", got, want)
	}

	// The trail, once every delivery is in it (the provider's 2*events
	// per stripe route and one forged, 10 plain; the queue's nMatching):
	// one filtered entry per filtered event and route, and the queued
	// route delivered nothing else.
	testutil.Eventually(t, "every delivery in the trail", func() bool {
		all := gatewaytest.DecodeJSON[adminapi.Deliveries](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/deliveries?limit=1000", "")).Deliveries
		return len(all) >= 4*events+1+10+nMatching
	})
	filtered := gatewaytest.DecodeJSON[adminapi.Deliveries](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/deliveries?outcome=filtered&limit=1000", "")).Deliveries
	seen := map[string]int{}
	for _, d := range filtered {
		if matching[d.Key] || d.Outcome != "filtered" || !strings.Contains(d.Reason, "filter did not match") || d.Status != map[string]int{"stripe": 200, "stripe-queued": 202}[d.Source] {
			t.Errorf("filtered entry %+v: a matching event, another outcome or status, or no reason", d)
		}
		seen[d.Source+" "+d.Key]++
	}
	if len(seen) != 2*nFiltered || len(filtered) != 2*nFiltered {
		t.Errorf("%d filtered entries over %d events and routes; want %d, one per filtered event and route", len(filtered), len(seen), 2*nFiltered)
	}
	delivered := gatewaytest.DecodeJSON[adminapi.Deliveries](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/deliveries?outcome=queue_delivered&limit=1000", "")).Deliveries
	if len(delivered) != nMatching {
		t.Errorf("%d queue_delivered entries; want %d, the matching events", len(delivered), nMatching)
	}

	st := gatewaytest.DecodeJSON[adminapi.Stats](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/stats", ""))
	gatewaytest.SameWindow(t, "stripe-queued, last hour", gatewaytest.SourceStats(t, st, "stripe-queued").Hour, adminapi.Window{
		Total: 2 * events, Processed: events, Replayed: events, Duplicates: events, DuplicateRate: gatewaytest.Rate(0.5),
		Outcomes: map[string]int64{"processed": int64(nMatching), "filtered": int64(nFiltered), "replayed": events}})
	gatewaytest.SameWindow(t, "stripe, last hour", gatewaytest.SourceStats(t, st, "stripe").Hour, adminapi.Window{
		Total: 2*events + 1, Processed: events, Replayed: events, Refused: 1, Duplicates: events, DuplicateRate: gatewaytest.Rate(float64(events) / (2*events + 1)),
		Outcomes: map[string]int64{"processed": int64(nMatching), "filtered": int64(nFiltered), "replayed": events, "signature_invalid": 1}})
	gatewaytest.SameWindow(t, "plain, last hour", gatewaytest.SourceStats(t, st, "plain").Hour, adminapi.Window{
		Total: 10, Processed: 5, Replayed: 5, Duplicates: 5, DuplicateRate: gatewaytest.Rate(0.5),
		Outcomes: map[string]int64{"processed": 5, "replayed": 5}})
	class := ""
	for _, o := range st.Outcomes {
		if o.Name == "filtered" {
			class = o.Class
		}
	}
	if class != "processed" {
		t.Errorf("/admin/stats gives filtered the class %q; want processed", class)
	}
	for _, src := range []string{"stripe", "stripe-queued"} {
		series := fmt.Sprintf(`idemhook_deliveries_total{outcome="filtered",source=%q}`, src)
		if v := metricValue(t, admin.URL, series); v != float64(nFiltered) {
			t.Errorf("%s = %v; want %d", series, v, nFiltered)
		}
	}
}

// A filter that fails at run time (a field the event lacks, read without
// has(); a body that is not JSON) lets the event through: it reaches the
// backend once, is processed, and the gateway logs one WARN naming the
// route. An event the filter refuses without an error is filtered.
func TestFilterRuntimeErrorDelivers(t *testing.T) {
	up, backend := newEventBackend(t)
	cfg, err := config.Parse("idemhook.yaml", []byte(gatewaytest.RouteConfig(up.Srv.URL,
		"header: x-event-id",
		`filter: 'body.data.amount > 100'`)), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	g, err := gateway.New(t.Context(), cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(t.Context())
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()

	for _, tt := range []struct {
		id, body  string
		delivered bool
		warn      string // in the WARN, "" for none
	}{
		{"big", `{"id":"big","data":{"amount":150}}`, true, ""},
		{"small", `{"id":"small","data":{"amount":50}}`, false, ""},
		{"no-amount", `{"id":"no-amount","data":{}}`, true, "no such key: amount"},
		{"not-json", `id=not-json`, true, "the body is not JSON"},
	} {
		before := strings.Count(logs.String(), "level=WARN")
		r := gatewaytest.Post(t, srv.URL+"/webhooks/test", tt.body, "X-Event-Id", tt.id)
		if r.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", tt.id, r.Status, r.Body)
		}
		if again := gatewaytest.Post(t, srv.URL+"/webhooks/test", tt.body, "X-Event-Id", tt.id); again.Header.Get("Idempotent-Replayed") != "true" || again.Body != r.Body {
			t.Fatalf("%s again: %d %q %v; want the first answer replayed", tt.id, again.Status, again.Body, again.Header)
		}
		warns := strings.Count(logs.String(), "level=WARN") - before
		switch {
		case tt.warn == "" && warns != 0:
			t.Errorf("%s: %d WARNs; want none:\n%s", tt.id, warns, logs.String())
		case tt.warn != "" && (warns != 1 || !strings.Contains(logs.String(), tt.warn) || !strings.Contains(logs.String(), "route=/webhooks/test")):
			t.Errorf("%s: %d WARNs; want one naming the route and %q:\n%s", tt.id, warns, tt.warn, logs.String())
		}
		want := 0
		if tt.delivered {
			want = 1
		}
		id := tt.id
		if tt.id == "not-json" {
			id = "" // the backend's counter reads the id from JSON
		}
		if n := backend.snapshot()["/hook "+id]; n != want {
			t.Errorf("%s reached the backend %d times; want %d", tt.id, n, want)
		}
	}
}

// A filtered event gets the success its provider expects: on a proxy
// route the preset's success status and body (Adyen's 200 [accepted],
// iFood's 202), on a queued route and a respond_within one its accept
// answer; the replay is the same answer, and the backend is never called.
func TestFilterAnswersTheProviderSuccess(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /adyen
    upstream: %[1]s/hook
    source: adyen
    provider: adyen
    secrets: [%[2]s]
    filter: '!json'
  - path: /adyen-queued
    upstream: %[1]s/hook
    source: adyen-queued
    provider: adyen
    secrets: [%[2]s]
    deliver: queue
    filter: '!json'
  - path: /ifood
    upstream: %[1]s/hook
    source: ifood
    provider: ifood
    secrets: [ifood-secret]
    filter: '!json'
  - path: /within
    upstream: %[1]s/hook
    source: within
    header: x-event-id
    respond_within: 2s
    filter: '!json'
`, up.Srv.URL, adyenKey)))
	ifood := func() gatewaytest.Response {
		body := `{"id":"evt_1","code":"PLC"}`
		mac := hmac.New(sha256.New, []byte("ifood-secret"))
		mac.Write([]byte(body))
		return gatewaytest.Post(t, url+"/ifood", body, provider.IFoodSignatureHeader, hex.EncodeToString(mac.Sum(nil)))
	}
	for _, tt := range []struct {
		name        string
		send        func() gatewaytest.Response
		status      int
		body, ctype string
	}{
		{"adyen", func() gatewaytest.Response {
			return gatewaytest.Post(t, url+"/adyen", adyenBody(t, "7914073381342284"))
		}, 200, "[accepted]", "text/plain; charset=utf-8"},
		{"adyen, queued", func() gatewaytest.Response {
			return gatewaytest.Post(t, url+"/adyen-queued", adyenBody(t, "7914073381342284"))
		}, 200, "[accepted]", "text/plain; charset=utf-8"},
		{"ifood", ifood, 202, `{"status":"filtered"}` + "\n", "application/json"},
		{"respond_within", func() gatewaytest.Response { return gatewaytest.Post(t, url+"/within", "{}", "X-Event-Id", "w1") }, 202, config.DefaultAcceptBody, "application/json"},
	} {
		for _, replayed := range []string{"", "true"} {
			r := tt.send()
			if r.Status != tt.status || r.Body != tt.body || r.Header.Get("Content-Type") != tt.ctype || r.Header.Get("Idempotent-Replayed") != replayed {
				t.Errorf("%s: %d %q %q replayed=%q; want %d %q %q replayed=%q", tt.name, r.Status, r.Body, r.Header.Get("Content-Type"), r.Header.Get("Idempotent-Replayed"),
					tt.status, tt.body, tt.ctype, replayed)
			}
		}
	}
	if n := up.Calls.Load(); n != 0 {
		t.Errorf("the backend was called %d times; want never", n)
	}
}
