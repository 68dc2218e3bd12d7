package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// Issue 35's destinations (docs/destinations.md) under real gateway
// processes: one killed with SIGKILL mid-drain and restarted on its SQLite
// file, two sharing one PostgreSQL of which one is killed, and, behind
// -faults, a soak with one destination down for minutes. The in-process
// tests are in gateway/destinations_test.go.

// faultsDestinationsOutage is how long the soak's billing destination
// refuses connections.
var faultsDestinationsOutage = flag.Duration("faults.destinations-outage", 3*time.Minute,
	"with -faults: how long TestDestinationsSoakOneDown's billing destination refuses connections")

// fanNames are the route's destinations, in their order.
var fanNames = []string{"billing", "crm", "analytics"}

// fanTypes are the event types of the tests' streams, in turn: each kind
// of destination filter meets events it selects and events it doesn't.
var fanTypes = []string{"payment_intent.succeeded", "customer.created", "invoice.paid", "payment_intent.created", "customer.updated"}

// fanCustomers is how many customers the streams' events are spread over
// (the soak's order_by groups).
const fanCustomers = 4

// fanWants reports whether the filter of destination selects an event of
// type typ: billing's payment_intent.*, crm's customer.*, analytics (no
// filter) every event.
func fanWants(destination, typ string) bool {
	switch destination {
	case "billing":
		return strings.HasPrefix(typ, "payment_intent.")
	case "crm":
		return strings.HasPrefix(typ, "customer.")
	}
	return true
}

// fanEvent is event n of a stream: its X-Event-Id, its type and its body.
func fanEvent(n int) (id, typ, body string) {
	typ = fanTypes[n%len(fanTypes)]
	return fmt.Sprint("evt-", n), typ, fmt.Sprintf(`{"n":%d,"type":%q,"customer":"cus_%d"}`, n, typ, n%fanCustomers)
}

// fanKey is the Idempotency-Key of event n's delivery to destination.
func fanKey(n int, destination string) string {
	return fmt.Sprintf("idem:test:evt-%d#%s", n, destination)
}

