package gateway_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// destination is a backend behind one destination: it records each
// successful delivery by Idempotency-Key, with the event's id, and the
// order of the events of each customer.
type destination struct {
	srv *httptest.Server

	mu     sync.Mutex
	keys   map[string]int      // Idempotency-Key -> successful deliveries
	ids    map[string]int      // the event's id -> successful deliveries
	order  map[string][]string // customer -> event ids, in the order delivered
	calls  int
	handle func(w http.ResponseWriter, r *http.Request) bool // false: the attempt failed, not counted
}

func newDestination(t *testing.T) *destination {
	d := &destination{keys: map[string]int{}, ids: map[string]int{}, order: map[string][]string{}}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *destination) serve(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		ID   string
		Data struct{ Object struct{ Customer string } }
	}
	body := make([]byte, 0, 512)
	buf := make([]byte, 512)
	for {
		n, err := r.Body.Read(buf)
		body = append(body, buf[:n]...)
		if err != nil {
			break
		}
	}
	_ = json.Unmarshal(body, &ev)
	d.mu.Lock()
	d.calls++
	h := d.handle
	d.mu.Unlock()
	if h != nil && !h(w, r) {
		return
	}
	d.mu.Lock()
	d.keys[r.Header.Get(gateway.HeaderIdempotencyKey)]++
	d.ids[ev.ID]++
	if c := ev.Data.Object.Customer; c != "" {
		d.order[c] = append(d.order[c], ev.ID)
	}
	d.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (d *destination) snapshot() (keys, ids map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.keys), maps.Clone(d.ids)
}

func (d *destination) delivered() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.ids {
		n += c
	}
	return n
}

// stripeEvent is a Stripe event of type typ for customer cus.
func stripeEvent(id, typ, cus string) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"customer":%q}}}`, id, typ, cus)
}

// fanoutConfig is issue 35's route: billing gets payment_intent.*, crm
// customer.*, analytics every event but test.* (so that an event no
// destination wants can be sent), with dests' upstreams.
func fanoutConfig(storeLine string, billing, crm, analytics string, billingQueue string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {%s}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/stripe
    source: stripe
    provider: stripe
    secrets: [whsec_fanout]
    deliver: queue
    queue: {backoff_min: 20ms, backoff_max: 200ms}
    destinations:
      - {name: billing, upstream: %q, filter: 'body.type.startsWith("payment_intent.")', queue: {%s}}
      - {name: crm, upstream: %q, filter: 'body.type.startsWith("customer.")'}
      - {name: analytics, upstream: %q, filter: '!body.type.startsWith("test.")'}
`, storeLine, billing+"/stripe", billingQueue, crm+"/hooks", analytics+"/ingest")
}

// A signed Stripe stream of mixed event types, each sent twice, through
// issue 35's route: each event reaches exactly the destinations whose
// filter matches, once each, with Idempotency-Key <store key>#<name>; the
// re-deliveries are replays that reach nobody; an event no destination
// wants is answered the accept answer and reaches nobody, nor does a
// forged one. On SQLite and, when IDEMHOOK_POSTGRES_URL is set, PostgreSQL.
func TestDestinationsMixedStripeStream(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string {
			return fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(t.TempDir(), "idemhook.db"))
		},
	}
	if pg := os.Getenv("IDEMHOOK_POSTGRES_URL"); pg != "" {
		stores["postgres"] = func(t *testing.T) string {
			return fmt.Sprintf("driver: postgres, url: %q, table: fan_%d", pg, time.Now().UnixNano())
		}
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) { testMixedStripeStream(t, store(t)) })
	}
}

