package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/sqlitestore"
)

// The queue (deliver: queue, docs/queue.md) under a real gateway process:
// killed with SIGKILL in the middle of a burst, and with its backend down
// for 30 seconds under a steady stream. The in-process tests are in
// gateway/queue_test.go.

// queueProcConfig is a one-route configuration on SQLite in dir whose route
// queues its events (keyed by X-Event-Id) with the queue settings given,
// in front of upstream.
func queueProcConfig(dir, upstream, queueSettings string) string {
	return gatewaytest.QueueConfig(fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(dir, "state.db")), upstream, queueSettings)
}

// senderClient is the providers' HTTP client: enough idle connections for
// the tests' senders, and a bound so that no send hangs the test.
func senderClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 32}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// sendEvent posts body with X-Event-Id id and the extra header pairs, as a
// provider would. It returns the status and whether the answer was a replay,
// or the transport's error (the gateway went away: the event is not taken
// for accepted).
func sendEvent(c *http.Client, url, id, body string, header ...string) (status int, replayed bool, err error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Id", id)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, false, err // the answer was cut: the provider saw no 2xx
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", nil
}

// backendAttempt is one attempt a test backend received.
type backendAttempt struct {
	attempt  int    // Idempotent-Attempt
	eventID  string // Idempotent-Event-Id
	start    time.Time
	end      time.Time
	answered bool // the backend wrote its 2xx (false: the gateway went away first)
	gen      int  // which gateway process sent it: 1 before the kill, 2 after
}

// runningEvents returns the keys of the events the queue in the SQLite file
// at path holds as running (state 1): each claimed by an attempt that has
// not settled. Read after a kill, they are the attempts that were in flight
// at the kill, whatever their backend had answered.
func runningEvents(t *testing.T, path string) map[string]bool {
	t.Helper()
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT key FROM idem_queue WHERE state = 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	running := map[string]bool{}
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			t.Fatal(err)
		}
		running[key] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return running
}

