package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/tests/internal/testgw"
)

// chromium returns the path of the browser the console test drives:
// $IDEMHOOK_CHROMIUM, else chromium (Debian's package) on $PATH. Without
// one the test skips, unless CI is set: .ci/run installs chromium, so
// there a missing browser is a failure, not a skip.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("IDEMHOOK_CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set but chromium is not installed (.ci/run installs it: apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium, or set IDEMHOOK_CHROMIUM): skipping the console's browser test")
	return ""
}

// screenshotDirs returns where the browser test writes its screenshots: a
// temporary folder, and also $IDEMHOOK_SCREENSHOTS when set. That path is
// relative to the repository root, so IDEMHOOK_SCREENSHOTS=docs/img writes
// the README's images.
func screenshotDirs(t *testing.T) []string {
	dirs := []string{t.TempDir()}
	if d := os.Getenv("IDEMHOOK_SCREENSHOTS"); d != "" {
		if !filepath.IsAbs(d) {
			d = filepath.Join("..", "..", d) // the test runs in tests/console
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	return dirs
}

// browser is one headless chromium tab, with what the page did.
type browser struct {
	t        *testing.T
	ctx      context.Context
	shots    []string
	mu       sync.Mutex
	requests []string // every URL the page requested
	problems []string // exceptions and console errors
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()), // a new profile
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.WindowSize(1280, 900),
		chromedp.Env("TZ=UTC"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTime()
		cancelTab()
		cancelAlloc() // stops chromium before its profile folder goes
	})
	b := &browser{t: t, ctx: ctx, shots: screenshotDirs(t)}
	if err := chromedp.Listen(ctx, b.observe); err != nil {
		t.Fatalf("starting chromium (%s): %v", path, err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("chromium (%s): %v", path, err)
	}
	return b
}

// observe records the page's requests, exceptions and console errors. It
// runs in chromedp's event loop: it must only record.
func (b *browser) observe(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, ev.Request.URL)
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		desc := ""
		if d.Exception != nil {
			desc = d.Exception.Description
		}
		b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s %s", d.URL, d.LineNumber+1, d.Text, desc))
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError {
			b.problems = append(b.problems, "console.error")
		}
	case *log.EventEntryAdded:
		// The page's first call is answered 401 until the token is
		// entered, a key that holds nothing 404, /admin/queue 404 on a
		// gateway without a queued route (the Queue section stays
		// hidden), and a purge 409 until confirmed with its count: the
		// browser logs those responses, and only those are expected.
		fromNet := ev.Entry.Source == log.EntrySourceNetwork
		status := func(code, path string) bool {
			return strings.Contains(ev.Entry.Text, "status of "+code) && strings.Contains(ev.Entry.URL, path)
		}
		expected := fromNet && (strings.Contains(ev.Entry.Text, "status of 401") ||
			status("404", "/admin/keys/") || strings.HasSuffix(ev.Entry.URL, "/admin/queue") && status("404", "/admin/queue") ||
			status("409", "/admin/queue/purge"))
		if ev.Entry.Level == log.EntryLevelError && !expected {
			b.problems = append(b.problems, fmt.Sprintf("%s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression and decodes its value into T.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitJS waits until the JavaScript predicate expr is true.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// shot writes a PNG of the viewport as name.png in every screenshot folder.
func (b *browser) shot(name string) {
	b.t.Helper()
	b.write(name, chromedp.CaptureScreenshot())
}

// shotOf writes a PNG of the element with the given id.
func (b *browser) shotOf(name, id string) {
	b.t.Helper()
	b.write(name, chromedp.Screenshot(chromedp.ID(id)))
}

func (b *browser) write(name string, capture chromedp.Action[[]byte]) {
	b.t.Helper()
	// Let the layout settle.
	b.do("settle", chromedp.Sleep(300*time.Millisecond))
	buf, err := chromedp.Run(b.ctx, capture)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	for _, d := range b.shots {
		if err := os.WriteFile(filepath.Join(d, name+".png"), buf, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
}

// js quotes s as a JavaScript string.
func js(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// consoleConfig is the browser test's gateway: four sources on SQLite, the
// admin API behind a token. shopify lets a duplicate of a running delivery
// proceed; tenant is a prefix route (its keys scoped by the path) behind the
// Stripe preset, with the secret in $TENANT_SECRET.
func consoleConfig(dir, upstreamURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0, token: "${TOKEN}"}
log: {level: warn}
routes:
  - path: /webhooks/stripe
    upstream: %[2]s/stripe
    source: stripe
  - path: /webhooks/github
    upstream: %[2]s/github
    source: github
    header: X-GitHub-Delivery
  - path: /webhooks/shop
    upstream: %[2]s/shop
    source: shopify
    header: X-Shopify-Webhook-Id
    in_flight: proceed
  - path: /t/
    upstream: %[2]s/tenant
    source: tenant
    provider: stripe
    secret_env: TENANT_SECRET
`, filepath.Join(dir, "idemhook.db"), upstreamURL)
}

// adminDo calls the admin API with the token.
func adminDo(t *testing.T, g *testgw.Gateway, method, path string) gatewaytest.Response {
	t.Helper()
	return gatewaytest.Do(t, method, g.AdminURL(path), "", "Authorization", "Bearer s3cret")
}

// TestConsoleInBrowser drives the console in headless chromium against a
// real gateway. It signs in with the token and reads the per-source table,
// whose columns add up to the total (failures and unprotected deliveries
// included). It filters by source, outcome, route and time, pages, and sees
// a new delivery appear without a reload. The filters are the page's
// address: a reload, a link and Back and Forward give the same view. Rows
// show their reason, scope and instance. It opens a key, deletes it
// through the confirmation, and checks that the next delivery of that
// event reaches the upstream again. A prefix route's key looked up without
// its scope offers the scopes that hold it, and a long key wraps inside the
// dialog. Along the way it checks that keys are shown as text (a key
// holding HTML stays text), that the page requests nothing from another
// origin, and that nothing throws.
func TestConsoleInBrowser(t *testing.T) {
	b := newBrowser(t)
	up := gatewaytest.NewUpstream(t)
	arrived, hold := make(chan struct{}, 1), make(chan struct{})
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Hold") != "" { // runs until the test lets it go
			arrived <- struct{}{}
			<-hold
		}
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":"backend busy"}`)
			return
		}
		fmt.Fprintf(w, `{"ok":true,"call":%d}`, n)
	}
	dir := t.TempDir()
	const tenantSecret = "whsec_console_test"
	g := testgw.Start(t, gatewaytest.WriteConfig(t, dir, consoleConfig(dir, up.Srv.URL)),
		gatewaytest.EnvOf("TOKEN", "s3cret", "TENANT_SECRET", tenantSecret))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.Log)
		}
	})
	// callsWith counts the upstream's calls that carried body.
	callsWith := func(body string) int {
		n := 0
		for _, r := range up.Received() {
			if string(r.Body) == body {
				n++
			}
		}
		return n
	}

	stripeEvent := func(i int) string {
		return fmt.Sprintf(`{"id":"evt_3Q%04dXk","type":"payment_intent.succeeded","data":{"object":{"amount":%d}}}`, i, 1000+i*250)
	}
	const xssKey = `<img src=x onerror="window.__xss=1">`
	guid := func(i int) string { return fmt.Sprintf("6f1c2a%02d-8e4b-11ef-9b1a-3c7d5e%06d", i, i) }
	for i := 1; i <= 12; i++ {
		gatewaytest.Post(t, g.URL("/webhooks/stripe"), stripeEvent(i))
	}
	for _, i := range []int{1, 2, 3} { // provider retries: replayed
		if r := gatewaytest.Post(t, g.URL("/webhooks/stripe"), stripeEvent(i)); r.Header.Get(idemhook.ReplayedHeader) == "" {
			t.Fatalf("stripe retry %d not replayed: %d %s", i, r.Status, r.Body)
		}
	}
	for i := 1; i <= 4; i++ {
		gatewaytest.Post(t, g.URL("/webhooks/github"), fmt.Sprintf(`{"action":"opened","number":%d}`, i), "X-GitHub-Delivery", guid(i))
	}
	gatewaytest.Post(t, g.URL("/webhooks/github"), `{"action":"opened","number":1}`, "X-GitHub-Delivery", guid(1)) // replayed
	gatewaytest.Post(t, g.URL("/webhooks/github"), `{"action":"opened","number":2}`, "X-GitHub-Delivery", guid(2)) // replayed
	if r := gatewaytest.Post(t, g.URL("/webhooks/github"), `{"action":"closed"}`, "X-GitHub-Delivery", guid(3)); r.Status != 422 {
		t.Fatalf("a reused key with another body = %d, want 422 (mismatch)", r.Status)
	}
	if r := gatewaytest.Post(t, g.URL("/webhooks/github"), `{"action":"edited"}`, "X-GitHub-Delivery", guid(9), "X-Fail", "1"); r.Status != 503 {
		t.Fatalf("a failing upstream = %d, want 503 (failed_released)", r.Status)
	}
	gatewaytest.Post(t, g.URL("/webhooks/shop"), `{"id":820982911946154500}`, "X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
	gatewaytest.Post(t, g.URL("/webhooks/shop"), `{"id":820982911946154501}`, "X-Shopify-Webhook-Id", "0cb8b3b2-34a4-4d02-a1e5-6a6bd25e3b7a")
	// A duplicate of a running delivery proceeds (in_flight: proceed): it
	// runs unprotected.
	const shopKey, shopBody = "9a1b4c44-1f0e-4f1c-9a52-5d2f0b8c7e11", `{"id":820982911946154502}`
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", g.URL("/webhooks/shop"), strings.NewReader(shopBody))
		req.Header.Set("X-Shopify-Webhook-Id", shopKey)
		req.Header.Set("X-Hold", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-arrived
	if r := gatewaytest.Post(t, g.URL("/webhooks/shop"), shopBody, "X-Shopify-Webhook-Id", shopKey); r.Status != 200 || r.Header.Get(idemhook.ReplayedHeader) != "" {
		t.Fatalf("a duplicate of a running delivery = %d replayed=%q, want 200 forwarded (in_flight_proceeded)", r.Status, r.Header.Get(idemhook.ReplayedHeader))
	}
	close(hold)
	if status := <-first; status != 200 {
		t.Fatalf("the held delivery = %d, want 200", status)
	}
	// One signed event to two tenants of a prefix route: two keys, one per
	// scope. An unsigned delivery is refused before any key is resolved.
	tenantEvent := `{"id":"evt_tenant_1","type":"invoice.paid"}`
	mac := hmac.New(sha256.New, []byte(tenantSecret))
	ts := time.Now().Unix()
	fmt.Fprintf(mac, "%d.%s", ts, tenantEvent)
	signature := fmt.Sprintf("t=%d,v1=%s", ts, hex.EncodeToString(mac.Sum(nil)))
	for _, p := range []string{"/t/acme/orders", "/t/globex/orders"} {
		if r := gatewaytest.Post(t, g.URL(p), tenantEvent, "Stripe-Signature", signature); r.Status != 200 {
			t.Fatalf("POST %s = %d %s", p, r.Status, r.Body)
		}
	}
	if r := gatewaytest.Post(t, g.URL("/t/acme/orders"), tenantEvent); r.Status != 401 {
		t.Fatalf("an unsigned delivery = %d, want 401 (signature_invalid)", r.Status)
	}
	const total = 15 + 8 + 4 + 3
	var trail []adminapi.Delivery
	testutil.Eventually(t, "the audit trail to hold every delivery", func() bool {
		r := adminDo(t, g, "GET", "/admin/deliveries?limit=1000")
		trail = gatewaytest.DecodeJSON[adminapi.Deliveries](t, r).Deliveries
		return r.Status == 200 && len(trail) == total
	})
	trailOf := func(outcome string) adminapi.Delivery {
		t.Helper()
		for _, d := range trail {
			if d.Outcome == outcome {
				return d
			}
		}
		t.Fatalf("no %s delivery in the trail", outcome)
		return adminapi.Delivery{}
	}

	// The page asks for the token.
	b.do("open the console", chromedp.Navigate(g.AdminURL("/admin/")), chromedp.WaitVisible(chromedp.ID("login")))
	b.shotOf("console-login", "login")
	b.do("sign in with a wrong token", chromedp.SendKeys(chromedp.ID("token"), "wrong"), chromedp.Click(chromedp.ID("signin")))
	b.waitJS("the token refused", `!document.getElementById('login').hidden && document.getElementById('login-error').textContent === 'The gateway refused this token.'`)
	if tok := eval[string](b, `sessionStorage.getItem('idemhook.admin.token') ?? ''`); tok != "" {
		t.Errorf("a refused token is kept: %q", tok)
	}
	b.do("sign in", chromedp.SendKeys(chromedp.ID("token"), "s3cret"), chromedp.Click(chromedp.ID("signin")))
	rows := `document.querySelectorAll('#deliveries tbody tr[data-id]')`
	b.waitJS("the first page of deliveries", rows+`.length === 25`)
	b.waitJS("the per-source table", `document.querySelectorAll('#stats tbody tr').length === 4`)
	if !eval[bool](b, `document.getElementById('queue').hidden`) {
		t.Errorf("the Queue section shows on a gateway with no deliver: queue route")
	}
	if tok := eval[string](b, `sessionStorage.getItem('idemhook.admin.token')`); tok != "s3cret" {
		t.Errorf("sessionStorage token = %q", tok)
	}
	if c := eval[string](b, `document.cookie`); c != "" {
		t.Errorf("the console set cookies: %q", c)
	}

	// Per source: total, processed, replayed, refused, failed, unprotected,
	// duplicate rate. The hour and the day hold the same deliveries here.
	head := eval[[]string](b, `[...document.querySelectorAll('#stats thead tr:nth-child(2) th')].map(th => th.textContent)`)
	window := []string{"Total", "Processed", "Replayed", "Refused", "Failed", "Unprotected", "Duplicates"}
	if want := append(slices.Clone(window), window...); !slices.Equal(head, want) {
		t.Errorf("per-source columns\n got %q\nwant %q", head, want)
	}
	stats := eval[[][]string](b, `[...document.querySelectorAll('#stats tbody tr')].map(tr => [...tr.cells].map(c => c.textContent))`)
	wantStats := [][]string{
		{"github", "8", "4", "2", "1", "1", "0", "25.0 %", "8", "4", "2", "1", "1", "0", "25.0 %"},
		{"shopify", "4", "3", "0", "0", "0", "1", "25.0 %", "4", "3", "0", "0", "0", "1", "25.0 %"},
		{"stripe", "15", "12", "3", "0", "0", "0", "20.0 %", "15", "12", "3", "0", "0", "0", "20.0 %"},
		{"tenant", "3", "2", "0", "1", "0", "0", "0.0 %", "3", "2", "0", "1", "0", "0", "0.0 %"},
	}
	if fmt.Sprint(stats) != fmt.Sprint(wantStats) {
		t.Errorf("per-source table\n got %q\nwant %q", stats, wantStats)
	}
	// Every delivery is in one column: they add up to the total.
	for _, row := range stats {
		for w := 0; w < 2 && len(row) >= 15; w++ {
			cells := row[1+7*w : 7+7*w] // total, then the classes
			var sum, total int
			fmt.Sscan(cells[0], &total)
			for _, c := range cells[1:] {
				var n int
				fmt.Sscan(c, &n)
				sum += n
			}
			if sum != total {
				t.Errorf("%s: the columns add up to %d, total %d (%q)", row[0], sum, total, cells)
			}
		}
	}
	if got := eval[string](b, `document.querySelector('#stats tr[data-source="github"] td.failed').title`); got != "failed_released: 1" {
		t.Errorf("github's failed count says %q, want its outcomes", got)
	}

	b.shot("console")

	// A count of one outcome lists its deliveries.
	b.do("click a failed count", chromedp.Click(chromedp.CSS(`#stats tr[data-source="github"] td.failed button`)))
	b.waitJS("the failed deliveries", rows+`.length === 1 && location.search === '?source=github&outcome=failed_released' && `+
		`document.querySelector('#deliveries tr[data-id] td.outcome').textContent === 'failed_released'`)

	// Filters.
	cellsOf := func(class string) string {
		return `[...document.querySelectorAll('#deliveries tbody td.` + class + `')].map(td => td.textContent)`
	}
	apply := func(what string, values map[string]string, wantRows int, check string) {
		t.Helper()
		steps := []chromedp.Action[chromedp.Void]{chromedp.Click(chromedp.ID("f-reset"))}
		for id, v := range values {
			steps = append(steps, chromedp.SetValue(chromedp.ID(id), v))
		}
		steps = append(steps, chromedp.Click(chromedp.ID("f-apply")))
		b.do("filter "+what, steps...)
		cond := fmt.Sprintf(`%s.length === %d`, rows, wantRows)
		if check != "" {
			cond += " && " + check
		}
		b.waitJS("the deliveries "+what, cond)
	}
	// A source's name in the table filters the list by it.
	b.do("click a source", chromedp.Click(chromedp.CSS(`#stats tr[data-source="shopify"] button`)))
	b.waitJS("the deliveries of the clicked source", rows+`.length === 4 && `+cellsOf("source")+`.every(s => s === 'shopify') && document.getElementById('f-source').value === 'shopify'`)
	apply("of source github", map[string]string{"f-source": "github"}, 8, cellsOf("source")+`.every(s => s === 'github')`)
	b.shot("console-filtered")
	stripeReplayed := cellsOf("source") + `.every(s => s === 'stripe') && ` + cellsOf("outcome") + `.every(s => s === 'replayed')`
	apply("replayed of source stripe", map[string]string{"f-source": "stripe", "f-outcome": "replayed"}, 3, stripeReplayed)

	// The filters are the page's address: a reload keeps the view, a
	// source's name is a new history entry, Back and Forward go through
	// them.
	search := func() string { return eval[string](b, `location.search`) }
	if got := search(); got != "?source=stripe&outcome=replayed" {
		t.Errorf("the address of a filtered view: %q, want ?source=stripe&outcome=replayed", got)
	}
	formIs := func(source, outcome string) string {
		return fmt.Sprintf(`document.getElementById('f-source').value === %s && document.getElementById('f-outcome').value === %s`, js(source), js(outcome))
	}
	b.do("reload", chromedp.Reload())
	b.waitJS("the same view after a reload", rows+`.length === 3 && `+stripeReplayed+` && `+formIs("stripe", "replayed"))
	b.do("click a source", chromedp.Click(chromedp.CSS(`#stats tr[data-source="github"] button`)))
	b.waitJS("the clicked source's view", rows+`.length === 8 && location.search === '?source=github' && `+formIs("github", ""))
	eval[bool](b, `history.back(), true`)
	b.waitJS("Back: the previous view", rows+`.length === 3 && location.search === '?source=stripe&outcome=replayed' && `+stripeReplayed+` && `+formIs("stripe", "replayed"))
	eval[bool](b, `history.forward(), true`)
	b.waitJS("Forward: the source's view again", rows+`.length === 8 && location.search === '?source=github' && `+formIs("github", ""))
	// A link with a time and a page size, as another browser would open it.
	hourAgo := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	link := "?source=stripe&since=" + hourAgo.Format(time.RFC3339) + "&limit=10"
	// The input shows seconds only when they are not zero (localInput).
	sinceInput := hourAgo.Format("2006-01-02T15:04")
	if hourAgo.Second() != 0 {
		sinceInput = hourAgo.Format("2006-01-02T15:04:05")
	}
	b.do("open a link", chromedp.Navigate(g.AdminURL("/admin/"+link)))
	b.waitJS("the link's view", rows+`.length === 10 && `+cellsOf("source")+`.every(s => s === 'stripe') && `+
		`document.getElementById('f-limit').value === '10' && document.getElementById('f-since').value === `+js(sinceInput))
	b.do("open a link with a mistake", chromedp.Navigate(g.AdminURL("/admin/?source=github&sort=asc")))
	b.waitJS("its mistake named", rows+`.length === 8 && !document.getElementById('error').hidden && `+
		`document.getElementById('error').textContent === 'The page address has unknown parameter "sort" (known: source, outcome, route, since, until, limit).'`)
	apply("replayed of source stripe", map[string]string{"f-source": "stripe", "f-outcome": "replayed"}, 3, stripeReplayed)
	if !eval[bool](b, `document.getElementById('error').hidden`) {
		t.Errorf("the address's mistake is still shown once the filters changed")
	}

	// Rows say why: a refused delivery has no key but a reason, a failed
	// one the upstream's status, and each the gateway that answered.
	reasonOf := func(outcome string) string {
		return `document.querySelector('#deliveries tr.reason[data-for="' + document.querySelector('#deliveries tr[data-id] td.outcome .badge.` +
			outcome + `')?.closest('tr').dataset.id + '"] td.why')?.textContent`
	}
	invalid, failed := trailOf("signature_invalid"), trailOf("failed_released")
	if invalid.Reason == "" || failed.Reason == "" || invalid.Instance == "" {
		t.Fatalf("the trail lacks a reason or an instance: %+v, %+v", invalid, failed)
	}
	apply("signature_invalid", map[string]string{"f-outcome": "signature_invalid"}, 1, reasonOf("refused")+` === `+js(invalid.Reason))
	if got := eval[[]string](b, `[...document.querySelectorAll('#deliveries tr[data-id] td')].map(td => td.textContent)`); len(got) != 10 ||
		got[3] != "–" || got[9] != invalid.Instance {
		t.Errorf("the signature_invalid row = %q, want key – and instance %q", got, invalid.Instance)
	}
	apply("failed_released", map[string]string{"f-outcome": "failed_released"}, 1, reasonOf("failed")+` === `+js(failed.Reason))
	b.shot("console-reasons")
	// A prefix route's deliveries show the scope their key is stored under.
	apply("of source tenant, processed", map[string]string{"f-source": "tenant", "f-outcome": "processed"}, 2,
		`[...document.querySelectorAll('#deliveries td.route .scope')].map(s => s.textContent).join() === '/t/globex/orders,/t/acme/orders'`)
	apply("of route /webhooks/shop", map[string]string{"f-route": "/webhooks/shop"}, 4, cellsOf("route")+`.every(s => s === '/webhooks/shop')`)
	apply("refused", map[string]string{"f-outcome": "mismatch"}, 1, cellsOf("status")+`[0] === '422'`)
	// datetime-local takes the browser's local time (UTC here), to the
	// minute: the input drops ":00" seconds, and SetValue wants its value
	// back as set.
	local := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04") }
	apply("until an hour ago", map[string]string{"f-until": local(time.Now().Add(-time.Hour))}, 0, `!document.getElementById('empty').hidden`)
	apply("since an hour ago, 10 a page", map[string]string{"f-since": local(time.Now().Add(-time.Hour)), "f-limit": "10"}, 10, "")

	// Paging: stripe's 15 deliveries, 10 then 5, each once.
	ids := `[...document.querySelectorAll('#deliveries tbody tr')].map(tr => tr.dataset.id)`
	apply("of source stripe, 10 a page", map[string]string{"f-source": "stripe", "f-limit": "10"}, 10, cellsOf("source")+`.every(s => s === 'stripe')`)
	page1 := eval[[]string](b, ids)
	b.do("older page", chromedp.Click(chromedp.ID("older")))
	b.waitJS("the second page", rows+`.length === 5 && document.getElementById('older').disabled`)
	page2 := eval[[]string](b, ids)
	for _, id := range page2 {
		if slices.Contains(page1, id) {
			t.Errorf("delivery %s on both pages: %v, %v", id, page1, page2)
		}
	}
	b.do("newer page", chromedp.Click(chromedp.ID("newer")))
	b.waitJS("the first page again", rows+`.length === 10 && document.getElementById('newer').disabled`)
	if again := eval[[]string](b, ids); !slices.Equal(again, page1) {
		t.Errorf("first page again = %v, want %v", again, page1)
	}

	// Live: a new delivery shows up without a reload. Its key holds HTML,
	// which the page shows as text, never as markup.
	b.do("reset the filters", chromedp.Click(chromedp.ID("f-reset")))
	b.waitJS("the unfiltered list", rows+`.length === 25 && location.search === ''`)
	eval[bool](b, `window.__marker = true`)
	gatewaytest.Post(t, g.URL("/webhooks/shop"), `{"id":1}`, "X-Shopify-Webhook-Id", xssKey)
	b.waitJS("the new delivery", fmt.Sprintf(`[...document.querySelectorAll('#deliveries button.link')].some(b => b.textContent === %s) && window.__marker === true`, js(xssKey)))
	if n := eval[int](b, `document.querySelectorAll('#deliveries img').length`); n != 0 {
		t.Errorf("a key holding HTML made %d img elements", n)
	}
	if eval[bool](b, `window.__xss !== undefined`) {
		t.Errorf("a key holding HTML ran its script")
	}

	// One key: open it from its row.
	body := stripeEvent(1)
	key := idemhook.BodyKey([]byte(body))
	b.do("open a key", chromedp.Click(chromedp.CSS(`#deliveries button.link[title="`+key+`"]`)))
	b.waitJS("the key's record", `document.getElementById('key-dialog').open && document.getElementById('record-state')?.textContent === 'completed'`)
	eval[bool](b, `window.scrollTo(0, 0), true`) // the screenshot shows the page's top behind the dialog
	if got := eval[string](b, `document.getElementById('record-key').textContent`); got != "idem:stripe:"+key {
		t.Errorf("record store key = %q, want %q", got, "idem:stripe:"+key)
	}
	if got := eval[string](b, `document.getElementById('record-body').textContent`); got != `{"ok":true,"call":1}` {
		t.Errorf("record body = %q, want the first answer", got)
	}
	b.shot("console-key")

	// Delete it, through the confirmation.
	b.do("delete", chromedp.Click(chromedp.ID("delete")))
	b.waitJS("the confirmation", `document.getElementById('confirm-dialog').open`)
	if got := eval[string](b, `document.getElementById('confirm-key').textContent`); got != "idem:stripe:"+key {
		t.Errorf("confirmation names %q", got)
	}
	b.shot("console-confirm")
	if r := adminDo(t, g, "GET", "/admin/keys/stripe/"+key); r.Status != 200 {
		t.Fatalf("the key is gone before the confirmation: %d", r.Status)
	}
	b.do("confirm", chromedp.Click(chromedp.ID("confirm-delete")))
	b.waitJS("the deletion", `document.getElementById('record-state').textContent === 'deleted' && document.getElementById('record-note').textContent.startsWith('Deleted.')`)
	if r := adminDo(t, g, "GET", "/admin/keys/stripe/"+key); r.Status != 404 {
		t.Errorf("GET the deleted key = %d, want 404", r.Status)
	}
	before := callsWith(body)
	r := gatewaytest.Post(t, g.URL("/webhooks/stripe"), body)
	if r.Status != 200 || r.Header.Get(idemhook.ReplayedHeader) != "" || callsWith(body) != before+1 {
		t.Errorf("the next delivery after the delete: %d replayed=%q, upstream calls with its body %d -> %d, want one more",
			r.Status, r.Header.Get(idemhook.ReplayedHeader), before, callsWith(body))
	}
	b.do("close the record", chromedp.Click(chromedp.ID("key-close")))

	// One key: look it up by source and key.
	b.do("look a key up", chromedp.SetValue(chromedp.ID("k-source"), "github"),
		chromedp.SendKeys(chromedp.ID("k-key"), guid(2)), chromedp.Click(chromedp.ID("k-open")))
	b.waitJS("the looked-up record", `document.getElementById('record-key')?.textContent === 'idem:github:`+guid(2)+`'`)
	b.do("close the record", chromedp.Click(chromedp.ID("key-close")))

	// A prefix route's key without its scope: the dialog says a scope is
	// needed and offers those that hold the key.
	b.do("look a scoped key up", chromedp.SetValue(chromedp.ID("k-source"), "tenant"), chromedp.SetValue(chromedp.ID("k-key"), "evt_tenant_1"), chromedp.Click(chromedp.ID("k-open")))
	scopeButtons := `[...document.querySelectorAll('#record-scopes button')].map(b => b.textContent).join()`
	b.waitJS("the scopes holding the key", scopeButtons+` === '/t/globex/orders,/t/acme/orders' && document.getElementById('record-note').textContent.includes('?scope=')`)
	b.shot("console-scopes")
	b.do("open it under a scope", chromedp.Click(chromedp.CSS(`#record-scopes button:last-of-type`)))
	b.waitJS("the scoped record", `document.getElementById('record-key')?.textContent === 'idem:tenant@/t/acme/orders:evt_tenant_1' && document.getElementById('record-scopes').hidden`)
	b.do("close the record", chromedp.Click(chromedp.ID("key-close")))

	// A long key that holds nothing: the dialog's text wraps inside it.
	long := strings.Repeat("0123456789abcdef", 8) // 128 bytes: kept as the key, not hashed
	b.do("look a long key up", chromedp.SetValue(chromedp.ID("k-source"), "github"), chromedp.SetValue(chromedp.ID("k-key"), long), chromedp.Click(chromedp.ID("k-open")))
	b.waitJS("the long key's 404", `document.getElementById('record-note').textContent === 'nothing stored under idem:github:`+long+` (never stored, expired or deleted)'`)
	if over := eval[[]float64](b, `(() => {
		const d = document.getElementById('key-dialog'), n = document.getElementById('record-note');
		return [n.scrollWidth - n.clientWidth, n.getBoundingClientRect().right - d.getBoundingClientRect().right, d.scrollWidth - d.clientWidth];
	})()`); over[0] > 0 || over[1] > 0 || over[2] > 0 {
		t.Errorf("the 404 text runs past the dialog's edge: by %vpx past the note's box, %vpx past the dialog, %vpx of scrolling", over[0], over[1], over[2])
	}
	b.do("close the record", chromedp.Click(chromedp.ID("key-close")))

	// Sign out forgets the token.
	b.do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("login")))
	if tok := eval[string](b, `sessionStorage.getItem('idemhook.admin.token') ?? ''`); tok != "" {
		t.Errorf("token kept after sign out: %q", tok)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	origin := g.AdminURL("/admin/")
	for _, u := range b.requests {
		// data: URLs are no fetch. They are chromium's own date picker icon.
		if !strings.HasPrefix(u, origin) && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page requested %s, outside %s", u, origin)
		}
	}
	if len(b.requests) < 10 {
		t.Errorf("only %d requests seen: %v", len(b.requests), b.requests)
	}
	for _, p := range b.problems {
		t.Errorf("page problem: %s", p)
	}
}
