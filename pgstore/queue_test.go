package pgstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/queue"
	"github.com/idemhook/idemhook/queue/queuetest"
)

// newQueue returns a store on a table of its own and its queue, whose
// tables are dropped when tb ends.
func newQueue(tb testing.TB, pool *pgxpool.Pool, cfg pgstore.Config) (*pgstore.Store, *pgstore.Queue) {
	tb.Helper()
	if cfg.Table == "" {
		cfg.Table = pgtest.Table(tb, pool, "idemhook_qtest")
	}
	dropQueueTables(tb, pool, cfg.Table)
	s := newStore(tb, pool, cfg)
	q, err := s.Queue(tb.Context())
	if err != nil {
		tb.Fatalf("Store.Queue: %v", err)
	}
	return s, q
}

// dropQueueTables drops the queue's tables of the keys' table when tb ends.
func dropQueueTables(tb testing.TB, pool *pgxpool.Pool, table string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, suffix := range []string{"_queue_attempts", "_queue_routes", "_queue"} {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{table + suffix}.Sanitize()); err != nil {
				tb.Errorf("dropping test table %s%s: %v", table, suffix, err)
			}
		}
	})
}

// TestQueueConformance runs the queue.Engine suite against a real
// PostgreSQL.
func TestQueueConformance(t *testing.T) {
	pool := pgtest.Pool(t)
	queuetest.Run(t, queuetest.Harness{
		New: func(tb testing.TB) (idemhook.Store, queue.Engine) { return newQueue(tb, pool, pgstore.Config{}) },
	})
}

// TestQueueConformanceBatch runs it on a store with Config.Batch: Accept's
// transaction goes around the batcher.
func TestQueueConformanceBatch(t *testing.T) {
	pool := pgtest.Pool(t)
	queuetest.Run(t, queuetest.Harness{
		New: func(tb testing.TB) (idemhook.Store, queue.Engine) {
			return newQueue(tb, pool, pgstore.Config{Batch: true})
		},
	})
}