func testMixedStripeStream(t *testing.T, storeLine string) {
	billing, crm, analytics := newDestination(t), newDestination(t), newDestination(t)
	url, g, _ := startGateway(t, fanoutConfig(storeLine, billing.srv.URL, crm.srv.URL, analytics.srv.URL, ""))
	types := []string{"payment_intent.succeeded", "customer.created", "invoice.paid", "payment_intent.created", "customer.updated", "test.ping"}
	const events = 60
	want := map[*destination]map[string]int{billing: {}, crm: {}, analytics: {}}
	for pass, replayed := range []string{"", "true"} {
		for i := range events {
			id, typ := fmt.Sprintf("evt_%03d", i), types[i%len(types)]
			r := signedStripe(t, url+"/webhooks/stripe", stripeEvent(id, typ, fmt.Sprint("cus_", i%4)), "whsec_fanout")
			if r.Status != http.StatusAccepted || r.Body != config.DefaultAcceptBody || r.Header.Get("Idempotent-Replayed") != replayed {
				t.Fatalf("pass %d, %s (%s): %d %q replayed=%q; want 202, the accept body, replayed=%q", pass, id, typ, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), replayed)
			}
			if pass > 0 {
				continue
			}
			key := "idem:stripe:" + id
			switch {
			case strings.HasPrefix(typ, "payment_intent."):
				want[billing][key+"#billing"] = 1
			case strings.HasPrefix(typ, "customer."):
				want[crm][key+"#crm"] = 1
			}
			if !strings.HasPrefix(typ, "test.") {
				want[analytics][key+"#analytics"] = 1
			}
		}
	}
	forged := signedStripe(t, url+"/webhooks/stripe", stripeEvent("evt_forged", "payment_intent.succeeded", "cus_0"), "whsec_other")
	if forged.Status != http.StatusUnauthorized {
		t.Fatalf("a forged event: %d %s; want 401", forged.Status, forged.Body)
	}
	total := len(want[billing]) + len(want[crm]) + len(want[analytics])
	testutil.Eventually(t, "every destination's events delivered", func() bool {
		return billing.delivered()+crm.delivered()+analytics.delivered() >= total
	})
	queueDrained(t, g)
	for d, name := range map[*destination]string{billing: "billing", crm: "crm", analytics: "analytics"} {
		keys, _ := d.snapshot()
		if !maps.Equal(keys, want[d]) {
			t.Errorf("%s got %v;\nwant %v", name, keys, want[d])
		}
	}
	if len(want[billing]) != 20 || len(want[crm]) != 20 || len(want[analytics]) != 50 {
		t.Fatalf("the stream's mix: %d, %d, %d", len(want[billing]), len(want[crm]), len(want[analytics]))
	}
}

// closedAddr returns a loopback address nothing listens on: a connection
// to it is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// One destination refuses connections (nothing listens) and another is
// slow while events arrive: the third gets every event of its own at once;
// the down one's queue shows its backend down and holds back nobody else.
// When it comes back it gets each of its events once, each customer's in
// the order they were accepted (its order_by), and so does the slow one.
func TestDestinationDownAnotherSlow(t *testing.T) {
	crm, analytics := newDestination(t), newDestination(t)
	crm.handle = func(w http.ResponseWriter, r *http.Request) bool {
		time.Sleep(30 * time.Millisecond) // slow, but within every timeout
		return true
	}
	down := closedAddr(t)
	dir := t.TempDir()
	cfg := fanoutConfig(fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(dir, "idemhook.db")), "http://"+down, crm.srv.URL, analytics.srv.URL,
		`order_by: "json:data.object.customer", concurrency: 4`)
	cfg = strings.Replace(cfg, "admin: {listen: off}\n", "", 1)
	url, g, _ := startGateway(t, cfg)
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()

	// payment_intent.* (billing's and analytics') and customer.* (crm's
	// and analytics') alternate.
	const events = 40
	var billingIDs []string
	for i := range events {
		id := fmt.Sprintf("evt_%03d", i)
		typ := "payment_intent.succeeded"
		if i%2 == 1 {
			typ = "customer.updated"
		} else {
			billingIDs = append(billingIDs, id)
		}
		if r := signedStripe(t, url+"/webhooks/stripe", stripeEvent(id, typ, fmt.Sprint("cus_", i%3)), "whsec_fanout"); r.Status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", id, r.Status, r.Body)
		}
	}
	// analytics drains while billing is down and crm slow.
	testutil.Eventually(t, "analytics has every event", func() bool { return analytics.delivered() == events })
	lane := func(name string) adminapi.QueueRoute {
		q := gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/queue", ""))
		for _, r := range q.Routes {
			if r.Destination == name {
				return r
			}
		}
		t.Fatalf("no queue of destination %s in %+v", name, q.Routes)
		return adminapi.QueueRoute{}
	}
	testutil.Eventually(t, "billing's backend taken for down", func() bool { return lane("billing").BackendDown })
	if l := lane("billing"); l.Path != "/webhooks/stripe#billing" || l.Route != "/webhooks/stripe" || l.Queued+l.Retrying+l.Running != int64(len(billingIDs)) {
		t.Fatalf("billing's queue while down: %+v; want its %d events pending", l, len(billingIDs))
	}
	// Its backend counted each event before the gateway recorded the
	// answer: the lane empties just after.
	testutil.Eventually(t, "analytics' queue drained while billing is down", func() bool {
		l := lane("analytics")
		return l.Queued+l.Retrying+l.Running+l.Dead == 0
	})

	// billing comes back on its address.
	var ln net.Listener
	testutil.Eventually(t, "billing listening again", func() bool {
		var err error
		ln, err = net.Listen("tcp", down)
		return err == nil
	})
	billing := &destination{keys: map[string]int{}, ids: map[string]int{}, order: map[string][]string{}}
	billing.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(billing.serve)}}
	billing.srv.Start()
	defer billing.srv.Close()
	testutil.Eventually(t, "billing and crm have their events", func() bool {
		return billing.delivered() == len(billingIDs) && crm.delivered() == events-len(billingIDs)
	})
	queueDrained(t, g)
	for name, d := range map[string]*destination{"billing": billing, "crm": crm, "analytics": analytics} {
		keys, ids := d.snapshot()
		for id, n := range ids {
			if n != 1 {
				t.Errorf("%s got %s %d times", name, id, n)
			}
		}
		for k, n := range keys {
			if !strings.HasSuffix(k, "#"+name) || n != 1 {
				t.Errorf("%s got key %q %d times", name, k, n)
			}
		}
	}
	// billing's order_by: each customer's events in the order accepted.
	billing.mu.Lock()
	defer billing.mu.Unlock()
	for cus, got := range billing.order {
		if !slices.IsSorted(got) {
			t.Errorf("billing got %s's events in the order %v", cus, got)
		}
	}
}

