package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
)

// demoConfig is the configuration the demo runs the gateway with. Its %s
// are the SQLite file and the backend's address.
const demoConfig = `# written by idemhook demo
listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: "off"}
log: {level: error}
routes:
  - path: /webhooks/orders
    upstream: http://%[2]s/orders
    source: shop
    in_flight: wait
    wait_timeout: 5s
  - path: /webhooks/payments
    upstream: http://%[2]s/payments
    source: pay
    header: x-event-id
    deliver: queue
    queue: {backoff_min: 50ms, backoff_max: 250ms}
`

// demoBackend is the demo's upstream. It counts the deliveries it
// receives, holds those marked "slow" for a moment (so that duplicates
// arrive while they run) and fails once those marked "fail_once".
type demoBackend struct {
	calls  atomic.Int64
	mu     sync.Mutex
	failed map[string]bool

	// The queued route's side: while down, /payments answers 503.
	down      atomic.Bool
	tried     atomic.Int64   // /payments attempts
	delivered map[string]int // /payments deliveries per Idempotency-Key
}

type demoEvent struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Slow     bool   `json:"slow,omitempty"`
	FailOnce bool   `json:"fail_once,omitempty"`
}

func (b *demoBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/payments" {
		b.tried.Add(1)
		if b.down.Load() {
			http.Error(w, "deploy in progress", http.StatusServiceUnavailable)
			return
		}
		b.mu.Lock()
		b.delivered[r.Header.Get("Idempotency-Key")]++
		b.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	n := b.calls.Add(1)
	var ev demoEvent
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		http.Error(w, "bad JSON", http.StatusBadRequest)
		return
	}
	if ev.Slow {
		time.Sleep(300 * time.Millisecond)
	}
	w.Header().Set("Content-Type", "application/json")
	b.mu.Lock()
	fail := ev.FailOnce && !b.failed[ev.ID]
	if fail {
		b.failed[ev.ID] = true
	}
	b.mu.Unlock()
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":"database is down","call":%d}`, n)
		return
	}
	fmt.Fprintf(w, `{"received":%q,"call":%d}`, ev.ID, n)
}

// demoResult is what one sender got back.
type demoResult struct {
	status   int
	replayed bool
	body     string
	err      error
}

// demoStep is one row of the demo's table.
type demoStep struct {
	what    string
	body    string
	copies  int // concurrent senders
	results []demoResult
	calls   int64 // backend calls after the step
}

