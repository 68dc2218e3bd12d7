package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
)

// The fault matrix: every failing behaviour of a backend (faultbackend_test.go
// Backend) × every delivery mode × every store the mode allows, each cell a
// gateway with the failing route and a healthy route beside it on the same
// store, each judged by the oracles of faultoracle_test.go (nothing answered
// 2xx is lost, nothing runs twice, the healthy route runs each event once,
// no 503 of the gateway's own but for a documented reason, the route
// drained promptly once the backend is back). Behind -faults, as the fault
// suite:
//
//	go test ./cmd/idemhook -count=1 -run 'TestFaultMatrix$' -v -faults -faults.cells all
//	go test ./cmd/idemhook -count=1 -run TestFaultQueueOutage -v -faults -faults.outage 1m
var (
	faultsCells  = flag.String("faults.cells", "sample", "with -faults: the fault matrix's cells: all, sample (each behaviour, mode and store at least once), or a regular expression matched against behaviour/mode/store")
	faultsOutage = flag.Duration("faults.outage", time.Minute, "with -faults: how long TestFaultQueueOutage's backend refuses connections")
)

// matrixMode is a delivery mode of the failing route: the lines it adds
// to the route.
type matrixMode struct {
	name   string
	queued bool // events are kept in the store's queue (refused on Redis)
	items  bool // deliveries are batches of items
	lines  string
	// refuses, if set, tells the events the route's filter (in lines)
	// refuses: each is sent twice, and must be answered 2xx and never
	// reach the backend.
	refuses func(id string) bool
	// destinations: the route has two destinations in place of its
	// upstream, f on the failing backend (/f) and ok on a healthy backend
	// of its own (/ok), which must run each event once, promptly, while f
	// fails.
	destinations bool
}

// matrixFilter is mode queue-filter's route filter. It reads the JSON body
// and a header, and refuses the events whose id ends in an odd digit
// (refusesOdd), half the cell's, known before the cell runs.
const matrixFilter = `json && has(body.id) && body.id.matches("[02468]$") && headers["x-event-id"] == body.id`

// refusesOdd tells the events matrixFilter refuses.
func refusesOdd(id string) bool { return strings.ContainsAny(id[len(id)-1:], "13579") }

// The queue's settings keep a cell short: attempts end after 1s, retries
// wait at most 1s. An attempt's lease is still attempt_timeout + 15s.
const matrixQueue = "queue: {attempt_timeout: 1s, backoff_min: 100ms, backoff_max: 1s}"

var matrixModes = []matrixMode{
	{name: "proxy"},
	{name: "respond_within", queued: true, lines: "respond_within: 300ms\n" + matrixQueue},
	{name: "queue", queued: true, lines: "deliver: queue\n" + matrixQueue},
	{name: "split", items: true, lines: `items: {mode: split, paths: [{path: "items[*]", key: id}]}`},
	{name: "filter", items: true, lines: `items: {mode: filter, paths: [{path: "items[*]", key: id}]}`},
	// claim → filter → queue under each fault (issue 35); a filter that
	// failed at run time would let the odd events through, which the
	// oracle "filtered" catches.
	{name: "queue-filter", queued: true, refuses: refusesOdd, lines: "deliver: queue\n" + matrixQueue + "\nfilter: '" + matrixFilter + "'"},
	// fan-out (issue 35): one destination down holds back no other.
	{name: "destinations", queued: true, destinations: true, lines: "deliver: queue\n" + matrixQueue},
}

// matrixStore is a store of the matrix: the inside of store: {...} for one
// cell, a store of the cell's own (a new file, tables, a key prefix). The
// servers' stores get a 1s timeout, as the suite's other scenarios: at the
// default 250ms a loaded machine times out a claim that the server then
// applies, and that pending claim holds the event's retries for its lease
// (30s), which the drain oracle would take for the backend fault's doing.
type matrixStore struct {
	name string
	line func(t *testing.T) string
}