// A gateway process killed with SIGKILL in the middle of a burst loses no
// event it answered 202: each reaches the backend after the restart. The
// events the backend gets twice are only those whose attempt was in flight
// at the kill (at most the route's concurrency), sent again with the same
// Idempotency-Key and a higher attempt number: those the file holds as
// running after the kill, whether or not their backend had answered (an
// answer whose settle had not committed). The events whose send failed
// at the kill (no 2xx: the provider would retry them) are sent again after
// the restart and delivered too.
func TestQueueSIGKILLLosesNothing(t *testing.T) {
	const (
		events      = 300
		senders     = 16
		killAfter   = 100 // answered 202
		concurrency = 8
		backendTime = 50 * time.Millisecond
		pace        = 60 * time.Millisecond // each sender's pause: ~250 events/s in all, past the backend's 160/s
	)
	up := newUpstream(t)
	var (
		mu        sync.Mutex
		attempts  = map[string][]*backendAttempt{} // by Idempotency-Key
		inFlight  atomic.Int32
		restartAt atomic.Int64 // UnixNano just before the second process starts; 0 before
		// frozen is set once the kill is decided: from then on the backend
		// answers nothing, so that the attempts at it are surely in flight
		// when the gateway dies.
		frozen atomic.Bool
	)
	up.Handle = func(w http.ResponseWriter, r *http.Request, _ int64) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		a := &backendAttempt{eventID: r.Header.Get(gateway.HeaderEventID), start: time.Now(), gen: 1}
		a.attempt, _ = strconv.Atoi(r.Header.Get(gateway.HeaderAttempt))
		if ra := restartAt.Load(); ra != 0 && a.start.UnixNano() >= ra {
			a.gen = 2
		}
		key := r.Header.Get(gateway.HeaderIdempotencyKey)
		mu.Lock()
		attempts[key] = append(attempts[key], a)
		mu.Unlock()
		select {
		case <-time.After(backendTime):
		case <-r.Context().Done():
		}
		if frozen.Load() && r.Context().Err() == nil {
			<-r.Context().Done() // the kill is coming: no answer
		}
		select {
		case <-r.Context().Done(): // the gateway died under it
			mu.Lock()
			a.end = time.Now()
			mu.Unlock()
		default:
			w.WriteHeader(http.StatusOK)
			mu.Lock()
			a.end, a.answered = time.Now(), true
			mu.Unlock()
		}
	}
	dir := t.TempDir()
	path := writeConfig(t, dir, queueProcConfig(dir, up.Srv.URL,
		fmt.Sprintf("concurrency: %d, backoff_min: 50ms, backoff_max: 200ms", concurrency)))
	client := senderClient(t)
	id := func(n int) string { return fmt.Sprint("evt-", n) }
	body := func(n int) string { return fmt.Sprintf(`{"n":%d}`, n) }

	gw := startProc(t, path)
	began := time.Now()
	url := gw.url("/webhooks/test")
	var (
		accepted  [events]atomic.Bool // answered 202 by the first process
		acceptedN atomic.Int32
		failed    [events]string // why the first process's answer was not a 202
		next      atomic.Int32
		wg        sync.WaitGroup
	)
	for range senders {
		wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= events {
					return
				}
				status, _, err := sendEvent(client, url, id(n), body(n))
				switch {
				case err != nil:
					failed[n] = err.Error()
				case status != http.StatusAccepted:
					failed[n] = fmt.Sprintf("answered %d", status)
				default:
					accepted[n].Store(true)
					acceptedN.Add(1)
				}
				time.Sleep(pace)
			}
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for acceptedN.Load() < killAfter {
		if time.Now().After(deadline) {
			t.Fatalf("within 30s: %d events answered 202; want %d\n%s", acceptedN.Load(), killAfter, gw.stderr)
		}
		time.Sleep(time.Millisecond)
	}
	frozen.Store(true)
	for inFlight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("within 30s: no attempt at the backend to kill the gateway under\n%s", gw.stderr)
		}
		time.Sleep(time.Millisecond)
	}
	killedAt := time.Now()
	gw.signal(t, syscall.SIGKILL)
	gw.wait(t) //nolint:errcheck // killed
	wg.Wait()  // the rest of the burst fails: nothing listens
	// The attempts in flight at the kill: what the file says, not how long
	// before the kill their answers came (a settle's commit waits for the
	// writer, which a loaded machine can make slow).
	runningAtKill := runningEvents(t, filepath.Join(dir, "state.db"))
	if len(runningAtKill) > concurrency {
		t.Errorf("%d events running in the file after the kill %v; want at most the route's concurrency, %d", len(runningAtKill), runningAtKill, concurrency)
	}
	atKill := int(acceptedN.Load())
	var notAccepted []int
	for n := range events {
		if !accepted[n].Load() {
			notAccepted = append(notAccepted, n)
			if failed[n] == "" {
				t.Fatalf("%s was neither answered 202 nor failed", id(n))
			}
		}
	}
	if len(notAccepted) == 0 {
		t.Fatalf("every event was answered 202 before the kill took effect: the kill was not in the middle of the burst")
	}

	time.Sleep(50 * time.Millisecond) // the dead process's last bytes, read by the backend, are from before the restart
	frozen.Store(false)
	restartAt.Store(time.Now().UnixNano())
	gw = startProc(t, path)
	url = gw.url("/webhooks/test")
	replayed := 0
	for _, n := range notAccepted { // the provider's retries
		status, rep, err := sendEvent(client, url, id(n), body(n))
		if err != nil || status != http.StatusAccepted {
			t.Fatalf("%s sent again after the restart: %d %v; want 202 (first send: %s)", id(n), status, err, failed[n])
		}
		if rep {
			replayed++ // kept at the kill, but the 202 never reached the sender
		}
	}
	answeredKeys := func() int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, as := range attempts {
			if slices.ContainsFunc(as, func(a *backendAttempt) bool { return a.answered }) {
				k++
			}
		}
		return k
	}
	eventually(t, "every event answered 2xx by the backend", func() bool { return answeredKeys() == events })
	drained := time.Since(began)
	time.Sleep(time.Second) // a repeat nobody expects would come now (the queue polls every 250ms)

	mu.Lock()
	defer mu.Unlock()
	var repeated, claimedOnly []string
	cut, settledLate := 0, time.Duration(0)
	for n := range events {
		key := "idem:test:" + id(n)
		as := attempts[key]
		if len(as) == 0 {
			t.Errorf("%s (answered 202: %v) never reached the backend", key, accepted[n].Load())
			continue
		}
		rep, claimed, c, late := judgeAcrossKill(t, key, as, runningAtKill, began, killedAt)
		cut, settledLate = cut+c, max(settledLate, late)
		if rep {
			repeated = append(repeated, key)
		}
		if claimed {
			claimedOnly = append(claimedOnly, key)
		}
	}
	if len(repeated)+len(claimedOnly) > concurrency {
		t.Errorf("%d events delivered again after the restart (%v) and %d claimed but not sent at the kill (%v): want at most the route's concurrency, %d, in flight",
			len(repeated), repeated, len(claimedOnly), claimedOnly, concurrency)
	}
	if cut == 0 {
		t.Errorf("no attempt was at the backend when the gateway died: the kill did not meet attempts in flight")
	}
	t.Logf("SIGKILL after %d of %d events answered 202 (%v into the burst); %d sent again after the restart (%d of them replayed: kept, but their 202 was lost); "+
		"%d attempts cut at the backend by the kill; %d events repeated %v (unsettled answers up to %v before the kill); %d claimed but not yet sent at the kill %v; all %d delivered %v after the burst began",
		atKill, events, killedAt.Sub(began).Round(time.Millisecond), len(notAccepted), replayed,
		cut, len(repeated), repeated, settledLate.Round(time.Millisecond), len(claimedOnly), claimedOnly, events, drained.Round(time.Millisecond))
}

