package console

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/tests/internal/testgw"
	"github.com/jackc/pgx/v5"
)

// queueConsoleConfig is a gateway with one queued route, retrying fast.
func queueConsoleConfig(dir, upstreamURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0, token: "${TOKEN}"}
log: {level: warn}
routes:
  - path: /webhooks/orders
    upstream: %s/orders
    source: shop
    header: X-Event-Id
    deliver: queue
    queue: {backoff_min: 20ms, backoff_max: 50ms}
`, filepath.Join(dir, "idemhook.db"), upstreamURL)
}

// TestConsoleQueueInBrowser drives the console's Queue section in headless
// chromium against a queued gateway: events the backend refuses (400) show
// as dead, one opens with its attempt, its Redrive button delivers it
// once, and the Pause and Resume buttons stop and restart delivery, the
// shown state following.
func TestConsoleQueueInBrowser(t *testing.T) {
	b := newBrowser(t)
	up := gatewaytest.NewUpstream(t)
	var refuse atomic.Bool
	refuse.Store(true)
	var mu sync.Mutex
	delivered := map[string]int{} // 200s per Idempotency-Key
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if refuse.Load() {
			http.Error(w, "unknown customer", http.StatusBadRequest)
			return
		}
		mu.Lock()
		delivered[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
	count := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return delivered["idem:shop:"+id]
	}
	dir := t.TempDir()
	g := testgw.Start(t, gatewaytest.WriteConfig(t, dir, queueConsoleConfig(dir, up.Srv.URL)), gatewaytest.EnvOf("TOKEN", "s3cret"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.Log)
		}
	})
	post := func(id string) {
		t.Helper()
		if r := gatewaytest.Post(t, g.URL("/webhooks/orders"), `{"order":"`+id+`"}`, "X-Event-Id", id); r.Status != http.StatusAccepted {
			t.Fatalf("event %s: %d %s; want 202", id, r.Status, r.Body)
		}
	}
	post("o1")
	post("o2")
	var dead []adminapi.QueueEvent
	testutil.Eventually(t, "two dead events", func() bool {
		dead = gatewaytest.DecodeJSON[adminapi.QueueEvents](t, adminDo(t, g, "GET", "/admin/queue/events?state=dead")).Events
		return len(dead) == 2
	})

	b.do("open the console", chromedp.Navigate(g.AdminURL("/admin/")), chromedp.WaitVisible(chromedp.ID("login")))
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), "s3cret"), chromedp.Click(chromedp.ID("signin")))
	route := `document.querySelector('.queue-route[data-route="/webhooks/orders"]')`
	deadRows := route + `.querySelectorAll('.queue-dead tbody tr')`
	b.waitJS("the Queue section with two dead events", `!document.getElementById('queue').hidden && `+deadRows+`.length === 2`)
	if got := eval[string](b, route+`.querySelector('.q-dead').textContent`); got != "2" {
		t.Errorf("dead count shown %q; want 2", got)
	}
	if got := eval[string](b, route+`.querySelector('.queue-state').textContent`); got != "delivering" {
		t.Errorf("state shown %q; want delivering", got)
	}
	if n := eval[int](b, route+`.querySelectorAll('svg.queue-chart polyline').length`); n != 4 {
		t.Errorf("%d lines in the chart; want 4 (accepted, delivered, retried, dead)", n)
	}
	// The chart spans the data (a gateway started moments ago: a minute or
	// two), not the 360 minutes the history can hold.
	if n := eval[int](b, route+`.querySelector('svg.queue-chart polyline').getAttribute('points').trim().split(' ').length`); n < 1 || n > 15 {
		t.Errorf("%d minutes in the chart; want the data's span, not 360", n)
	}
	zone := eval[string](b, `Intl.DateTimeFormat().resolvedOptions().timeZone`)
	if th := eval[string](b, route+`.querySelector('.queue-dead th.received').textContent`); th != "Received ("+zone+")" {
		t.Errorf("dead events' time column %q; want it to name the time zone, Received (%s)", th, zone)
	}
	if title := eval[string](b, route+`.querySelector('svg.queue-chart > title').textContent`); !strings.Contains(title, "accepted 2") || !strings.Contains(title, "dead 2") {
		t.Errorf("chart title %q; want accepted 2 and dead 2", title)
	}
	row := func(id int64) string {
		return fmt.Sprintf(`%s.querySelector('.queue-dead tr[data-id="%d"]')`, route, id)
	}
	if key := eval[string](b, row(dead[0].ID)+`.querySelector('td.key').textContent`); key != "idem:shop:o1" {
		t.Errorf("first dead row's key %q; want idem:shop:o1", key)
	}

	// The event's detail: its one attempt, the backend's 400 and answer.
	sel := func(id int64, css string) string { return fmt.Sprintf(`.queue-dead tr[data-id="%d"] %s`, id, css) }
	b.do("open a dead event", chromedp.Click(chromedp.CSS(sel(dead[0].ID, ".event-open"))))
	b.waitJS("its attempts", `document.getElementById('event-dialog').open && document.querySelectorAll('#attempts tbody tr').length === 1`)
	if got := eval[[]string](b, `[...document.querySelectorAll('#attempts tbody td')].map(td => td.textContent)`); len(got) < 5 || got[0] != "1" || got[2] != "400" || !strings.Contains(got[4], "unknown customer") {
		t.Errorf("attempt row %q; want attempt 1, status 400, the backend's answer", got)
	}
	if got := eval[string](b, `document.getElementById('event-state').textContent`); got != "dead" {
		t.Errorf("event state %q; want dead", got)
	}
	b.shot("console-queue-event")
	b.do("close the event", chromedp.Click(chromedp.ID("event-close")))

	// Redrive one: it is delivered once and leaves the dead table.
	refuse.Store(false)
	b.do("redrive o1", chromedp.Click(chromedp.CSS(sel(dead[0].ID, ".event-redrive"))))
	testutil.Eventually(t, "o1 delivered", func() bool { return count("o1") == 1 })
	b.waitJS("o1 out of the dead table", deadRows+`.length === 1 && !`+row(dead[0].ID))
	if count("o2") != 0 {
		t.Errorf("o2 delivered %d times; only o1 was redriven", count("o2"))
	}

	// Pause: accepted, shown queued, not delivered; Resume delivers it.
	b.do("pause", chromedp.Click(chromedp.CSS(`.queue-route[data-route="/webhooks/orders"] .queue-pause`)))
	b.waitJS("the route shown paused", route+`.querySelector('.queue-state').textContent === 'paused' && `+route+`.querySelector('.queue-pause').textContent === 'Resume'`)
	post("o3")
	b.waitJS("o3 shown queued", route+`.querySelector('.q-queued').textContent === '1'`)
	time.Sleep(700 * time.Millisecond) // a delivery would come now
	if n := count("o3"); n != 0 {
		t.Fatalf("o3 delivered %d times while paused", n)
	}
	b.shotOf("console-queue", "queue")
	b.do("resume", chromedp.Click(chromedp.CSS(`.queue-route[data-route="/webhooks/orders"] .queue-pause`)))
	b.waitJS("the route shown delivering", route+`.querySelector('.queue-state').textContent === 'delivering' && `+route+`.querySelector('.queue-pause').textContent === 'Pause'`)
	testutil.Eventually(t, "o3 delivered after the resume", func() bool { return count("o3") == 1 })
	b.waitJS("o3 no longer shown queued", route+`.querySelector('.q-queued').textContent === '0'`)

	// Redrive all dead: o2 too.
	b.do("redrive all dead", chromedp.Click(chromedp.CSS(`.queue-route[data-route="/webhooks/orders"] .queue-redrive-all`)))
	testutil.Eventually(t, "o2 delivered", func() bool { return count("o2") == 1 })
	b.waitJS("no dead events shown", deadRows+`.length === 0 && `+route+`.querySelector('.q-dead').textContent === '0'`)
	time.Sleep(300 * time.Millisecond) // a second delivery would come now
	for _, id := range []string{"o1", "o2", "o3"} {
		if n := count(id); n != 1 {
			t.Errorf("%s delivered %d times; want once", id, n)
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	origin := g.AdminURL("/admin/")
	for _, u := range b.requests {
		if !strings.HasPrefix(u, origin) && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page requested %s, outside %s", u, origin)
		}
	}
	for _, p := range b.problems {
		t.Errorf("page problem: %s", p)
	}
}

// TestConsoleQueueSettlesPending drives the console against a queued route
// on PostgreSQL whose store refuses to record the outcome of delivered
// attempts (a trigger refuses the event's delete): the route shows a badge
// counting the outcomes not recorded, as GET /admin/queue's settles_pending
// does, and the badge goes once the store takes them. Each event reaches
// the backend once.
func TestConsoleQueueSettlesPending(t *testing.T) {
	pgURL := os.Getenv("IDEMHOOK_POSTGRES_URL")
	if pgURL == "" {
		t.Skip("IDEMHOOK_POSTGRES_URL not set")
	}
	b := newBrowser(t)
	up := gatewaytest.NewUpstream(t)
	var mu sync.Mutex
	delivered := map[string]int{}
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		mu.Lock()
		delivered[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
	table := fmt.Sprintf("console_settle_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(t.Context(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		conn.Exec(ctx, `DROP TABLE IF EXISTS `+table+`_queue_attempts, `+table+`_queue, `+table+`_queue_routes, `+table)
		conn.Exec(ctx, `DROP FUNCTION IF EXISTS `+table+`_refuse`)
		conn.Close(ctx)
	})
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: postgres, url: %q, table: %s}
admin: {listen: 127.0.0.1:0, token: "${TOKEN}"}
log: {level: error}
routes:
  - path: /webhooks/orders
    upstream: %s/orders
    source: shop
    header: X-Event-Id
    deliver: queue
    queue: {backoff_min: 20ms, backoff_max: 50ms}
`, pgURL, table, up.Srv.URL)
	g := testgw.Start(t, gatewaytest.WriteConfig(t, dir, cfg), gatewaytest.EnvOf("TOKEN", "s3cret"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.Log)
		}
	})
	// The gateway has made its tables; refuse the delete that records a
	// delivered event.
	for _, stmt := range []string{
		`CREATE FUNCTION ` + table + `_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
		`CREATE TRIGGER refuse BEFORE DELETE ON ` + table + `_queue FOR EACH ROW EXECUTE FUNCTION ` + table + `_refuse()`,
	} {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}

	b.do("open the console", chromedp.Navigate(g.AdminURL("/admin/")), chromedp.WaitVisible(chromedp.ID("login")))
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), "s3cret"), chromedp.Click(chromedp.ID("signin")))
	route := `document.querySelector('.queue-route[data-route="/webhooks/orders"]')`
	b.waitJS("the Queue section", `!document.getElementById('queue').hidden && `+route+` !== null`)
	if hidden := eval[bool](b, route+`.querySelector('.queue-settles').hidden`); !hidden {
		t.Errorf("the outcomes badge is shown with no settle pending")
	}
	for _, id := range []string{"o1", "o2"} {
		if r := gatewaytest.Post(t, g.URL("/webhooks/orders"), `{"order":"`+id+`"}`, "X-Event-Id", id); r.Status != http.StatusAccepted {
			t.Fatalf("event %s: %d %s; want 202", id, r.Status, r.Body)
		}
	}
	badge := route + `.querySelector('.queue-settles')`
	b.waitJS("the badge counting two outcomes not recorded", `!`+badge+`.hidden && `+badge+`.textContent === '2 outcomes not recorded'`)
	if n := gatewaytest.DecodeJSON[adminapi.Queue](t, adminDo(t, g, "GET", "/admin/queue")).Routes[0].SettlesPending; n != 2 {
		t.Errorf("GET /admin/queue settles_pending = %d; want the 2 the console shows", n)
	}
	b.shotOf("console-queue-settles", "queue")

	if _, err := conn.Exec(t.Context(), `DROP TRIGGER refuse ON `+table+`_queue`); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the badge gone once the store took the outcomes", badge+`.hidden`)
	testutil.Eventually(t, "nothing pending nor running", func() bool {
		r := gatewaytest.DecodeJSON[adminapi.Queue](t, adminDo(t, g, "GET", "/admin/queue")).Routes[0]
		return r.SettlesPending == 0 && r.Running == 0 && r.Queued == 0 && r.Retrying == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"o1", "o2"} {
		if n := delivered["idem:shop:"+id]; n != 1 {
			t.Errorf("%s delivered %d times; want once", id, n)
		}
	}
	for _, p := range b.problems {
		t.Errorf("page problem: %s", p)
	}
}

// TestConsoleDestinationsInBrowser drives the console against a route with
// two destinations: each has a card of its own, named by the route and the
// destination; the refusing destination's card shows its dead event with
// its destination's key, and its Redrive delivers it there once, without a
// second delivery to the other destination; Pause on one card pauses that
// destination only.
func TestConsoleDestinationsInBrowser(t *testing.T) {
	b := newBrowser(t)
	type dest struct {
		up        *gatewaytest.Upstream
		refuse    atomic.Bool
		mu        sync.Mutex
		delivered map[string]int // 200s per Idempotency-Key
	}
	newDest := func() *dest {
		d := &dest{up: gatewaytest.NewUpstream(t), delivered: map[string]int{}}
		d.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
			if d.refuse.Load() {
				http.Error(w, "unknown customer", http.StatusBadRequest)
				return
			}
			d.mu.Lock()
			d.delivered[r.Header.Get("Idempotency-Key")]++
			d.mu.Unlock()
			w.WriteHeader(http.StatusOK)
		}
		return d
	}
	count := func(d *dest, key string) int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.delivered[key]
	}
	crm, erp := newDest(), newDest()
	erp.refuse.Store(true)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0, token: "${TOKEN}"}
log: {level: warn}
routes:
  - path: /webhooks/orders
    source: shop
    header: X-Event-Id
    deliver: queue
    queue: {backoff_min: 20ms, backoff_max: 50ms}
    destinations:
      - {name: crm, upstream: %s/crm}
      - {name: erp, upstream: %s/erp}
`, filepath.Join(dir, "idemhook.db"), crm.up.Srv.URL, erp.up.Srv.URL)
	g := testgw.Start(t, gatewaytest.WriteConfig(t, dir, cfg), gatewaytest.EnvOf("TOKEN", "s3cret"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.Log)
		}
	})
	post := func(id string) {
		t.Helper()
		if r := gatewaytest.Post(t, g.URL("/webhooks/orders"), `{"order":"`+id+`"}`, "X-Event-Id", id); r.Status != http.StatusAccepted {
			t.Fatalf("event %s: %d %s; want 202", id, r.Status, r.Body)
		}
	}
	post("o1")
	testutil.Eventually(t, "o1 at crm", func() bool { return count(crm, "idem:shop:o1#crm") == 1 })

	b.do("open the console", chromedp.Navigate(g.AdminURL("/admin/")), chromedp.WaitVisible(chromedp.ID("login")))
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), "s3cret"), chromedp.Click(chromedp.ID("signin")))
	card := func(dest string) string {
		return `document.querySelector('.queue-route[data-route="/webhooks/orders#` + dest + `"]')`
	}
	b.waitJS("a card per destination, erp's event dead", card("crm")+` && `+card("erp")+` && `+card("erp")+`.querySelectorAll('.queue-dead tbody tr').length === 1`)
	if got := eval[string](b, card("erp")+`.querySelector('h3').textContent`); got != "/webhooks/orders \u2192 erp" {
		t.Errorf("erp's card heading %q; want the route and the destination", got)
	}
	if got := eval[string](b, card("crm")+`.querySelector('.q-dead').textContent`); got != "0" {
		t.Errorf("crm's dead count %q; want 0", got)
	}
	if key := eval[string](b, card("erp")+`.querySelector('.queue-dead tbody tr td.key').textContent`); key != "idem:shop:o1#erp" {
		t.Errorf("erp's dead event's key %q; want idem:shop:o1#erp", key)
	}
	b.shotOf("console-queue-destinations", "queue")

	// Redrive on erp's card: o1 reaches erp once, crm not again.
	erp.refuse.Store(false)
	b.do("redrive erp's dead", chromedp.Click(chromedp.CSS(`.queue-route[data-route="/webhooks/orders#erp"] .queue-redrive-all`)))
	testutil.Eventually(t, "o1 at erp", func() bool { return count(erp, "idem:shop:o1#erp") == 1 })
	b.waitJS("erp's dead table empty", card("erp")+`.querySelectorAll('.queue-dead tbody tr').length === 0`)

	// Pause crm's card: o2 reaches erp, waits queued for crm.
	b.do("pause crm", chromedp.Click(chromedp.CSS(`.queue-route[data-route="/webhooks/orders#crm"] .queue-pause`)))
	b.waitJS("crm shown paused, erp delivering", card("crm")+`.querySelector('.queue-state').textContent === 'paused' && `+card("erp")+`.querySelector('.queue-state').textContent === 'delivering'`)
	post("o2")
	testutil.Eventually(t, "o2 at erp", func() bool { return count(erp, "idem:shop:o2#erp") == 1 })
	b.waitJS("o2 shown queued for crm", card("crm")+`.querySelector('.q-queued').textContent === '1'`)
	if n := count(crm, "idem:shop:o2#crm"); n != 0 {
		t.Fatalf("o2 delivered to crm %d times while it was paused", n)
	}
	b.do("resume crm", chromedp.Click(chromedp.CSS(`.queue-route[data-route="/webhooks/orders#crm"] .queue-pause`)))
	testutil.Eventually(t, "o2 at crm", func() bool { return count(crm, "idem:shop:o2#crm") == 1 })
	b.waitJS("crm's queue empty", card("crm")+`.querySelector('.q-queued').textContent === '0' && `+card("crm")+`.querySelector('.q-running').textContent === '0'`)
	for d, keys := range map[*dest][]string{crm: {"idem:shop:o1#crm", "idem:shop:o2#crm"}, erp: {"idem:shop:o1#erp", "idem:shop:o2#erp"}} {
		d.mu.Lock()
		if len(d.delivered) != len(keys) {
			t.Errorf("delivered %v; want %v once each", d.delivered, keys)
		}
		for _, k := range keys {
			if d.delivered[k] != 1 {
				t.Errorf("%s delivered %d times; want once", k, d.delivered[k])
			}
		}
		d.mu.Unlock()
	}
	for _, p := range b.problems {
		t.Errorf("page problem: %s", p)
	}
}