var matrixStores = []matrixStore{
	{"sqlite", func(t *testing.T) string {
		return fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(t.TempDir(), "idemhook.db"))
	}},
	{"postgres", func(t *testing.T) string {
		pool := pgtest.Pool(t)
		table := pgtest.Table(t, pool, "idemhook_faults")
		t.Cleanup(func() {
			for _, suffix := range []string{"_queue_attempts", "_queue_routes", "_queue"} {
				pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+suffix) //nolint:errcheck // best effort
			}
		})
		return fmt.Sprintf("driver: postgres, url: %q, table: %s, timeout: 1s", pgtest.URL(t), table)
	}},
	{"memory", func(*testing.T) string { return "driver: memory" }},
	{"redis", func(t *testing.T) string {
		return fmt.Sprintf("driver: redis, url: %q, prefix: %q, timeout: 1s", redistest.URL(t), fmt.Sprintf("faults%d:", time.Now().UnixNano()))
	}},
}

// matrixCell is one cell: a behaviour of the failing route's backend, a
// mode, a store, and the traffic.
type matrixCell struct {
	behaviour Behaviour
	mode      matrixMode
	store     matrixStore
	faultFor  time.Duration // how long the backend fails
	rate      int           // new deliveries a second to each route while it fails
	items     int           // items a batch (items modes)
	// config, if set, is the cell's gateway instead of matrixConfig's,
	// with the failing route at /f and the healthy one at /h.
	config func(storeLine, failing, healthy string) string
}

func (c matrixCell) name() string {
	return string(c.behaviour) + "/" + c.mode.name + "/" + c.store.name
}

// matrixCells returns every cell the configuration rules allow: the queue
// and respond_within are refused on Redis (asynchronous replication could
// lose an accepted event).
func matrixCells() []matrixCell {
	var cells []matrixCell
	for _, b := range Behaviours {
		for _, m := range matrixModes {
			for _, s := range matrixStores {
				if m.queued && s.name == "redis" {
					continue
				}
				cells = append(cells, matrixCell{behaviour: b, mode: m, store: s, faultFor: 2 * time.Second, rate: 10, items: 3})
			}
		}
	}
	return cells
}

// sampleCells picks, for behaviour i, the (2i)th and (2i+1)th of the
// modes × stores the rules allow, and the pairs past the last of those
// with behaviours from the first on: every behaviour at least twice, every
// mode × store at least once; and the connection refused on a queue on
// SQLite (issue 32's case) always.
func sampleCells(all []matrixCell) []matrixCell {
	var combos []matrixCell // the mode × store pairs, of the first behaviour
	for _, c := range all {
		if c.behaviour == Behaviours[0] {
			combos = append(combos, c)
		}
	}
	var out []matrixCell
	seen := map[string]bool{}
	add := func(c matrixCell) {
		if !seen[c.name()] {
			seen[c.name()] = true
			out = append(out, c)
		}
	}
	for _, c := range all {
		if c.behaviour == Refused && c.mode.name == "queue" && c.store.name == "sqlite" {
			add(c)
		}
	}
	for i, b := range Behaviours {
		for _, k := range []int{2 * i, 2*i + 1} {
			c := combos[k%len(combos)]
			c.behaviour = b
			add(c)
		}
	}
	for k := 2 * len(Behaviours); k < len(combos); k++ {
		c := combos[k]
		c.behaviour = Behaviours[k%len(Behaviours)]
		add(c)
	}
	return out
}

func selectCells(t *testing.T, spec string) []matrixCell {
	all := matrixCells()
	switch spec {
	case "all":
		return all
	case "sample":
		return sampleCells(all)
	}
	re, err := regexp.Compile(spec)
	if err != nil {
		t.Fatalf("-faults.cells %q: %v", spec, err)
	}
	var out []matrixCell
	for _, c := range all {
		if re.MatchString(c.name()) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatalf("-faults.cells %q selects no cell (e.g. refused/queue/sqlite; behaviours %v)", spec, Behaviours)
	}
	return out
}

func TestFaultMatrix(t *testing.T) {
	if !*faultsFlag {
		t.Skip("the fault matrix runs with -faults (go test ./cmd/idemhook -run 'TestFaultMatrix$' -v -faults -faults.cells sample)")
	}
	start := time.Now()
	var rows []Row
	for _, c := range selectCells(t, *faultsCells) {
		if time.Since(start) > *faultsBudget {
			rows = append(rows, Row{Cell: c.name(), Note: "not run: past -faults.budget"})
			continue
		}
		var row Row
		t.Run(strings.ReplaceAll(c.name(), "/", "_"), func(t *testing.T) {
			row = runCell(t, c, cellChecks{})
			for _, err := range row.Check() {
				t.Error(err)
			}
		})
		if row.Cell == "" {
			row = Row{Cell: c.name(), Note: "skipped or failed before its tally: see above"}
		}
		rows = append(rows, row)
	}
	table := Table(rows)
	t.Log("\n" + table)
	fmt.Println(table)
}