// demo starts the gateway on a SQLite store in a temporary directory in
// front of a small backend on loopback, sends a scripted series of
// deliveries and prints what each sender got and what the backend saw.
func demo(ctx context.Context, e env) error {
	start := time.Now()
	dir, err := os.MkdirTemp("", "idemhook-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir) // on an error; removed before the output's end otherwise

	backend := &demoBackend{failed: map[string]bool{}, delivered: map[string]int{}}
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: backend: %w", err)
	}
	bsrv := &http.Server{Handler: backend, ReadHeaderTimeout: 5 * time.Second}
	go bsrv.Serve(bln)
	defer bsrv.Close()

	cfgPath := filepath.Join(dir, "idemhook.yaml")
	dbPath := filepath.Join(dir, "idemhook.db")
	text := fmt.Sprintf(demoConfig, dbPath, bln.Addr().String())
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	cfg, err := config.Load(cfgPath, func(string) string { return "" })
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	gctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(gctx, cfg, env{stderr: e.stderr, ready: func(a addrs) { ready <- a }})
	}()
	var gw addrs
	select {
	case gw = <-ready:
	case err := <-done:
		return fmt.Errorf("demo: gateway: %w", err)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	url := "http://" + gw.Listen + "/webhooks/orders"

	steps := []*demoStep{
		{what: "first delivery of evt_1001", body: `{"id":"evt_1001","type":"order.paid"}`, copies: 1},
		{what: "provider retries evt_1001 (re-serialized)", body: "{\n  \"id\": \"evt_1001\",\n  \"type\": \"order.paid\"\n}", copies: 1},
		{what: "20 concurrent copies of evt_1002", body: `{"id":"evt_1002","type":"order.paid","slow":true}`, copies: 20},
		{what: "a different event, evt_1003", body: `{"id":"evt_1003","type":"order.shipped"}`, copies: 1},
		{what: "evt_1004: the backend fails (500)", body: `{"id":"evt_1004","type":"order.refunded","fail_once":true}`, copies: 1},
		{what: "provider retries evt_1004", body: `{"id":"evt_1004","type":"order.refunded","fail_once":true}`, copies: 1},
		{what: "provider retries evt_1004 again", body: `{"id":"evt_1004","type":"order.refunded","fail_once":true}`, copies: 1},
	}
	for _, st := range steps {
		st.results = make([]demoResult, st.copies)
		var wg sync.WaitGroup
		for i := range st.copies {
			wg.Go(func() { st.results[i] = demoPost(ctx, client, url, st.body) })
		}
		wg.Wait()
		st.calls = backend.calls.Load()
		for _, r := range st.results {
			if r.err != nil {
				return fmt.Errorf("demo: step %q: %w", st.what, r.err)
			}
		}
	}

	q, err := demoQueue(ctx, client, "http://"+gw.Listen+"/webhooks/payments", backend)
	if err != nil {
		return fmt.Errorf("demo: queued route: %w", err)
	}

	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("demo: gateway: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	printDemo(e.stdout, gw.Listen, bln.Addr().String(), dbPath, steps)
	printQueueDemo(e.stdout, q)
	printDemoEnd(e.stdout, time.Since(start))
	return nil
}

// demoNext is what the demo's reader runs next: from the checkout the demo
// ran in (go run ./cmd/idemhook demo), so with go run, which needs nothing
// installed.
const demoNext = "go run ./cmd/idemhook check --config idemhook.yaml && go run ./cmd/idemhook serve --config idemhook.yaml"

// printDemoEnd ends the demo's output, once its files are gone.
func printDemoEnd(w io.Writer, took time.Duration) {
	fmt.Fprintf(w, "\nDone in %s; the temporary directory was removed.\n\n", took.Round(time.Millisecond))
	fmt.Fprintf(w, "Next: copy examples/idemhook.yaml to idemhook.yaml, point upstream: at your backend, then\n")
	fmt.Fprintf(w, "  %s\n", demoNext)
}

// queueDemo is what the queued route's part of the demo saw.
type queueDemo struct {
	events, sent, accepted, replayed int
	slowest, down                    time.Duration
	triedDown                        int64
	delivered                        map[string]int
}

// demoQueue takes the backend down, sends events to the queued route (and
// one provider retry), brings the backend back and waits until every event
// reached it.
func demoQueue(ctx context.Context, client *http.Client, url string, b *demoBackend) (*queueDemo, error) {
	q := &queueDemo{events: 5}
	b.down.Store(true)
	downAt := time.Now()
	for i := range q.events + 1 {
		id := fmt.Sprintf("pay_%d", 2001+i%q.events) // the last is a retry of the first
		t0 := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"id":"`+id+`","type":"payment.captured"}`))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Event-Id", id)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		q.slowest = max(q.slowest, time.Since(t0))
		q.sent++
		if resp.StatusCode == http.StatusAccepted {
			q.accepted++
		}
		if resp.Header.Get(idemhook.ReplayedHeader) == "true" {
			q.replayed++
		}
	}
	time.Sleep(1500 * time.Millisecond)
	q.triedDown = b.tried.Load()
	q.down = time.Since(downAt)
	b.down.Store(false)
	deadline := time.Now().Add(15 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.delivered)
		b.mu.Unlock()
		if n == q.events {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d events delivered 15s after the backend came back", n, q.events)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a second delivery would come now
	b.mu.Lock()
	q.delivered = maps.Clone(b.delivered)
	b.mu.Unlock()
	return q, nil
}

func printQueueDemo(w io.Writer, q *queueDemo) {
	fmt.Fprintf(w, "Then /webhooks/payments, a route with deliver: queue, while its backend is down for %s:\n", q.down.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  %d deliveries of %d events were answered 202 at once (the slowest in %s), %d of them a replay;\n",
		q.sent, q.events, q.slowest.Round(time.Millisecond), q.replayed)
	fmt.Fprintf(w, "  the gateway tried the backend %d times while it was down (503) and kept every event.\n", q.triedDown)
	once := 0
	for _, n := range q.delivered {
		if n == 1 {
			once++
		}
	}
	if once == q.events && len(q.delivered) == q.events {
		fmt.Fprintf(w, "  When it was back, each of the %d events reached it exactly once.\n", q.events)
	} else {
		fmt.Fprintf(w, "  When it was back the deliveries per event were %v.\n", q.delivered)
	}
	fmt.Fprintf(w, "  docs/queue.md tells when to use deliver: queue.\n")
}

func demoPost(ctx context.Context, client *http.Client, url, body string) demoResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return demoResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return demoResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return demoResult{err: err}
	}
	return demoResult{
		status:   resp.StatusCode,
		replayed: resp.Header.Get(idemhook.ReplayedHeader) == "true",
		body:     string(bytes.TrimSpace(b)),
	}
}

func printDemo(w io.Writer, gateway, backend, db string, steps []*demoStep) {
	fmt.Fprintf(w, "idemhook demo: a gateway on %s (SQLite store %s)\n", gateway, db)
	fmt.Fprintf(w, "in front of a demo backend on %s; every step POSTs to /webhooks/orders.\n", backend)
	fmt.Fprintf(w, "The key is the SHA-256 of the JSON body (no idempotency-key header is sent).\n\n")

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tstep\tkey\tstatus\treplayed\tupstream calls so far\tanswer")
	sent, replayed := 0, 0
	events := map[string]bool{}
	for i, st := range steps {
		statuses := map[int]int{}
		nReplayed := 0
		for _, r := range st.results {
			statuses[r.status]++
			if r.replayed {
				nReplayed++
			}
		}
		sent += len(st.results)
		replayed += nReplayed
		var ev demoEvent
		_ = json.Unmarshal([]byte(st.body), &ev)
		events[ev.ID] = true

		status := fmt.Sprint(st.results[0].status)
		if len(st.results) > 1 {
			parts := []string{}
			for _, code := range slices.Sorted(maps.Keys(statuses)) {
				parts = append(parts, fmt.Sprintf("%d x%d", code, statuses[code]))
			}
			status = strings.Join(parts, ", ")
		}
		rep := "no"
		switch {
		case len(st.results) > 1:
			rep = fmt.Sprintf("%d of %d", nReplayed, len(st.results))
		case nReplayed == 1:
			rep = "yes"
		}
		key := idemhook.BodyKey([]byte(st.body))
		fmt.Fprintf(tw, "%d\t%s\t%s…\t%s\t%s\t%d\t%s\n", i+1, st.what, key[:19], status, rep, st.calls, st.results[0].body)
	}
	tw.Flush()

	calls := steps[len(steps)-1].calls
	fmt.Fprintf(w, "\n%d deliveries of %d events were sent; the backend ran %d times.\n", sent, len(events), calls)
	fmt.Fprintf(w, "%d duplicates were answered by the gateway with the first response (Idempotent-Replayed: true),\n", replayed)
	fmt.Fprintf(w, "the backend never saw them. The failed delivery was not stored: its retry reached the backend again.\n")
	fmt.Fprintf(w, "\n")
}