// Reloads: events already accepted go to the destinations they were
// accepted for. A destination removed keeps its pending events in the
// store, undelivered, until a configuration names it again; one added gets
// only the events accepted after it; a filter changed applies to new
// events only.
func TestDestinationsAcrossReloads(t *testing.T) {
	billing, crm, analytics := newDestination(t), newDestination(t), newDestination(t)
	billing.handle = func(w http.ResponseWriter, r *http.Request) bool { // fails until set back below
		http.Error(w, "down", http.StatusServiceUnavailable)
		return false
	}
	storeLine := fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(t.TempDir(), "idemhook.db"))
	full := fanoutConfig(storeLine, billing.srv.URL, crm.srv.URL, analytics.srv.URL, "backoff_min: 10ms, backoff_max: 20ms")
	url, g, _ := startGateway(t, full)
	reload := func(text string) {
		t.Helper()
		cfg, err := config.Parse("idemhook.yaml", []byte(text), gatewaytest.EnvOf())
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	send := func(id, typ string) {
		t.Helper()
		if r := signedStripe(t, url+"/webhooks/stripe", stripeEvent(id, typ, "cus_1"), "whsec_fanout"); r.Status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", id, r.Status, r.Body)
		}
	}
	send("evt_a", "payment_intent.succeeded") // billing (failing) and analytics
	testutil.Eventually(t, "analytics has evt_a", func() bool { return analytics.delivered() == 1 })

	// billing removed: evt_a's delivery to it stays in the store.
	without := strings.Replace(full, "      - {name: billing,", "      # - {name: billing,", 1)
	reload(without)
	send("evt_b", "payment_intent.created") // analytics only now
	testutil.Eventually(t, "analytics has evt_b", func() bool { return analytics.delivered() == 2 })

	// billing back, working, with crm's filter widened to every event:
	// evt_a reaches billing (accepted for it), evt_b never does (accepted
	// without it), nor crm (accepted before its filter changed).
	billing.mu.Lock()
	billing.handle = nil
	billing.mu.Unlock()
	reload(strings.Replace(full, `filter: 'body.type.startsWith("customer.")'`, `filter: 'true'`, 1))
	testutil.Eventually(t, "billing has evt_a", func() bool { return billing.delivered() == 1 })
	send("evt_c", "invoice.paid") // crm (widened) and analytics
	testutil.Eventually(t, "crm and analytics have evt_c", func() bool { return crm.delivered() == 1 && analytics.delivered() == 3 })
	queueDrained(t, g)
	for name, c := range map[string]struct {
		d    *destination
		want map[string]int
	}{
		"billing":   {billing, map[string]int{"evt_a": 1}},
		"crm":       {crm, map[string]int{"evt_c": 1}},
		"analytics": {analytics, map[string]int{"evt_a": 1, "evt_b": 1, "evt_c": 1}},
	} {
		if _, ids := c.d.snapshot(); !maps.Equal(ids, c.want) {
			t.Errorf("%s got %v; want %v", name, ids, c.want)
		}
	}
}