// cellChecks are a cell's deliberate breakages, for
// TestFaultMatrixOraclesCanFail; the zero value breaks nothing.
type cellChecks struct {
	backendRunTwice string        // the failing route's backend counts this event's run twice
	backendForget   string        // ... answers this event 200 without running it
	healthyRunTwice string        // the healthy route's backend counts this event's run twice
	fake503         string        // the provider records a made-up 503 of the gateway's for this event
	runDelay        time.Duration // each run of the failing route's backend takes this long
	drainBound      time.Duration // 0: DrainBound (and the cell waits 5s past it to measure)
	besideRunTwice  string        // mode destinations: the healthy destination's backend counts this event's run twice
	besideDown      time.Duration // mode destinations: the healthy destination's backend refuses connections this long from the start
	besideNoSuffix  string        // mode destinations: the healthy destination's backend records this event's key without its "#ok"
}

// matrixConfig is a cell's gateway: the failing route /f in front of
// failing, the healthy route /h (a plain proxy) in front of healthy, both
// on the store. In mode destinations /f has, in place of its upstream,
// the destination f in front of failing and the destination ok in front
// of beside.
func matrixConfig(storeLine string, mode matrixMode, failing, healthy, beside string) string {
	var extra strings.Builder
	for _, l := range strings.Split(mode.lines, "\n") {
		if l != "" {
			extra.WriteString("    " + l + "\n")
		}
	}
	upstream := fmt.Sprintf("    upstream: %s/f\n", failing)
	if mode.destinations {
		upstream = fmt.Sprintf("    destinations:\n      - {name: f, upstream: %s/f}\n      - {name: ok, upstream: %s/ok}\n", failing, beside)
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {%s}
admin: {listen: 127.0.0.1:0}
audit: {sink: none}
log: {level: info}
routes:
  - path: /f
%s    source: f
    header: x-event-id
    upstream_timeout: 1s
%s  - path: /h
    upstream: %s/h
    source: h
    header: x-event-id
`, storeLine, upstream, extra.String(), healthy)
}

// runCell runs one cell and returns its row. The backend of /f fails as
// c.behaviour for c.faultFor under a steady stream of new deliveries to
// both routes (each healthy event sent twice), then is healthy again (for
// a fault in the address, the file is fixed and reloaded); the providers
// send every delivery again while it is not answered 2xx. The cell ends
// once every event has run and the queue is empty, or DrainBound plus 5s
// after the return. In mode queue-filter the events the filter refuses are
// sent twice instead (the second 300ms later); in mode destinations every
// event to /f must run at f's backend and at ok's (a third backend, never
// failing but for cellChecks.besideDown).
func runCell(t *testing.T, c matrixCell, br cellChecks) Row {
	storeLine := c.store.line(t)
	fb, hb := NewBackend(t), NewBackend(t)
	if br.backendRunTwice != "" {
		fb.RunTwice.Store(&br.backendRunTwice)
	}
	if br.backendForget != "" {
		fb.Forget.Store(&br.backendForget)
	}
	if br.healthyRunTwice != "" {
		hb.RunTwice.Store(&br.healthyRunTwice)
	}
	fb.RunDelay.Store(int64(br.runDelay))
	var ob *Backend // the destination ok's backend, in mode destinations
	besideURL := ""
	if c.mode.destinations {
		ob = NewBackend(t)
		besideURL = ob.URL(Healthy)
		if br.besideRunTwice != "" {
			ob.RunTwice.Store(&br.besideRunTwice)
		}
		if br.besideNoSuffix != "" {
			ob.DropKeySuffix.Store(&br.besideNoSuffix)
		}
	}
	dir := t.TempDir()
	cfgText := func(b Behaviour) string {
		if c.config != nil {
			return c.config(storeLine, fb.URL(b), hb.URL(Healthy))
		}
		return matrixConfig(storeLine, c.mode, fb.URL(b), hb.URL(Healthy), besideURL)
	}
	path := writeConfig(t, dir, cfgText(c.behaviour))
	reload := make(chan os.Signal, 1)
	g := startGateway(t, path, startOpts{reload: reload})
	if !c.behaviour.InAddress() { // else the fault is in the upstream's address: the backend itself is healthy
		if err := fb.Set(c.behaviour); err != nil {
			t.Fatal(err)
		}
	}

	n := c.rate * int(c.faultFor/time.Second)
	bound, slack := DrainBound, 5*time.Second
	if br.drainBound > 0 {
		bound, slack = br.drainBound, 0
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	p := &Provider{
		Client:   &http.Client{Transport: tr, Timeout: 5 * time.Second},
		Deadline: time.Now().Add(c.faultFor + bound + slack),
		Fake503:  br.fake503,
	}
	o := Observed{Cell: c.name()}
	var senders sync.WaitGroup
	if ob != nil && br.besideDown > 0 {
		if err := ob.Set(Refused); err != nil {
			t.Fatal(err)
		}
		senders.Go(func() {
			time.Sleep(br.besideDown)
			if err := ob.Set(Healthy); err != nil {
				t.Error(err)
			}
		})
	}
	began := time.Now()
	for k := range n {
		id := fmt.Sprintf("f-%d", k)
		events, body := []string{id}, fmt.Sprintf(`{"id":%q}`, id)
		if c.mode.items {
			events = Events(id, c.items)
			body = Batch(events)
		}
		copies := 1
		if c.mode.refuses != nil && c.mode.refuses(id) {
			o.Filtered = append(o.Filtered, events...)
			copies = 2
		} else {
			o.Failing = append(o.Failing, events...)
		}
		if c.mode.destinations {
			o.Beside = append(o.Beside, events...)
		}
		hid := fmt.Sprintf("h-%d", k)
		o.Healthy = append(o.Healthy, hid)
		time.Sleep(time.Until(began.Add(time.Duration(k) * time.Second / time.Duration(c.rate))))
		for copyN := range copies { // a filtered event's copy comes 300ms later
			senders.Go(func() {
				time.Sleep(time.Duration(copyN) * 300 * time.Millisecond)
				p.Deliver("failing", g.url("/f"), id, body, events)
			})
		}
		for copyN := range 2 { // the provider's duplicate comes 300ms later
			senders.Go(func() {
				time.Sleep(time.Duration(copyN) * 300 * time.Millisecond)
				p.Deliver("healthy", g.url("/h"), hid, fmt.Sprintf(`{"id":%q}`, hid), []string{hid})
			})
		}
	}
	time.Sleep(time.Until(began.Add(c.faultFor)))

	// The backend is back.
	if c.behaviour.InAddress() {
		if err := os.WriteFile(path, []byte(cfgText(Healthy)), 0o600); err != nil {
			t.Fatal(err)
		}
		reload <- syscall.SIGHUP
		eventually(t, "the reload of the fixed upstream", func() bool { return strings.Contains(g.stderr.String(), "configuration reloaded") })
	} else if err := fb.Set(Healthy); err != nil {
		t.Fatal(err)
	}
	o.Recovered = time.Now()

	sendersDone := make(chan struct{})
	go func() { senders.Wait(); close(sendersDone) }()
	for wait := o.Recovered.Add(bound + slack); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		done := false
		select {
		case <-sendersDone:
			done = true
		default:
		}
		ran := allRan(fb.Runs(), o.Failing) && allRan(hb.Runs(), o.Healthy)
		if ob != nil {
			ran = ran && allRan(ob.Runs(), o.Beside)
		}
		if c.mode.queued {
			q := queueState(t, g, "/f")
			if q.Dead > 0 { // a 4xx or a redirect kills an event at once: kept, redriven once the backend is back
				o.Redriven += redrive(t, g, "/f")
				continue
			}
			if q.Queued+q.Retrying+q.Running > 0 {
				continue
			}
		}
		if done && ran {
			o.Drained = time.Now()
			break
		}
	}
	<-sendersDone // bounded by the provider's deadline and its client's timeout
	if err := g.stop(); err != nil {
		t.Errorf("gateway run returned %v", err)
	}
	o.Answers, o.Runs, o.FirstRuns, o.HealthyRuns, o.Requests = p.Answers(), fb.Runs(), fb.FirstRuns(), hb.Runs(), fb.Requests()
	if ob != nil {
		o.BesideRuns, o.BesideFirstRuns = ob.Runs(), ob.FirstRuns()
		o.Keys, o.BesideKeys = fb.Keys(), ob.Keys()
	}
	row := Tally(o)
	row.DrainBoundOverride = br.drainBound
	if o.Redriven > 0 {
		row.Note = fmt.Sprintf("%d dead events redriven", o.Redriven)
	}
	if errs := row.Check(); len(errs) > 0 {
		statuses := map[string]int{}
		for _, a := range o.Answers {
			statuses[fmt.Sprintf("%s %d %s%s", a.Route, a.Status, a.Title, a.Err)]++
		}
		t.Logf("%s: %+v\nanswers: %v\ngateway log (last 4KiB):\n%s", c.name(), row, statuses, tail(g.stderr.String(), 4096))
	}
	return row
}

func allRan(runs map[string]int, events []string) bool {
	for _, e := range events {
		if runs[e] == 0 {
			return false
		}
	}
	return true
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// adminURLer is a gateway in-process (gw) or a process (proc).
type adminURLer interface{ adminURL(string) string }

// queueLanes reads the queues of route from the admin API of g: the
// route's own, or one per destination (route may name one:
// /webhooks/stripe#billing).
func queueLanes(t *testing.T, g adminURLer, route string) []adminapi.QueueRoute {
	t.Helper()
	r := do(t, "GET", g.adminURL("/admin/queue?minutes=1"), "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /admin/queue: %d %s", r.Status, r.Body)
	}
	var q adminapi.Queue
	if err := json.Unmarshal([]byte(r.Body), &q); err != nil {
		t.Fatal(err)
	}
	var lanes []adminapi.QueueRoute
	for _, qr := range q.Routes {
		if qr.Path == route || qr.Route == route {
			lanes = append(lanes, qr)
		}
	}
	if len(lanes) == 0 {
		t.Fatalf("GET /admin/queue has no route %s: %s", route, r.Body)
	}
	return lanes
}

// queueState reads the queue of route from the admin API: with
// destinations, the counts of all its destinations' queues together.
func queueState(t *testing.T, g adminURLer, route string) adminapi.QueueRoute {
	t.Helper()
	lanes := queueLanes(t, g, route)
	sum := lanes[0]
	for _, l := range lanes[1:] {
		sum.Queued += l.Queued
		sum.Retrying += l.Retrying
		sum.Running += l.Running
		sum.Dead += l.Dead
	}
	return sum
}

// redrive queues the dead events of route (of each of its destinations)
// again, as an operator does once the backend is fixed, and returns how
// many.
func redrive(t *testing.T, g *gw, route string) int {
	t.Helper()
	n := 0
	for _, l := range queueLanes(t, g, route) {
		req := map[string]string{"route": route, "state": "dead"}
		if l.Destination != "" {
			req["destination"] = l.Destination
		}
		body, _ := json.Marshal(req)
		resp, err := http.Post(g.adminURL("/admin/queue/redrive"), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Redriven int `json:"redriven"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /admin/queue/redrive %s: %d %v", body, resp.StatusCode, err)
		}
		n += out.Redriven
	}
	return n
}