// fanProcConfig is issue 35's route on the store of storeLine, keyed by
// X-Event-Id, with the route's queue settings routeQueue and, for billing,
// crm and analytics in that order, their upstreams and queue settings.
// The admin API listens on a loopback port.
func fanProcConfig(storeLine, routeQueue string, upstreams, queues [3]string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {%s}
admin: {listen: 127.0.0.1:0}
audit: {sink: none}
log: {level: info}
routes:
  - path: /webhooks/stripe
    source: test
    header: x-event-id
    deliver: queue
    queue: {%s}
    destinations:
      - {name: billing, upstream: %q, filter: 'body.type.startsWith("payment_intent.")', queue: {%s}}
      - {name: crm, upstream: %q, filter: 'body.type.startsWith("customer.")', queue: {%s}}
      - {name: analytics, upstream: %q, queue: {%s}}
`, storeLine, routeQueue, upstreams[0], queues[0], upstreams[1], queues[1], upstreams[2], queues[2])
}

// fanBackend is the backend behind one destination. It records every
// attempt by Idempotency-Key, holds each for hold before answering 200,
// and keeps, by customer, the n of the events it answered in the order it
// answered them.
type fanBackend struct {
	name string
	up   *upstream
	hold time.Duration
	// freezePrefix selects the attempts frozen holds ("" every one): those
	// whose path starts with it, i.e. sent by the gateway about to be
	// killed.
	freezePrefix string

	// frozen is set once a kill is decided: from then on the attempts
	// freezePrefix selects are not answered, so that those at the backend
	// are surely in flight when their gateway dies.
	frozen atomic.Bool
	// inFlight counts the attempts freezePrefix selects at the backend.
	inFlight atomic.Int32
	// genAfter is the UnixNano from which an attempt is of generation 2
	// (after the kill); 0 before.
	genAfter atomic.Int64

	mu         sync.Mutex
	attempts   map[string][]*backendAttempt // by Idempotency-Key
	answeredAt map[string]time.Time         // Idempotency-Key -> its first 2xx
	order      map[string][]int             // customer -> n of the events answered 2xx, in order
	bad        []string                     // attempts the backend could not read
}

// newFanBackend starts the backend of destination name on loopback.
func newFanBackend(t *testing.T, name string, hold time.Duration, freezePrefix string) *fanBackend {
	b := &fanBackend{name: name, up: newUpstream(t), hold: hold, freezePrefix: freezePrefix,
		attempts: map[string][]*backendAttempt{}, answeredAt: map[string]time.Time{}, order: map[string][]int{}}
	b.up.Handle = b.handle
	return b
}

// url is the upstream of this destination for the gateway whose attempts
// come under prefix ("" or, say, "/a").
func (b *fanBackend) url(prefix string) string { return b.up.Srv.URL + prefix + "/" + b.name }

func (b *fanBackend) handle(w http.ResponseWriter, r *http.Request, n int64) {
	selected := strings.HasPrefix(r.URL.Path, b.freezePrefix)
	if selected {
		b.inFlight.Add(1)
		defer b.inFlight.Add(-1)
	}
	a := &backendAttempt{eventID: r.Header.Get(gateway.HeaderEventID), start: time.Now(), gen: 1}
	a.attempt, _ = strconv.Atoi(r.Header.Get(gateway.HeaderAttempt))
	if ga := b.genAfter.Load(); ga != 0 && a.start.UnixNano() >= ga {
		a.gen = 2
	}
	var ev struct {
		N        int    `json:"n"`
		Customer string `json:"customer"`
	}
	key := r.Header.Get(gateway.HeaderIdempotencyKey)
	b.mu.Lock()
	if err := json.Unmarshal(b.up.Received()[n-1].Body, &ev); err != nil || !strings.HasSuffix(key, "#"+b.name) {
		b.bad = append(b.bad, fmt.Sprintf("key %q body %q: %v", key, b.up.Received()[n-1].Body, err))
	}
	b.attempts[key] = append(b.attempts[key], a)
	b.mu.Unlock()
	select {
	case <-time.After(b.hold):
	case <-r.Context().Done():
	}
	if selected && b.frozen.Load() && r.Context().Err() == nil {
		<-r.Context().Done() // the kill is coming: no answer
	}
	select {
	case <-r.Context().Done(): // the gateway died under it
		b.mu.Lock()
		a.end = time.Now()
		b.mu.Unlock()
	default:
		w.WriteHeader(http.StatusOK)
		b.mu.Lock()
		a.end, a.answered = time.Now(), true
		if _, ok := b.answeredAt[key]; !ok {
			b.answeredAt[key] = a.end
		}
		b.order[ev.Customer] = append(b.order[ev.Customer], ev.N)
		b.mu.Unlock()
	}
}

// answered returns how many keys the backend has answered 2xx at least once.
func (b *fanBackend) answered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.answeredAt)
}

// total returns how many attempts the backend has received.
func (b *fanBackend) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, as := range b.attempts {
		n += len(as)
	}
	return n
}

// waitWithin polls cond every 20ms until it holds, failing the test after
// bound: Eventually with a bound of the test's own, for drains longer than
// its 30 seconds.
func waitWithin(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
	}
}

// fanStream is a stream of events being sent (startFanStream): an event
// is accepted when answered 202 and not a replay; failed holds why an
// event was not. wg waits for the senders.
type fanStream struct {
	accepted  []atomic.Bool
	acceptedN atomic.Int32
	failed    []string
	wg        sync.WaitGroup
	mu        sync.Mutex
	// redelivered counts the re-deliveries answered 202 and replayed;
	// redeliveryErrs holds those answered otherwise.
	redelivered    int
	redeliveryErrs []string
}

// startFanStream sends events 0 to events-1 from senders goroutines, each
// pausing pace after a send, each event n to the gateway urlOf(n) gives,
// and then, if again is set and the first send was accepted, once more to
// again(n) (a provider's re-delivery). It returns at once.
func startFanStream(c *http.Client, events, senders int, pace time.Duration, urlOf, again func(n int) string) *fanStream {
	s := &fanStream{accepted: make([]atomic.Bool, events), failed: make([]string, events)}
	var next atomic.Int32
	for range senders {
		s.wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= events {
					return
				}
				id, _, body := fanEvent(n)
				status, replayed, err := sendEvent(c, urlOf(n), id, body)
				switch {
				case err != nil:
					s.failed[n] = err.Error()
				case status != http.StatusAccepted || replayed:
					s.failed[n] = fmt.Sprintf("answered %d, replayed %v", status, replayed)
				default:
					s.accepted[n].Store(true)
					s.acceptedN.Add(1)
					if again != nil {
						status, replayed, err := sendEvent(c, again(n), id, body)
						s.mu.Lock()
						if err == nil && status == http.StatusAccepted && replayed {
							s.redelivered++
						} else {
							s.redeliveryErrs = append(s.redeliveryErrs, fmt.Sprintf("%s to %s: %d replayed=%v %v", id, again(n), status, replayed, err))
						}
						s.mu.Unlock()
					}
				}
				time.Sleep(pace)
			}
		})
	}
	return s
}

// fanKill waits until killAfter events are accepted, freezes the attempts
// of victim's gateway at every backend, waits until one of them is at a
// backend, kills victim with SIGKILL and waits for it to exit and for its
// attempts to leave the backends. It returns when the kill was sent.
func fanKill(t *testing.T, victim *proc, s *fanStream, killAfter int, backends []*fanBackend) time.Time {
	t.Helper()
	waitWithin(t, fmt.Sprintf("%d events answered 202", killAfter), 60*time.Second, func() bool { return int(s.acceptedN.Load()) >= killAfter })
	for _, b := range backends {
		b.frozen.Store(true)
	}
	waitWithin(t, "an attempt at a backend to kill the gateway under", 30*time.Second, func() bool {
		for _, b := range backends {
			if b.inFlight.Load() > 0 {
				return true
			}
		}
		return false
	})
	killedAt := time.Now()
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t) //nolint:errcheck // killed
	// The dead process's attempts end at the backends (its connections
	// close) before anything is taken for after the kill.
	eventually(t, "the killed gateway's attempts ended at the backends", func() bool {
		for _, b := range backends {
			if b.inFlight.Load() != 0 {
				return false
			}
		}
		return true
	})
	now := time.Now().UnixNano()
	for _, b := range backends {
		b.frozen.Store(false)
		b.genAfter.Store(now)
	}
	return killedAt
}

// checkFanDelivered holds every backend to the filters and the kill: each
// (event, destination) the filters select reached its backend, once, or
// twice when its attempt was in flight at the kill (judgeAcrossKill), at
// most concurrency of them per destination; none they don't select ever
// did; and the backends got no key but those. It logs the repeats.
func checkFanDelivered(t *testing.T, events, concurrency int, backends []*fanBackend, runningAtKill map[string]bool, began, killedAt time.Time) {
	t.Helper()
	cut := 0
	for _, b := range backends {
		b.mu.Lock()
		for _, bad := range b.bad {
			t.Errorf("%s got an attempt it could not read: %s", b.name, bad)
		}
		var repeated, claimedOnly []string
		var settledLate time.Duration
		want := 0
		for n := range events {
			key := fanKey(n, b.name)
			_, typ, _ := fanEvent(n)
			as := b.attempts[key]
			if !fanWants(b.name, typ) {
				if len(as) != 0 {
					t.Errorf("%s (%s) reached %s %d times; its filter does not select it", key, typ, b.name, len(as))
				}
				continue
			}
			want++
			if len(as) == 0 {
				t.Errorf("%s (%s) never reached %s", key, typ, b.name)
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
		if len(b.attempts) > want {
			t.Errorf("%s got %d keys; want the %d of its events", b.name, len(b.attempts), want)
		}
		if len(repeated)+len(claimedOnly) > concurrency {
			t.Errorf("%s: %d events delivered again after the kill (%v) and %d claimed but not sent at the kill (%v): want at most its concurrency, %d, in flight",
				b.name, len(repeated), repeated, len(claimedOnly), claimedOnly, concurrency)
		}
		t.Logf("%s: %d events, %d attempts; %d repeated after the kill %v (unsettled answers up to %v before it), %d claimed but not sent at the kill %v",
			b.name, want, func() int {
				n := 0
				for _, as := range b.attempts {
					n += len(as)
				}
				return n
			}(), len(repeated), repeated, settledLate.Round(time.Millisecond), len(claimedOnly), claimedOnly)
		b.mu.Unlock()
	}
	if cut == 0 {
		t.Errorf("no attempt was at a backend when the gateway died: the kill did not meet attempts in flight")
	}
}

// fanExpected returns how many deliveries the filters select among events
// 0 to events-1, by destination.
func fanExpected(events int) map[string]int {
	want := map[string]int{}
	for n := range events {
		_, typ, _ := fanEvent(n)
		for _, name := range fanNames {
			if fanWants(name, typ) {
				want[name]++
			}
		}
	}
	return want
}

// fanAllAnswered reports whether each backend has answered each of its
// events.
func fanAllAnswered(backends []*fanBackend, want map[string]int) bool {
	for _, b := range backends {
		if b.answered() < want[b.name] {
			return false
		}
	}
	return true
}

// fanReplays sends every event again to url and requires each answer to
// be 202 replayed; then that every lane of g is empty and no backend got
// an attempt more: a replay queues nothing (a queued one would be
// delivered, counted by its backend, before its lane showed empty).
func fanReplays(t *testing.T, c *http.Client, g *proc, url string, events int, backends []*fanBackend) {
	t.Helper()
	// A backend counts an attempt before the gateway records its answer:
	// the lanes empty just after the last one.
	for _, name := range fanNames {
		eventually(t, "lane "+name+" empty before the replays", func() bool {
			q := queueState(t, g, "/webhooks/stripe#"+name)
			return q.Queued+q.Retrying+q.Running+q.Dead == 0
		})
	}
	before := make([]int, len(backends))
	for i, b := range backends {
		before[i] = b.total()
	}
	for n := range events {
		id, _, body := fanEvent(n)
		if status, replayed, err := sendEvent(c, url, id, body); err != nil || status != http.StatusAccepted || !replayed {
			t.Fatalf("%s sent again after the drain: %d replayed=%v %v; want 202 replayed", id, status, replayed, err)
		}
	}
	for _, name := range fanNames {
		if q := queueState(t, g, "/webhooks/stripe#"+name); q.Queued+q.Retrying+q.Running+q.Dead != 0 {
			t.Errorf("lane %s after the replays: %+v; want empty", q.Path, q)
		}
	}
	for i, b := range backends {
		if n := b.total(); n != before[i] {
			t.Errorf("%s got %d attempts during the replays; want none", b.name, n-before[i])
		}
	}
}

// A gateway process with issue 35's three destinations, killed with
// SIGKILL mid-drain (every backend slow, and frozen once the kill is
// decided) and restarted on the same SQLite file: each (event,
// destination) the filters select reaches its backend, none they don't
// select ever does, and an event a backend gets twice is only one whose
// attempt to it was in flight at the kill, at most the destination's
// concurrency of them, as TestQueueSIGKILLLosesNothing holds a single
// route to. Every event sent again after the drain is a replay that
// reaches nobody.
func TestDestinationsSIGKILLLosesNothing(t *testing.T) {
	const (
		events      = 200
		senders     = 12
		killAfter   = 70
		concurrency = 4 // each destination's
		backendTime = 50 * time.Millisecond
		pace        = 60 * time.Millisecond // ~200 events/s in all, past analytics' 80/s
	)
	backends := make([]*fanBackend, len(fanNames))
	var upstreams [3]string
	for i, name := range fanNames {
		backends[i] = newFanBackend(t, name, backendTime, "")
		upstreams[i] = backends[i].url("")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	path := writeConfig(t, dir, fanProcConfig(fmt.Sprintf("driver: sqlite, path: %q", db),
		fmt.Sprintf("concurrency: %d, backoff_min: 50ms, backoff_max: 200ms", concurrency), upstreams, [3]string{}))
	client := senderClient(t)

	gw := startProc(t, path)
	began := time.Now()
	url := gw.url("/webhooks/stripe")
	s := startFanStream(client, events, senders, pace, func(int) string { return url }, nil)
	killedAt := fanKill(t, gw, s, killAfter, backends)
	s.wg.Wait() // the rest of the stream fails: nothing listens
	// The attempts in flight at the kill: what the file says.
	runningAtKill := runningEvents(t, db)
	for _, name := range fanNames {
		n := 0
		for key := range runningAtKill {
			if strings.HasSuffix(key, "#"+name) {
				n++
			}
		}
		if n > concurrency {
			t.Errorf("%d of %s's events running in the file after the kill; want at most its concurrency, %d", n, name, concurrency)
		}
	}
	if len(runningAtKill) == 0 {
		t.Errorf("no event running in the file after the kill: the kill was not mid-drain")
	}
	var notAccepted []int
	for n := range events {
		if !s.accepted[n].Load() {
			notAccepted = append(notAccepted, n)
			if s.failed[n] == "" {
				t.Fatalf("evt-%d was neither answered 202 nor failed", n)
			}
		}
	}
	if len(notAccepted) == 0 {
		t.Fatalf("every event was answered 202 before the kill took effect: the kill was not in the middle of the stream")
	}
	atKill := int(s.acceptedN.Load())

	gw = startProc(t, path)
	url = gw.url("/webhooks/stripe")
	replayed := 0
	for _, n := range notAccepted { // the provider's retries
		id, _, body := fanEvent(n)
		status, rep, err := sendEvent(client, url, id, body)
		if err != nil || status != http.StatusAccepted {
			t.Fatalf("%s sent again after the restart: %d %v; want 202 (first send: %s)", id, status, err, s.failed[n])
		}
		if rep {
			replayed++ // kept at the kill, but the 202 never reached the sender
		}
	}
	want := fanExpected(events)
	eventually(t, "every (event, destination) the filters select answered 2xx", func() bool { return fanAllAnswered(backends, want) })
	drained := time.Since(began)
	fanReplays(t, client, gw, url, events, backends)
	checkFanDelivered(t, events, concurrency, backends, runningAtKill, began, killedAt)
	t.Logf("SIGKILL after %d of %d events answered 202 (%v in); %d running in the file at the kill; %d sent again after the restart (%d replayed: kept, their 202 lost); deliveries %v, all answered %v after the stream began",
		atKill, events, killedAt.Sub(began).Round(time.Millisecond), len(runningAtKill), len(notAccepted), replayed, want, drained.Round(time.Millisecond))
}

// Two gateway processes, A and B, on one PostgreSQL with issue 35's three
// destinations (each gateway's upstreams under a path of its own, so the
// backends know who sent an attempt). Events go alternately to A and B,
// each re-delivered to the other, which answers it replayed. A is killed
// with SIGKILL mid-drain, its attempts frozen at the backends: B delivers
// every (event, destination) the filters select, none they don't, and an
// event a backend gets twice is only one A's attempt to it was in flight
// at the kill (its lease in the table, taken over by B once it lapsed), at
// most the destination's concurrency of them.
func TestDestinationsTwoGatewaysOnPostgres(t *testing.T) {
	pool := pgtest.Pool(t) // skips without IDEMHOOK_POSTGRES_URL
	table := pgtest.Table(t, pool, "fanproc")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, suffix := range []string{"_queue_attempts", "_queue_routes", "_queue"} {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{table + suffix}.Sanitize()); err != nil {
				t.Errorf("dropping %s%s: %v", table, suffix, err)
			}
		}
	})
	const (
		events      = 160
		senders     = 8
		killAfter   = 60
		concurrency = 4 // each destination's, on each gateway
		backendTime = 50 * time.Millisecond
		pace        = 60 * time.Millisecond
	)
	backends := make([]*fanBackend, len(fanNames))
	var upA, upB [3]string
	for i, name := range fanNames {
		backends[i] = newFanBackend(t, name, backendTime, "/a/")
		upA[i], upB[i] = backends[i].url("/a"), backends[i].url("/b")
	}
	storeLine := fmt.Sprintf("driver: postgres, url: \"${%s}\", table: %s, timeout: 2s", pgtest.EnvVar, table)
	// attempt_timeout 2s: a dead gateway's lease lapses 17s after its claim.
	routeQueue := fmt.Sprintf("concurrency: %d, attempt_timeout: 2s, backoff_min: 50ms, backoff_max: 200ms", concurrency)
	a := startProc(t, writeConfig(t, t.TempDir(), fanProcConfig(storeLine, routeQueue, upA, [3]string{})))
	b := startProc(t, writeConfig(t, t.TempDir(), fanProcConfig(storeLine, routeQueue, upB, [3]string{})))
	gws := []*proc{a, b}
	client := senderClient(t)

	began := time.Now()
	s := startFanStream(client, events, senders, pace,
		func(n int) string { return gws[n%2].url("/webhooks/stripe") },
		func(n int) string { return gws[(n+1)%2].url("/webhooks/stripe") })
	aWorker := func() string { host, _ := os.Hostname(); return fmt.Sprintf("%s/%d", host, a.cmd.Process.Pid) }()
	killedAt := fanKill(t, a, s, killAfter, backends)
	// A's leases in the table: the attempts in flight at its death. B takes
	// none over before it lapses, 17s after its claim.
	runningAtKill := map[string]bool{}
	rows, err := pool.Query(t.Context(), `SELECT store_key FROM `+pgx.Identifier{table + "_queue"}.Sanitize()+` WHERE state = 1 AND lease_by = $1`, aWorker)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key []byte
		if err := rows.Scan(&key); err != nil {
			t.Fatal(err)
		}
		runningAtKill[string(key)] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range fanNames {
		n := 0
		for key := range runningAtKill {
			if strings.HasSuffix(key, "#"+name) {
				n++
			}
		}
		if n > concurrency {
			t.Errorf("%d of %s's events leased by the killed gateway; want at most its concurrency, %d", n, name, concurrency)
		}
	}
	if len(runningAtKill) == 0 {
		t.Errorf("no event leased by A after its kill: the kill was not mid-drain")
	}
	s.wg.Wait()
	// The re-deliveries: each to the gateway that did not accept the event,
	// a replay, but for those to A once it was dead.
	dead := 0
	for _, e := range s.redeliveryErrs {
		if !strings.Contains(e, a.Listen) {
			t.Errorf("a re-delivery to B: %s; want 202 replayed", e)
		}
		dead++
	}
	if s.redelivered == 0 {
		t.Errorf("no re-delivery answered replayed")
	}
	atKill := int(s.acceptedN.Load())
	url := b.url("/webhooks/stripe")
	var notAccepted []int
	replayed := 0
	for n := range events {
		if s.accepted[n].Load() {
			continue
		}
		notAccepted = append(notAccepted, n)
		if s.failed[n] == "" {
			t.Fatalf("evt-%d was neither answered 202 nor failed", n)
		}
		id, _, body := fanEvent(n)
		// The provider's retries, to B. A may have died holding the event's
		// claim (between its claim and its accept): B waits for that claim
		// and answers once its lease lapses, as it does for any key a dead
		// gateway held; until then the provider's request times out or is
		// refused, and it sends again.
		var (
			status int
			rep    bool
			err    error
		)
		waitWithin(t, id+" accepted by B after A's kill", 90*time.Second, func() bool {
			status, rep, err = sendEvent(client, url, id, body)
			return err == nil && status == http.StatusAccepted
		})
		if rep {
			replayed++
		}
	}
	if len(notAccepted) == 0 {
		t.Errorf("every event was answered 202 before A's kill took effect: the kill was not in the middle of the stream")
	}
	want := fanExpected(events)
	// A's leases lapse 17s after their claim; then B delivers them.
	waitWithin(t, "B delivers every (event, destination) the filters select", 90*time.Second, func() bool { return fanAllAnswered(backends, want) })
	drained := time.Since(began)
	fanReplays(t, client, b, url, events, backends)
	checkFanDelivered(t, events, concurrency, backends, runningAtKill, began, killedAt)
	t.Logf("A killed after %d of %d events answered 202 (%v in); %d leased by A at its death; %d re-deliveries replayed, %d to A after its death; %d sent to B after the kill (%d replayed); deliveries %v, all answered %v after the stream began",
		atKill, events, killedAt.Sub(began).Round(time.Millisecond), len(runningAtKill), s.redelivered, dead, len(notAccepted), replayed, want, drained.Round(time.Millisecond))
}

// The soak (behind -faults): billing refuses connections (tcpProxy down)
// for -faults.destinations-outage while crm answers each attempt in 200ms
// and analytics at once, under a steady stream of 10 events a second for
// the whole outage and 10 seconds after it. analytics gets each event
// soon after its accept (its lag, p50 and p99, is reported and bounded);
// crm keeps up; once billing is back it gets each of its events once, each
// customer's in the order accepted (its order_by), and every other
// destination each of its events once.
//
//	go test ./cmd/idemhook -count=1 -run TestDestinationsSoakOneDown -v -faults -faults.destinations-outage 3m
func TestDestinationsSoakOneDown(t *testing.T) {
	if !*faultsFlag {
		t.Skip("the destinations soak runs with -faults (go test ./cmd/idemhook -run TestDestinationsSoakOneDown -v -faults -faults.destinations-outage 3m)")
	}
	const (
		perSecond = 10
		after     = 10 * time.Second // of stream once billing is back
		// lagBound bounds analytics' p99 lag: it shares nothing with billing
		// but the store.
		lagBound   = 2 * time.Second
		drainBound = 5 * time.Minute
	)
	outage := *faultsDestinationsOutage
	billing := newFanBackend(t, "billing", 0, "")
	crm := newFanBackend(t, "crm", 200*time.Millisecond, "")
	analytics := newFanBackend(t, "analytics", 0, "")
	backends := []*fanBackend{billing, crm, analytics}
	proxy := newTCPProxy(t, strings.TrimPrefix(billing.up.Srv.URL, "http://"))
	proxy.down() // refused from the start
	dir := t.TempDir()
	path := writeConfig(t, dir, fanProcConfig(fmt.Sprintf("driver: sqlite, path: %q", filepath.Join(dir, "state.db")),
		"concurrency: 4, backoff_min: 100ms, backoff_max: 5s",
		[3]string{"http://" + proxy.addr + "/billing", crm.url(""), analytics.url("")},
		[3]string{`order_by: "json:customer"`, "", ""}))
	gw := startProc(t, path)
	client := senderClient(t)
	url := gw.url("/webhooks/stripe")

	began := time.Now()
	events := int((outage + after) / (time.Second / perSecond))
	acceptedAt := make([]time.Time, events)
	var failures []string
	var back time.Time // when billing listened again
	tick := time.NewTicker(time.Second / perSecond)
	for n := range events {
		if back.IsZero() && time.Since(began) >= outage {
			// Before billing returns: its lane holds each of its events so
			// far, its backend taken for down.
			l := queueState(t, gw, "/webhooks/stripe#billing")
			if pending := int(l.Queued + l.Retrying + l.Running); !l.BackendDown || pending != fanExpected(n)["billing"] {
				t.Errorf("billing's lane at the end of the outage: %+v; want its backend down and its %d events pending", l, fanExpected(n)["billing"])
			}
			proxy.up()
			back = time.Now()
		}
		id, _, body := fanEvent(n)
		status, replayed, err := sendEvent(client, url, id, body)
		if err != nil || status != http.StatusAccepted || replayed {
			failures = append(failures, fmt.Sprintf("%s: %d replayed=%v %v", id, status, replayed, err))
		}
		acceptedAt[n] = time.Now()
		<-tick.C
	}
	tick.Stop()
	if len(failures) > 0 {
		t.Fatalf("%d events not answered 202: %v", len(failures), failures[:min(len(failures), 10)])
	}
	if back.IsZero() {
		t.Fatalf("the stream ended within the outage: billing never came back")
	}
	want := fanExpected(events)
	waitWithin(t, "every destination has its events", drainBound, func() bool { return fanAllAnswered(backends, want) })
	fanReplays(t, client, gw, url, events, backends)

	for _, b := range backends {
		b.mu.Lock()
		for _, bad := range b.bad {
			t.Errorf("%s got an attempt it could not read: %s", b.name, bad)
		}
		if len(b.answeredAt) != want[b.name] {
			t.Errorf("%s answered %d keys; want %d", b.name, len(b.answeredAt), want[b.name])
		}
		got := 0
		for _, ns := range b.order {
			got += len(ns)
		}
		if got != want[b.name] {
			t.Errorf("%s answered %d deliveries; want %d, each of its events once", b.name, got, want[b.name])
		}
		for n := range events {
			_, typ, _ := fanEvent(n)
			if _, ok := b.answeredAt[fanKey(n, b.name)]; ok != fanWants(b.name, typ) {
				t.Errorf("%s delivered to %s: %v; its filter selects it: %v", fanKey(n, b.name), b.name, ok, fanWants(b.name, typ))
			}
		}
		b.mu.Unlock()
	}
	billing.mu.Lock()
	var drained time.Time // the last 2xx of the events accepted while billing was down
	backlog := 0
	for n := range events {
		if at, ok := billing.answeredAt[fanKey(n, "billing")]; ok && acceptedAt[n].Before(back) {
			backlog++
			if at.After(drained) {
				drained = at
			}
		}
	}
	if backlog == 0 {
		t.Errorf("no billing event was accepted while it was down: the outage did not meet the stream")
	}
	for cus, ns := range billing.order {
		if !slices.IsSorted(ns) {
			t.Errorf("billing got %s's events in the order %v; want the order accepted", cus, ns)
		}
	}
	billing.mu.Unlock()
	analytics.mu.Lock()
	lags := make([]time.Duration, 0, events)
	for n := range events {
		lags = append(lags, analytics.answeredAt[fanKey(n, "analytics")].Sub(acceptedAt[n]))
	}
	analytics.mu.Unlock()
	slices.Sort(lags)
	p50, p99, worst := lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1]
	if p99 > lagBound {
		t.Errorf("analytics' p99 lag %v (p50 %v, max %v); want under %v while billing is down", p99, p50, worst, lagBound)
	}
	crm.mu.Lock()
	var crmLags []time.Duration
	for n := range events {
		if at, ok := crm.answeredAt[fanKey(n, "crm")]; ok {
			crmLags = append(crmLags, at.Sub(acceptedAt[n]))
		}
	}
	crm.mu.Unlock()
	slices.Sort(crmLags)
	t.Logf("%d events over %v (%d/s), billing refusing for %v: analytics' lag accept->2xx p50 %v, p99 %v, max %v; crm's (200ms a request) p50 %v, p99 %v; "+
		"billing's %d events of the outage drained %v after it came back; %d, %d, %d deliveries to billing, crm, analytics",
		events, acceptedAt[events-1].Sub(began).Round(time.Millisecond), perSecond, outage, p50.Round(time.Microsecond), p99.Round(time.Microsecond), worst.Round(time.Microsecond),
		crmLags[len(crmLags)/2].Round(time.Millisecond), crmLags[len(crmLags)*99/100].Round(time.Millisecond),
		backlog, drained.Sub(back).Round(time.Millisecond), want["billing"], want["crm"], want["analytics"])
}