// judgeAcrossKill checks the attempts as a backend got for key, an event
// accepted once, across a gateway killed at killedAt. gen 1 attempts were
// started before the kill, gen 2 after (by the restarted process, or by the
// gateway that survived it). Allowed: one attempt, numbered 1 and answered;
// one claimed by the killed process but killed before its request left
// (claimedOnly), whose one attempt after the kill is numbered 2; one in
// flight at the kill and its repeat after it with a higher number
// (repeated). The last two only of an event the store held as running at
// the kill (runningAtKill). It also returns how many of key's attempts the
// kill cut at the backend and, for a repeated event whose first attempt was
// answered, how long before the kill that answer came (its settle had not
// committed).
func judgeAcrossKill(t *testing.T, key string, as []*backendAttempt, runningAtKill map[string]bool, began, killedAt time.Time) (repeated, claimedOnly bool, cut int, settledLate time.Duration) {
	t.Helper()
	var first, second []*backendAttempt
	for _, a := range as {
		if a.eventID != as[0].eventID || a.eventID == "" {
			t.Errorf("%s: Idempotent-Event-Id %q then %q; want one id on every attempt", key, as[0].eventID, a.eventID)
		}
		if a.gen == 1 {
			first = append(first, a)
		} else {
			second = append(second, a)
		}
		if a.gen == 1 && !a.answered {
			cut++
		}
	}
	switch {
	case len(first) == 0 && len(second) == 1 && second[0].attempt > 1:
		// Claimed by the killed process (the claim's commit counts the
		// attempt) but killed before its request left: in flight at the
		// kill too, and never at the backend. Its one attempt comes after
		// the kill with the next number.
		claimedOnly = true
		if !runningAtKill[key] {
			t.Errorf("%s: first sent after the kill as attempt %d, but the store did not hold it as running at the kill", key, second[0].attempt)
		}
		if !second[0].answered || second[0].attempt != 2 {
			t.Errorf("%s: one attempt after the kill, number %d, answered %v; want attempt 2 answered", key, second[0].attempt, second[0].answered)
		}
	case len(first)+len(second) == 1:
		if a := as[0]; !a.answered || a.attempt != 1 {
			t.Errorf("%s: one attempt, number %d, answered %v; want attempt 1 answered", key, a.attempt, a.answered)
		}
	case len(first) == 1 && len(second) == 1:
		repeated = true
		a, b := first[0], second[0]
		if !runningAtKill[key] {
			t.Errorf("%s: delivered again after the kill, but its attempt %d (answered %v, at %v, %v before the kill) was settled in the store; want only attempts in flight at the kill sent again",
				key, a.attempt, a.answered, a.end.Sub(began), killedAt.Sub(a.end))
		}
		if a.answered {
			settledLate = killedAt.Sub(a.end)
		}
		if !b.answered || b.attempt <= a.attempt {
			t.Errorf("%s: attempt %d before the kill, then attempt %d (answered %v) after; want a higher number, answered", key, a.attempt, b.attempt, b.answered)
		}
	default:
		t.Errorf("%s: %d attempts before the kill and %d after; want one, or one in flight at the kill and its repeat", key, len(first), len(second))
	}
	return repeated, claimedOnly, cut, settledLate
}