// TestFaultQueueOutage is issue 32's case as an operator met it: on SQLite,
// a queued route whose backend is not listening (connection refused) for
// -faults.outage under a steady stream of 20 new events a second to it and
// to a healthy proxy route beside it. The healthy route runs each event
// exactly once (each is sent twice); every event to the queued route is
// accepted at its first send (no answer but 2xx); each reaches the backend
// within DrainBound of its return. The routes are the issue's: no
// queue settings (attempt_timeout is upstream_timeout, 30s; backoff up to
// 10m), the key the body's hash.
func TestFaultQueueOutage(t *testing.T) {
	if !*faultsFlag {
		t.Skip("runs with -faults (go test ./cmd/idemhook -run TestFaultQueueOutage -v -faults -faults.outage 1m)")
	}
	c := matrixCell{
		behaviour: Refused, mode: matrixMode{name: "queue (issue 32)", queued: true}, store: matrixStores[0],
		faultFor: *faultsOutage, rate: 20,
		config: func(storeLine, failing, healthy string) string {
			return fmt.Sprintf(`listen: 127.0.0.1:0
store: {%s}
admin: {listen: 127.0.0.1:0}
log: {level: info}
routes:
  - {path: /f, upstream: "%s/q", source: q, deliver: queue}
  - {path: /h, upstream: "%s/p", source: p}
`, storeLine, failing, healthy)
		},
	}
	row := runCell(t, c, cellChecks{})
	row.Note = fmt.Sprintf("outage %v, %d answers to the queued route, %d not 2xx", *faultsOutage, row.FirstAnswers, row.RefusedAnswers)
	table := Table([]Row{row})
	t.Log("\n" + table)
	fmt.Println(table)
	for _, err := range row.Check() {
		t.Error(err)
	}
	if row.RefusedAnswers > 0 {
		t.Errorf("%d of %d answers of the queued route were not 2xx: every event must be accepted at once", row.RefusedAnswers, row.FirstAnswers)
	}
}