// Batched items with destinations and filters: each item is claimed once
// and goes to each destination whose filter matches the item (body is the
// item in its envelope); the route's own filter decides per item first. A
// re-sent batch with one new item delivers only that item.
func TestDestinationsWithItems(t *testing.T) {
	type got struct {
		mu   sync.Mutex
		keys map[string]int
	}
	newBackend := func() (*httptest.Server, *got) {
		g := &got{keys: map[string]int{}}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var items []struct{ ID, Type string }
			if err := json.NewDecoder(r.Body).Decode(&items); err != nil || len(items) != 1 {
				http.Error(w, fmt.Sprintf("want one item in its envelope: %v %v", items, err), http.StatusBadRequest)
				return
			}
			g.mu.Lock()
			g.keys[r.Header.Get(gateway.HeaderIdempotencyKey)]++
			g.mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		return srv, g
	}
	orders, ordersGot := newBackend()
	all, allGot := newBackend()
	url, g, _ := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/batch
    source: batch
    items: {paths: [{path: "[*]", key: id}]}
    filter: 'body[0].type != "skip"'
    deliver: queue
    queue: {backoff_min: 20ms, backoff_max: 100ms}
    destinations:
      - {name: orders, upstream: %q, filter: 'body[0].type == "order"'}
      - {name: all, upstream: %q}
`, filepath.Join(t.TempDir(), "idemhook.db"), orders.URL, all.URL))
	post := func(body string) {
		t.Helper()
		if r := gatewaytest.Post(t, url+"/webhooks/batch", body); r.Status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
	}
	post(`[{"id":"i1","type":"order"},{"id":"i2","type":"refund"},{"id":"i3","type":"skip"}]`)
	post(`[{"id":"i1","type":"order"},{"id":"i2","type":"refund"},{"id":"i3","type":"skip"},{"id":"i4","type":"order"}]`)
	wantOrders := map[string]int{"idem:batch:i1#orders": 1, "idem:batch:i4#orders": 1}
	wantAll := map[string]int{"idem:batch:i1#all": 1, "idem:batch:i2#all": 1, "idem:batch:i4#all": 1}
	snapshot := func(g *got) map[string]int { g.mu.Lock(); defer g.mu.Unlock(); return maps.Clone(g.keys) }
	testutil.Eventually(t, "the items delivered", func() bool {
		return len(snapshot(ordersGot)) == len(wantOrders) && len(snapshot(allGot)) == len(wantAll)
	})
	queueDrained(t, g)
	if got := snapshot(ordersGot); !maps.Equal(got, wantOrders) {
		t.Errorf("orders got %v; want %v", got, wantOrders)
	}
	if got := snapshot(allGot); !maps.Equal(got, wantAll) {
		t.Errorf("all got %v; want %v", got, wantAll)
	}
}

// Operating a route with destinations: the admin API shows a queue per
// destination and pauses, lists and redrives one without the other; the
// metrics carry its name; the audit trail records each destination's end,
// and an event no destination wants as filtered.
func TestDestinationsOperated(t *testing.T) {
	billing, crm, analytics := newDestination(t), newDestination(t), newDestination(t)
	crm.handle = func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "no such customer", http.StatusUnprocessableEntity) // dead at once
		return false
	}
	cfg := fanoutConfig(fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(t.TempDir(), "idemhook.db")), billing.srv.URL, crm.srv.URL, analytics.srv.URL, "")
	cfg = strings.Replace(cfg, "admin: {listen: off}\naudit: {sink: none}\n", "", 1)
	url, g, _ := startGateway(t, cfg)
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	post := func(path, body string) gatewaytest.Response {
		t.Helper()
		return gatewaytest.Post(t, admin.URL+path, body)
	}
	if r := post("/admin/queue/pause", `{"route":"/webhooks/stripe","destination":"billing"}`); r.Status != http.StatusOK {
		t.Fatalf("pause billing: %d %s", r.Status, r.Body)
	}
	for i, typ := range []string{"payment_intent.succeeded", "customer.created", "test.ping"} {
		id := fmt.Sprintf("evt_%d", i)
		if r := signedStripe(t, url+"/webhooks/stripe", stripeEvent(id, typ, "cus_1"), "whsec_fanout"); r.Status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", id, r.Status, r.Body)
		}
	}
	// analytics has evt_0 and evt_1; crm's evt_1 is dead; billing's evt_0
	// waits, paused.
	testutil.Eventually(t, "analytics delivered, crm dead", func() bool {
		q := gatewaytest.DecodeJSON[adminapi.Queue](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/queue", ""))
		by := map[string]adminapi.QueueRoute{}
		for _, r := range q.Routes {
			by[r.Destination] = r
		}
		return analytics.delivered() == 2 && by["crm"].Dead == 1 && by["billing"].Paused && by["billing"].Queued == 1 && len(q.Routes) == 3
	})
	if billing.delivered() != 0 {
		t.Fatalf("billing delivered %d while paused", billing.delivered())
	}
	events := gatewaytest.DecodeJSON[adminapi.QueueEvents](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/queue/events?route=/webhooks/stripe&destination=crm", ""))
	if len(events.Events) != 1 || events.Events[0].Destination != "crm" || events.Events[0].Key != "idem:stripe:evt_1#crm" || events.Events[0].State != "dead" {
		t.Fatalf("crm's events: %+v", events.Events)
	}
	if r := post("/admin/queue/resume", `{"route":"/webhooks/stripe#billing"}`); r.Status != http.StatusOK {
		t.Fatalf("resume billing: %d %s", r.Status, r.Body)
	}
	testutil.Eventually(t, "billing delivered", func() bool { return billing.delivered() == 1 })
	crm.mu.Lock()
	crm.handle = nil
	crm.mu.Unlock()
	if r := post("/admin/queue/redrive", `{"route":"/webhooks/stripe","destination":"crm"}`); r.Status != http.StatusOK || !strings.Contains(strings.Join(strings.Fields(r.Body), ""), `"redriven":1`) {
		t.Fatalf("redrive crm: %d %s", r.Status, r.Body)
	}
	testutil.Eventually(t, "crm delivered", func() bool { return crm.delivered() == 1 })
	if r := post("/admin/queue/pause", `{"route":"/webhooks/stripe","destination":"nobody"}`); r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "/webhooks/stripe#billing") {
		t.Fatalf("pause of an unknown destination: %d %s; want 400 naming the queues", r.Status, r.Body)
	}

	// The backend counts an attempt before the gateway records it.
	for _, series := range []string{
		`idemhook_queue_attempts_total{destination="crm",result="dead",route="/webhooks/stripe",status="422"}`,
		`idemhook_queue_attempts_total{destination="crm",result="delivered",route="/webhooks/stripe",status="200"}`,
	} {
		testutil.Eventually(t, series+" counted once", func() bool { return metricValue(t, admin.URL, series) == 1 })
	}
	if v := metricValue(t, admin.URL, `idemhook_queue_events{destination="billing",route="/webhooks/stripe",state="dead"}`); v != 0 {
		t.Errorf("billing's dead events gauge = %v; want the series, 0", v)
	}

	var got []adminapi.Delivery
	testutil.Eventually(t, "the ends in the trail", func() bool {
		got = gatewaytest.DecodeJSON[adminapi.Deliveries](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/deliveries", "")).Deliveries
		return len(got) == 3+5 // three provider deliveries; billing, analytics x2, crm dead, crm delivered
	})
	count := map[string]int{}
	for _, d := range got {
		switch {
		case d.Outcome == "filtered":
			if d.Key != "evt_2" || !strings.Contains(d.Reason, "no destination") {
				t.Errorf("filtered entry %+v", d)
			}
			count["filtered"]++
		case strings.HasPrefix(d.Outcome, "queue_"):
			dest, _, _ := strings.Cut(strings.TrimPrefix(d.Reason, "destination "), ",")
			count[d.Outcome+" "+dest+" "+d.Key]++
			if d.Route != "/webhooks/stripe" {
				t.Errorf("entry %+v; want the route's path", d)
			}
		}
	}
	want := map[string]int{"filtered": 1, "queue_delivered billing evt_0": 1, "queue_delivered analytics evt_0": 1,
		"queue_delivered analytics evt_1": 1, "queue_dead crm evt_1": 1, "queue_delivered crm evt_1": 1}
	if !maps.Equal(count, want) {
		t.Errorf("trail %v;\nwant %v", count, want)
	}
}

// An event that one destination's full queue can't take is refused as a
// whole (503, Retry-After), so that no destination's delivery is lost: the
// others don't get it either, and its key is released, so the provider's
// re-send, once there is room, is accepted for every destination. A
// destination whose filter fails at run time gets the event.
func TestDestinationFullRefusesTheWholeEvent(t *testing.T) {
	billing, crm, analytics := newDestination(t), newDestination(t), newDestination(t)
	cfg := fanoutConfig(fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(t.TempDir(), "idemhook.db")), billing.srv.URL, crm.srv.URL, analytics.srv.URL, "max_queued: 1")
	// crm's filter fails on an event without data.object.email: it gets it.
	cfg = strings.Replace(cfg, `filter: 'body.type.startsWith("customer.")'`, `filter: 'body.data.object.email.endsWith("@example.com")'`, 1)
	cfg = strings.Replace(cfg, "admin: {listen: off}\n", "", 1)
	url, g, _ := startGateway(t, cfg)
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	if r := gatewaytest.Post(t, admin.URL+"/admin/queue/pause", `{"route":"/webhooks/stripe","destination":"billing"}`); r.Status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	send := func(id string) gatewaytest.Response {
		return signedStripe(t, url+"/webhooks/stripe", stripeEvent(id, "payment_intent.succeeded", "cus_1"), "whsec_fanout")
	}
	if r := send("evt_1"); r.Status != http.StatusAccepted {
		t.Fatalf("evt_1: %d %s", r.Status, r.Body)
	}
	testutil.Eventually(t, "evt_1 at analytics and crm", func() bool { return analytics.delivered() == 1 && crm.delivered() == 1 })
	r := send("evt_2") // billing holds evt_1, paused: full
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || !strings.Contains(r.Body, "destination billing's queue") {
		t.Fatalf("evt_2 with billing's queue full: %d %v %s; want 503 naming billing", r.Status, r.Header, r.Body)
	}
	if r := gatewaytest.Post(t, admin.URL+"/admin/queue/resume", `{"route":"/webhooks/stripe","destination":"billing"}`); r.Status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.Status, r.Body)
	}
	testutil.Eventually(t, "evt_1 at billing", func() bool { return billing.delivered() == 1 })
	testutil.Eventually(t, "evt_2 accepted once there is room", func() bool {
		r := send("evt_2")
		return r.Status == http.StatusAccepted && r.Header.Get("Idempotent-Replayed") == ""
	})
	queueDrained(t, g)
	for name, d := range map[string]*destination{"billing": billing, "crm": crm, "analytics": analytics} {
		if _, ids := d.snapshot(); !maps.Equal(ids, map[string]int{"evt_1": 1, "evt_2": 1}) {
			t.Errorf("%s got %v; want evt_1 and evt_2 once each", name, ids)
		}
	}
}

// A destination's own attempt_timeout holds, above its route's: a backend
// that answers after the route's timeout but within the destination's is
// delivered on its first attempt, while another destination keeps the
// route's timeout.
func TestDestinationOwnAttemptTimeout(t *testing.T) {
	var mu sync.Mutex
	attempts := map[string][]string{} // destination -> Idempotent-Attempt values
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts[r.URL.Path] = append(attempts[r.URL.Path], r.Header.Get(gateway.HeaderAttempt))
		mu.Unlock()
		time.Sleep(600 * time.Millisecond) // past the route's 200ms, within patient's 10s
	}))
	defer slow.Close()
	url, g, _ := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/x
    source: x
    header: x-event-id
    deliver: queue
    queue: {attempt_timeout: 200ms, backoff_min: 10ms, backoff_max: 20ms, max_attempts: 2}
    destinations:
      - {name: patient, upstream: %q, queue: {attempt_timeout: 10s}}
      - {name: hasty, upstream: %q}
`, filepath.Join(t.TempDir(), "idemhook.db"), slow.URL+"/patient", slow.URL+"/hasty"))
	if r := gatewaytest.Post(t, url+"/webhooks/x", "{}", "X-Event-Id", "e1"); r.Status != http.StatusAccepted {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	queueDrained(t, g) // patient delivered, hasty dead after its 2 attempts
	mu.Lock()
	defer mu.Unlock()
	if got := attempts["/patient"]; !slices.Equal(got, []string{"1"}) {
		t.Errorf("patient's attempts %v; want one, delivered within its own timeout", got)
	}
	if got := attempts["/hasty"]; !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("hasty's attempts %v; want 2, each cut at the route's 200ms", got)
	}
}