// accept claims a fresh key in s and accepts an event for route on it.
func accept(tb testing.TB, s *pgstore.Store, q *pgstore.Queue, route, order string) *queue.Event {
	tb.Helper()
	key := "idem:pgqueue:" + rand.Text()
	claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
	if got, err := s.Claim(tb.Context(), key, claim, time.Minute); err != nil || got != nil {
		tb.Fatalf("Claim(%s) = %v, %v; want a new claim", key, got, err)
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
	ev := &queue.Event{Route: route, Key: key, OrderKey: order, Method: http.MethodPost, Target: "/hook",
		Body: []byte(key), ReceivedAt: time.Now()}
	if err := q.Accept(tb.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev); err != nil {
		tb.Fatalf("Accept: %v", err)
	}
	return ev
}

// TestQueueTwoGateways has two pools (two gateways) claim 200 events with
// a lease short enough to lapse under the race detector, extend it while
// they hold an event, and settle it delivered. No event is ever held by
// both at once, and each is delivered exactly once.
func TestQueueTwoGateways(t *testing.T) {
	poolA, poolB := pgtest.Pool(t), pgtest.Pool(t)
	table := pgtest.Table(t, poolA, "idemhook_qtest")
	sA, qA := newQueue(t, poolA, pgstore.Config{Table: table})
	sB := newStore(t, poolB, pgstore.Config{Table: table})
	qB, err := sB.Queue(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const events, lease = 200, 150 * time.Millisecond
	route := "two-" + strings.ToLower(rand.Text()[:8])
	// Half the events are there when the gateways start, the other half
	// arrive while they deliver. A third of them are in ordered groups, so
	// that heads move between the gateways, and accepts race the delivery
	// of their group's last event.
	groupOf := map[int64]string{}
	var groupMu sync.Mutex
	acceptOne := func(i int) {
		order := ""
		if i%3 == 0 {
			order = fmt.Sprint("g", i%4)
		}
		ev := accept(t, sA, qA, route, order)
		groupMu.Lock()
		groupOf[ev.ID] = order
		groupMu.Unlock()
	}
	for i := range events / 2 {
		acceptOne(i)
	}

	// An attempt holds its event from its Claim to its last successful
	// fenced write. Two attempts of one event overlap when one was claimed
	// before the other's successful write was made: latest records, for
	// each event, the highest attempt any Claim has returned.
	var (
		mu         sync.Mutex
		latest     = map[int64]int{}
		delivered  = map[int64]int{}
		superseded int
		overlaps   []string
	)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// fenced runs a fenced write of ev's attempt and reports an overlap
	// when it succeeded although a later attempt had been claimed before it
	// started.
	fenced := func(worker, what string, ev *queue.Event, write func() error) error {
		mu.Lock()
		before := latest[ev.ID]
		mu.Unlock()
		err := write()
		if err == nil && before > ev.Attempt {
			mu.Lock()
			overlaps = append(overlaps, fmt.Sprintf("%s's %s of event %d attempt %d succeeded after attempt %d was claimed", worker, what, ev.ID, ev.Attempt, before))
			mu.Unlock()
		}
		return err
	}
	var (
		wg        sync.WaitGroup
		lastOf    = map[string]int64{} // group → the last event delivered
		disorders []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := events / 2; i < events; i++ {
			acceptOne(i)
			time.Sleep(time.Millisecond)
		}
	}()
	for g, eng := range map[string]*pgstore.Queue{"A": qA, "B": qB} {
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				worker := fmt.Sprint(g, w)
				for ctx.Err() == nil {
					evs, err := eng.Claim(ctx, route, 4, lease, worker)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("%s: Claim: %v", worker, err)
						}
						return
					}
					if len(evs) == 0 {
						mu.Lock()
						all := len(delivered) == events
						mu.Unlock()
						if all {
							return
						}
						time.Sleep(10 * time.Millisecond)
						continue
					}
					mu.Lock()
					for _, ev := range evs {
						if ev.Attempt <= latest[ev.ID] {
							overlaps = append(overlaps, fmt.Sprintf("%s claimed event %d at attempt %d, not above %d", worker, ev.ID, ev.Attempt, latest[ev.ID]))
						}
						latest[ev.ID] = ev.Attempt
					}
					mu.Unlock()
					for i, ev := range evs {
						// Renew the lease while "delivering", as the
						// dispatcher does; now and then stall a first
						// attempt past it, so that the other gateway takes
						// the event over.
						if err := fenced(worker, "Extend", ev, func() error { return eng.Extend(ctx, ev.Token(), lease) }); err != nil && !errors.Is(err, queue.ErrSuperseded) {
							t.Errorf("%s: Extend: %v", worker, err)
						}
						if ev.Attempt == 1 && ev.ID%11 == int64(i) {
							time.Sleep(2 * lease)
						}
						err := fenced(worker, "Settle", ev, func() error {
							return eng.Settle(ctx, queue.Settlement{Token: ev.Token(), Verdict: queue.Delivered,
								Attempt: queue.Attempt{Attempt: ev.Attempt, Started: time.Now(), Status: 200, Worker: worker}})
						})
						mu.Lock()
						switch {
						case err == nil:
							delivered[ev.ID]++
							groupMu.Lock()
							group := groupOf[ev.ID]
							groupMu.Unlock()
							if group != "" {
								if last := lastOf[group]; last > ev.ID {
									disorders = append(disorders, fmt.Sprintf("group %s: event %d delivered after %d", group, ev.ID, last))
								}
								lastOf[group] = ev.ID
							}
						case errors.Is(err, queue.ErrSuperseded):
							superseded++
						default:
							t.Errorf("%s: Settle: %v", worker, err)
						}
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		left, _ := qA.List(t.Context(), queue.Filter{Route: route})
		t.Fatalf("the gateways delivered %d of %d events before the deadline; left: %+v", len(delivered), events, left)
	}
	for _, o := range overlaps {
		t.Error(o)
	}
	for _, d := range disorders {
		t.Error(d)
	}
	if len(delivered) != events {
		t.Fatalf("%d events delivered; want %d", len(delivered), events)
	}
	for id, n := range delivered {
		if n != 1 {
			t.Errorf("event %d settled Delivered %d times; want once", id, n)
		}
	}
	t.Logf("%d settles were superseded by the other gateway's claim", superseded)
	if st, err := qB.Stats(t.Context(), route); err != nil || st.Pending() != 0 || st.Dead != 0 {
		t.Fatalf("Stats after delivery = %+v, %v; want an empty queue", st, err)
	}
}

// TestQueueStaleTokenOtherGateway lets gateway A's lease lapse, has gateway
// B claim the event, and checks that A's token can neither settle nor
// extend it, while A's attempt is still recorded for the operator.
func TestQueueStaleTokenOtherGateway(t *testing.T) {
	poolA, poolB := pgtest.Pool(t), pgtest.Pool(t)
	table := pgtest.Table(t, poolA, "idemhook_qtest")
	sA, qA := newQueue(t, poolA, pgstore.Config{Table: table})
	sB := newStore(t, poolB, pgstore.Config{Table: table})
	qB, err := sB.Queue(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	route := "stale-" + strings.ToLower(rand.Text()[:8])
	ev := accept(t, sA, qA, route, "")
	got, err := qA.Claim(t.Context(), route, 1, 100*time.Millisecond, "A")
	if err != nil || len(got) != 1 {
		t.Fatalf("A's Claim = %v, %v", got, err)
	}
	stale := got[0]
	var fresh *queue.Event
	for deadline := time.Now().Add(10 * time.Second); fresh == nil && time.Now().Before(deadline); {
		evs, err := qB.Claim(t.Context(), route, 1, time.Minute, "B")
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 1 {
			fresh = evs[0]
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if fresh == nil || fresh.ID != ev.ID || fresh.Attempt != stale.Attempt+1 {
		t.Fatalf("B's Claim after A's lease lapsed = %+v; want event %d at attempt %d", fresh, ev.ID, stale.Attempt+1)
	}
	for _, v := range []queue.Verdict{queue.Delivered, queue.Retry, queue.Kill} {
		err := qA.Settle(t.Context(), queue.Settlement{Token: stale.Token(), Verdict: v, NextAt: time.Now(), Reason: "stale",
			Attempt: queue.Attempt{Attempt: stale.Attempt, Started: time.Now(), Error: "timeout", Worker: "A"}})
		if !errors.Is(err, queue.ErrSuperseded) {
			t.Fatalf("A's stale Settle(%d) = %v; want ErrSuperseded", v, err)
		}
	}
	if err := qA.Extend(t.Context(), stale.Token(), time.Minute); !errors.Is(err, queue.ErrSuperseded) {
		t.Fatalf("A's stale Extend = %v; want ErrSuperseded", err)
	}
	sum, attempts, err := qB.Get(t.Context(), ev.ID)
	if err != nil || sum == nil || sum.State != queue.Running || sum.Attempt != fresh.Attempt {
		t.Fatalf("Get after the stale settles = %+v, %v; want B's attempt running", sum, err)
	}
	if len(attempts) != 1 || attempts[0].Attempt != stale.Attempt || attempts[0].Worker != "A" || attempts[0].Error != "timeout" {
		t.Fatalf("kept attempts = %+v; want A's superseded attempt recorded once", attempts)
	}
	if err := qB.Settle(t.Context(), queue.Settlement{Token: fresh.Token(), Verdict: queue.Delivered,
		Attempt: queue.Attempt{Attempt: fresh.Attempt, Started: time.Now(), Status: 200, Worker: "B"}}); err != nil {
		t.Fatalf("B's Settle: %v", err)
	}
	if sum, _, err := qA.Get(t.Context(), ev.ID); err != nil || sum != nil {
		t.Fatalf("Get after delivery = %+v, %v; want nil", sum, err)
	}
}

// TestQueueSchemaIsWhatQueueCreates checks that QueueSchema's SQL makes the
// tables Queue accepts with SkipCreate, and that without the tables
// SkipCreate fails with a message naming QueueSchema.
func TestQueueSchemaIsWhatQueueCreates(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "idemhook_qtest")
	dropQueueTables(t, pool, table)
	s := newStore(t, pool, pgstore.Config{Table: table})
	skip := newStore(t, pool, pgstore.Config{Table: table, SkipCreate: true})
	if _, err := skip.Queue(t.Context()); err == nil || !strings.Contains(err.Error(), "QueueSchema") {
		t.Fatalf("Queue with SkipCreate and no tables = %v; want an error naming QueueSchema", err)
	}
	sql, err := pgstore.QueueSchema(table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), sql); err != nil {
		t.Fatalf("running QueueSchema's SQL: %v\n%s", err, sql)
	}
	q, err := skip.Queue(t.Context())
	if err != nil {
		t.Fatalf("Queue with SkipCreate after QueueSchema: %v", err)
	}
	route := "schema-" + strings.ToLower(rand.Text()[:8])
	ev := accept(t, s, q, route, "o")
	if evs, err := q.Claim(t.Context(), route, 1, time.Minute, "w"); err != nil || len(evs) != 1 || evs[0].ID != ev.ID {
		t.Fatalf("Claim on QueueSchema's tables = %v, %v", evs, err)
	}
	if _, err := pgstore.QueueSchema(strings.Repeat("k", 49)); err == nil || !strings.Contains(err.Error(), "at most 48") {
		t.Fatalf("QueueSchema of a 49-character table = %v; want a length error", err)
	}
}

// TestQueueAddsTheFenceColumn opens the queue on tables made before events
// had a fence: the column is added, and the events carry fences from then
// on.
func TestQueueAddsTheFenceColumn(t *testing.T) {
	pool := pgtest.Pool(t)
	s, _ := newQueue(t, pool, pgstore.Config{})
	events := pgx.Identifier{s.Table() + "_queue"}.Sanitize()
	if _, err := pool.Exec(t.Context(), `ALTER TABLE `+events+` DROP COLUMN fence`); err != nil {
		t.Fatal(err)
	}
	q, err := s.Queue(t.Context())
	if err != nil {
		t.Fatalf("Queue on tables without the fence column: %v", err)
	}
	route := "fence-" + strings.ToLower(rand.Text()[:8])
	ev := accept(t, s, q, route, "")
	if evs, err := q.Claim(t.Context(), route, 1, time.Minute, "w"); err != nil || len(evs) != 1 || evs[0].ID != ev.ID || evs[0].Fence == 0 {
		t.Fatalf("Claim = %+v, %v; want the event with a fence", evs, err)
	}
}

// TestQueueGroupHeadRace delivers a group's only event while the group's
// next event is accepted, many times over: whichever commits first, the
// new event must become the group's head and be claimable, or the group
// would be stuck for good.
func TestQueueGroupHeadRace(t *testing.T) {
	pool := pgtest.Pool(t)
	s, q := newQueue(t, pool, pgstore.Config{})
	route := "race-" + strings.ToLower(rand.Text()[:8])
	claimOne := func(want int64) *queue.Event {
		t.Helper()
		evs, err := q.Claim(t.Context(), route, 10, time.Minute, "w")
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].ID != want {
			t.Fatalf("Claim = %v; want only event %d, the group's head", evs, want)
		}
		return evs[0]
	}
	held := claimOne(accept(t, s, q, route, "g").ID)
	for range 150 {
		var (
			wg   sync.WaitGroup
			next *queue.Event
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := q.Settle(t.Context(), queue.Settlement{Token: held.Token(), Verdict: queue.Delivered,
				Attempt: queue.Attempt{Attempt: held.Attempt, Started: time.Now(), Status: 200}}); err != nil {
				t.Errorf("Settle: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			next = accept(t, s, q, route, "g")
		}()
		wg.Wait()
		if t.Failed() {
			return
		}
		held = claimOne(next.ID)
	}
}

// TestQueueBatchAcceptsStayApart sends 64 accepts at once to a store with
// Config.Batch, so that they share batches. Eight of them have lost their
// claim to another claimant: exactly those fail with ErrNotOwner, leave
// no event, and leave the other claim in place. The rest are each queued
// once (four of them running under their lease, as accepted), their keys
// hold the done record, and the queued ones are claimed exactly once.
func TestQueueBatchAcceptsStayApart(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "idemhook_qtest")
	s, q := newQueue(t, pool, pgstore.Config{Table: table, Batch: true})
	ctx := t.Context()
	route := "batch-" + strings.ToLower(rand.Text()[:8])
	const n = 64
	type call struct {
		key         string
		claim       *idemhook.Record
		ev          *queue.Event
		lost, lease bool
		err         error
	}
	calls := make([]*call, n)
	for i := range calls {
		c := &call{key: fmt.Sprintf("idem:pgbatch:%02d-%s", i, rand.Text()), lost: i%8 == 3, lease: i%16 == 5}
		c.claim = &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
		if got, err := s.Claim(ctx, c.key, c.claim, time.Minute); err != nil || got != nil {
			t.Fatalf("Claim(%s) = %v, %v; want a new claim", c.key, got, err)
		}
		if c.lost {
			// The claim is taken over: another claimant holds the key now.
			if _, err := s.Delete(ctx, c.key); err != nil {
				t.Fatal(err)
			}
			other := &idemhook.Record{State: idemhook.StatePending, Token: "other-" + rand.Text(), CreatedAt: time.Now()}
			if got, err := s.Claim(ctx, c.key, other, time.Minute); err != nil || got != nil {
				t.Fatalf("Claim(%s) by the other claimant = %v, %v", c.key, got, err)
			}
		}
		c.ev = &queue.Event{Route: route, Key: c.key, Method: http.MethodPost, Target: "/hook", Body: []byte(c.key), ReceivedAt: time.Now()}
		if c.lease {
			c.ev.Lease, c.ev.Worker = time.Minute, "accepting-worker"
		}
		calls[i] = c
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			<-start
			c.err = q.Accept(ctx, queue.Completion{Key: c.key, Claim: c.claim, Done: done, TTL: time.Hour}, c.ev)
		})
	}
	close(start)
	wg.Wait()

	queued := map[int64]string{}
	running := map[int64]string{}
	for _, c := range calls {
		rec, err := s.Get(ctx, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if c.lost {
			if !errors.Is(c.err, idemhook.ErrNotOwner) {
				t.Errorf("Accept(%s) with a lost claim = %v; want ErrNotOwner", c.key, c.err)
			}
			if rec == nil || !strings.HasPrefix(rec.Token, "other-") {
				t.Errorf("key %s after the failed accept holds %+v; want the other claimant's claim", c.key, rec)
			}
			continue
		}
		if c.err != nil {
			t.Errorf("Accept(%s) = %v; want nil", c.key, c.err)
			continue
		}
		if rec == nil || rec.State != idemhook.StateCompleted {
			t.Errorf("key %s after its accept holds %+v; want the done record", c.key, rec)
		}
		if c.lease {
			if c.ev.Attempt != 1 {
				t.Errorf("event of %s accepted with a lease has Attempt %d; want 1", c.key, c.ev.Attempt)
			}
			running[c.ev.ID] = c.key
		} else {
			queued[c.ev.ID] = c.key
		}
	}
	if t.Failed() {
		return
	}
	if len(queued) != n-8-4 || len(running) != 4 {
		t.Fatalf("%d queued and %d running distinct event ids; want %d and 4", len(queued), len(running), n-8-4)
	}

	// The table holds the accepted events and nothing of the failed ones.
	list, err := q.List(ctx, queue.Filter{Route: route, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(queued)+len(running) {
		t.Errorf("List has %d events; want %d", len(list), len(queued)+len(running))
	}
	for _, e := range list {
		switch {
		case queued[e.ID] == e.Key && e.State == queue.Queued && e.Attempt == 0:
		case running[e.ID] == e.Key && e.State == queue.Running && e.Attempt == 1:
		default:
			t.Errorf("listed event %d (key %s, state %v, attempt %d) is not one accepted so", e.ID, e.Key, e.State, e.Attempt)
		}
	}

	// Each queued event is claimed once; the running ones are held by
	// their lease.
	claimed := map[int64]int{}
	for range 3 {
		evs, err := q.Claim(ctx, route, n, time.Minute, "w")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			claimed[e.ID]++
		}
	}
	for id, key := range queued {
		if claimed[id] != 1 {
			t.Errorf("event %d (%s) claimed %d times; want once", id, key, claimed[id])
		}
		delete(claimed, id)
	}
	for id, times := range claimed {
		t.Errorf("event %d claimed %d times; it is not one of the queued events", id, times)
	}

	// The accepts shared transactions: events of one batch share its
	// now(), their next_at, so there are fewer distinct values than events.
	var distinct int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT next_at) FROM `+pgx.Identifier{table + "_queue"}.Sanitize()+
		` WHERE route = $1`, route).Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if distinct >= len(list) {
		t.Errorf("%d distinct next_at among %d events: no two accepts shared a batch", distinct, len(list))
	}
	t.Logf("%d accepts committed in %d transactions", len(list), distinct)
}

// TestQueuedAcceptIsOneRoundTrip counts, on the wire, what a queued accept
// sends to PostgreSQL beyond its claim, once the connection's statements
// are prepared: one round trip, ordered or not, with or without
// Config.Batch. The middleware reads nothing back after it (the gateway
// tells it the engine committed), so this is the whole accept.
func TestQueuedAcceptIsOneRoundTrip(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, order := range []string{"", "customer-1"} {
			t.Run(fmt.Sprintf("batch=%t/ordered=%t", batch, order != ""), func(t *testing.T) {
				pool, c := countedPool(t)
				s, q := newQueue(t, pool, pgstore.Config{Batch: batch})
				accept(t, s, q, "/rt", order) // prepares the statements
				key := "idem:pgqueue:" + rand.Text()
				claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
				if got, err := s.Claim(t.Context(), key, claim, time.Minute); err != nil || got != nil {
					t.Fatalf("Claim(%s) = %v, %v; want a new claim", key, got, err)
				}
				done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
				ev := &queue.Event{Route: "/rt", Key: key, OrderKey: order, Method: http.MethodPost, Target: "/hook",
					Body: []byte(key), ReceivedAt: time.Now()}
				c.reset()
				if err := q.Accept(t.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev); err != nil {
					t.Fatalf("Accept: %v", err)
				}
				if got := c.writes.Load(); got != 1 {
					c.mu.Lock()
					t.Errorf("accept: %d round trips (statements %v), want 1", got, c.sql)
					c.mu.Unlock()
				}
			})
		}
	}
}