// TestFaultMatrixOraclesCanFail shows each oracle able to fail: a small
// real cell (a queued route on the memory store whose backend answers 500
// for a second), run once as it is, where every oracle passes, and once per
// oracle with a breakage that oracle must catch: a backend that runs an
// event twice, one that answers an event 200 without running it (a dropped
// event), a healthy route's backend that runs an event twice, a 503 of the
// gateway's own for no documented reason, and a backend too slow to drain
// within the bound. The same for modes queue-filter and destinations: each
// cell unbroken, then a filter that lets every event through (the oracle
// "filtered" expects the odd ones refused), a healthy destination whose
// backend runs an event twice, one that is down for 2.5s (its events
// late), and one that shows an event's key without its "#ok". Part of the ordinary run (some seconds).
func TestFaultMatrixOraclesCanFail(t *testing.T) {
	cell := matrixCell{behaviour: Status5xx, mode: matrixModes[2], store: matrixStores[2], faultFor: time.Second, rate: 5}
	filterCell, destCell := cell, cell
	filterCell.mode, destCell.mode = matrixModeNamed(t, "queue-filter"), matrixModeNamed(t, "destinations")
	passAll := filterCell
	passAll.mode.lines = strings.Replace(passAll.mode.lines, matrixFilter, `json && has(body.id) && headers["x-event-id"] == body.id`, 1)
	if passAll.mode.lines == filterCell.mode.lines {
		t.Fatal("the broken filter cell has the same filter as the mode's")
	}
	for _, c := range []matrixCell{cell, filterCell, destCell} {
		t.Run("unbroken_"+c.mode.name, func(t *testing.T) {
			row := runCell(t, c, cellChecks{})
			for _, err := range row.Check() {
				t.Errorf("the unbroken cell: %v", err)
			}
			if c.mode.refuses != nil && row.FilteredSent == 0 || c.mode.destinations && row.BesideSent == 0 {
				t.Errorf("the unbroken %s cell judged no event of its mode: %+v", c.mode.name, row)
			}
		})
	}
	for _, tc := range []struct {
		oracle string
		cell   matrixCell
		checks cellChecks
	}{
		{"twice", cell, cellChecks{backendRunTwice: "f-0"}},
		{"lost", cell, cellChecks{backendForget: "f-1", drainBound: time.Second}},
		{"healthy", cell, cellChecks{healthyRunTwice: "h-2"}},
		{"503", cell, cellChecks{fake503: "f-3"}},
		{"drain", cell, cellChecks{runDelay: 400 * time.Millisecond, drainBound: 300 * time.Millisecond}},
		{"filtered", passAll, cellChecks{}},
		{"beside", destCell, cellChecks{besideRunTwice: "f-0"}},
		{"beside", destCell, cellChecks{besideDown: 2500 * time.Millisecond}},
		{"beside", destCell, cellChecks{besideNoSuffix: "f-2"}},
	} {
		t.Run(tc.oracle, func(t *testing.T) {
			row := runCell(t, tc.cell, tc.checks)
			var oracle Oracle
			for _, o := range Oracles {
				if o.Name == tc.oracle {
					oracle = o
				}
			}
			if oracle.Check == nil {
				t.Fatalf("no oracle %q", tc.oracle)
			}
			err := oracle.Check(row)
			if err == nil {
				t.Fatalf("oracle %q passed a cell broken for it: %+v", tc.oracle, row)
			}
			t.Logf("oracle %q failed as it must: %v", tc.oracle, err)
		})
	}
}

// matrixModeNamed returns the matrix's mode of that name.
func matrixModeNamed(t *testing.T, name string) matrixMode {
	t.Helper()
	for _, m := range matrixModes {
		if m.name == name {
			return m
		}
	}
	t.Fatalf("no matrix mode %q", name)
	return matrixMode{}
}