// A steady stream of events, 20 a second for 40 seconds over 5 groups
// (order_by: header:X-Group), while the backend answers 503 for 30 seconds
// in the middle: every event is answered 202 at once, and once the backend
// is back every event reaches it exactly once, in order within its group,
// its attempts numbered 1, 2, 3... The breaker keeps the attempts while the
// backend is down to about one a second.
func TestQueueBackendDown30s(t *testing.T) {
	const (
		groups    = 5
		perGroup  = 160                    // 4 a second each, 40 seconds
		interval  = 250 * time.Millisecond // between a group's events
		downAfter = 5 * time.Second
		downFor   = 30 * time.Second
		// acceptBound is the slowest accept answer allowed: the shortest
		// provider timeout (Slack's 3 s, docs/providers.md) under the race
		// detector's cost.
		acceptBound = 3 * time.Second
	)
	up := newUpstream(t)
	type event struct {
		Group string `json:"group"`
		Seq   int    `json:"seq"`
	}
	var (
		down         atomic.Bool
		mu           sync.Mutex
		attemptsOf   = map[string][]int{}     // Idempotency-Key -> Idempotent-Attempt, as received
		deliveries   = map[string]int{}       // Idempotency-Key -> 2xx answers
		deliveredAt  = map[string]time.Time{} // Idempotency-Key -> its (first) 2xx
		order        = map[string][]int{}     // group -> seqs answered 2xx, in order
		downAttempts atomic.Int32
		badKey       atomic.Value // a key the backend could not read, if any
	)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		key := r.Header.Get(gateway.HeaderIdempotencyKey)
		attempt, err := strconv.Atoi(r.Header.Get(gateway.HeaderAttempt))
		var ev event
		if err != nil || json.Unmarshal(up.Received()[n-1].Body, &ev) != nil || r.Header.Get("X-Group") != ev.Group {
			badKey.Store(fmt.Sprintf("%s attempt %q group %q", key, r.Header.Get(gateway.HeaderAttempt), r.Header.Get("X-Group")))
		}
		mu.Lock()
		attemptsOf[key] = append(attemptsOf[key], attempt)
		mu.Unlock()
		if down.Load() {
			downAttempts.Add(1)
			http.Error(w, "deploy gone wrong", http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		deliveries[key]++
		if deliveries[key] == 1 {
			deliveredAt[key] = time.Now()
		}
		order[ev.Group] = append(order[ev.Group], ev.Seq)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
	dir := t.TempDir()
	path := writeConfig(t, dir, queueProcConfig(dir, up.Srv.URL,
		`concurrency: 8, backoff_min: 100ms, backoff_max: 5s, order_by: "header:X-Group"`))
	gw := startProc(t, path)
	client := senderClient(t)
	url := gw.url("/webhooks/test")
	keyOf := func(g, seq int) string { return fmt.Sprintf("idem:test:evt-g%d-%d", g, seq) }

	began := time.Now()
	var (
		wg         sync.WaitGroup
		acceptedAt [groups][perGroup]time.Time
		slowest    [groups]time.Duration
		failures   [groups][]string
	)
	for g := range groups {
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			time.Sleep(time.Duration(g) * interval / groups) // the groups' events interleave
			for seq := range perGroup {
				sent := time.Now()
				body := fmt.Sprintf(`{"group":"g%d","seq":%d}`, g, seq)
				status, replayed, err := sendEvent(client, url, fmt.Sprintf("evt-g%d-%d", g, seq), body, "X-Group", fmt.Sprint("g", g))
				took := time.Since(sent)
				slowest[g] = max(slowest[g], took)
				if err != nil || status != http.StatusAccepted || replayed {
					failures[g] = append(failures[g], fmt.Sprintf("g%d seq %d: %d replayed=%v %v", g, seq, status, replayed, err))
				}
				acceptedAt[g][seq] = time.Now()
				<-tick.C
			}
		})
	}
	time.Sleep(time.Until(began.Add(downAfter)))
	down.Store(true)
	downAt := time.Now()
	time.Sleep(time.Until(downAt.Add(downFor)))
	down.Store(false)
	upAt := time.Now()
	wg.Wait()
	streamed := time.Since(began)
	for g := range groups {
		for _, f := range failures[g] {
			t.Errorf("sending %s; want 202 (not a replay)", f)
		}
		if slowest[g] > acceptBound {
			t.Errorf("group g%d: the slowest accept answer took %v; want under %v", g, slowest[g], acceptBound)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(deliveries)
	}
	// Not eventually's 30 seconds: under the race detector the pure-Go
	// SQLite drains the 600 waiting events in about 20 seconds (1.5 without
	// it), so the bound is wider; it still bounds the test.
	const drainBound = 90 * time.Second
	for wait := time.Now().Add(drainBound); delivered() < groups*perGroup; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("%d of %d events delivered %v after the stream ended; want all", delivered(), groups*perGroup, drainBound)
		}
	}
	time.Sleep(time.Second) // a second delivery would come now (the queue polls every 250ms)

	if v := badKey.Load(); v != nil {
		t.Errorf("the backend got an attempt it could not read: %s", v)
	}
	mu.Lock()
	defer mu.Unlock()
	var drain time.Duration      // from the backend's return until the last event accepted before it is delivered
	var last, lastSend time.Time // the last delivery, the last accept
	backlog, maxAttempts := 0, 0
	for g := range groups {
		for seq := range perGroup {
			key := keyOf(g, seq)
			if n := deliveries[key]; n != 1 {
				t.Errorf("%s delivered %d times; want once", key, n)
			}
			as := attemptsOf[key]
			for i, a := range as {
				if a != i+1 {
					t.Errorf("%s: attempts numbered %v; want 1, 2, 3...", key, as)
					break
				}
			}
			maxAttempts = max(maxAttempts, len(as))
			if deliveredAt[key].After(last) {
				last = deliveredAt[key]
			}
			if acceptedAt[g][seq].After(lastSend) {
				lastSend = acceptedAt[g][seq]
			}
			if acceptedAt[g][seq].Before(upAt) && deliveredAt[key].After(upAt) {
				backlog++
				drain = max(drain, deliveredAt[key].Sub(upAt))
			}
		}
		want := make([]int, perGroup)
		for i := range want {
			want[i] = i
		}
		if got := order[fmt.Sprint("g", g)]; !slices.Equal(got, want) {
			t.Errorf("group g%d delivered the seqs %v; want 0 to %d once each, in order", g, got, perGroup-1)
		}
	}
	if backlog == 0 {
		t.Errorf("no event accepted while the backend was down waited for it: the outage did not meet the stream")
	}
	// Without the breaker each group's head would be tried every backoff
	// (up to 5s, 100ms at first) for the whole outage; with it, one probe a
	// second after the first failures.
	if n, bound := int(downAttempts.Load()), 2*int(downFor/time.Second)+20; n == 0 || n > bound {
		t.Errorf("%d attempts while the backend was down; want some, and at most %d (the breaker's one probe a second)", n, bound)
	}
	t.Logf("%d events over %v, the backend down %v from %v: %d attempts while down (at most %d for one event); "+
		"%d events waiting when it came back, all delivered %v after; the last event delivered %v after the stream's last accept",
		groups*perGroup, streamed.Round(time.Millisecond), downFor, downAt.Sub(began).Round(time.Millisecond), downAttempts.Load(), maxAttempts,
		backlog, drain.Round(time.Millisecond), last.Sub(lastSend).Round(time.Millisecond))
}
