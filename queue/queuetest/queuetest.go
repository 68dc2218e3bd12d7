// Package queuetest is the conformance suite of queue.Engine: every engine
// of this module (the memory engine, sqlitestore's and pgstore's) passes it,
// and a third-party engine should too.
package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/queue"
)

// Harness makes the engines the suite tests.
type Harness struct {
	// New returns an empty engine and the store whose claims its Accept
	// completes. Engines that share a server may keep other tests' events;
	// the suite uses a fresh route name in every subtest. Required.
	New func(tb testing.TB) (idemhook.Store, queue.Engine)
}

// lease is the short lease the suite lets lapse; engines count time in
// milliseconds at least.
const lease = 300 * time.Millisecond

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("queuetest: Harness.New is nil")
	}
	tests := []struct {
		name string
		f    func(t *testing.T, s *suite)
	}{
		{"AcceptThenClaim", testAcceptThenClaim},
		{"AcceptNeedsTheClaim", testAcceptNeedsTheClaim},
		{"LeaseLapses", testLeaseLapses},
		{"SettleIsFenced", testSettleIsFenced},
		{"SupersededIsRecorded", testSupersededIsRecorded},
		{"AcceptRunning", testAcceptRunning},
		{"RetryAndKill", testRetryAndKill},
		{"Ordered", testOrdered},
		{"Pause", testPause},
		{"RedriveAndPurge", testRedriveAndPurge},
		{"Hasten", testHasten},
		{"AttemptsKept", testAttemptsKept},
		{"ListPages", testListPages},
		{"ConcurrentClaims", testConcurrentClaims},
		{"Fences", testFences},
		{"NoAnswer", testNoAnswer},
		{"NoAnswerThroughADispatcher", testNoAnswerDispatched},
		{"IDsNeverReused", testIDsNeverReused},
		{"AcceptAll", testAcceptAll},
		{"AcceptAllSharedRequest", testAcceptAllSharedRequest},
		{"AcceptAllOrdered", testAcceptAllOrdered},
		{"AcceptAllValidates", testAcceptAllValidates},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, eng := h.New(t)
			tc.f(t, &suite{t: t, st: st, eng: eng, route: "r-" + randHex(6)})
		})
	}
}

type suite struct {
	t     *testing.T
	st    idemhook.Store
	eng   queue.Engine
	route string
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func ctx(t *testing.T) context.Context { return t.Context() }

// accept claims a new key and accepts an event on it.
func (s *suite) accept(order string) *queue.Event {
	s.t.Helper()
	key := "idem:queuetest:" + randHex(8)
	claim := &idemhook.Record{State: idemhook.StatePending, Token: randHex(8), CreatedAt: time.Now()}
	if existing, err := s.st.Claim(ctx(s.t), key, claim, time.Minute); err != nil || existing != nil {
		s.t.Fatalf("Claim(%s) = %v, %v; want a new claim", key, existing, err)
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"accepted":true}`)}
	ev := &queue.Event{
		Route: s.route, Key: key, OrderKey: order, Method: http.MethodPost, Target: "/hook?x=1",
		Header:     http.Header{"Content-Type": {"application/json"}, "X-Two": {"a", "b"}},
		Body:       []byte(`{"id":"` + key + `"}`),
		ReceivedAt: time.Now().Truncate(time.Millisecond),
	}
	if err := s.eng.Accept(ctx(s.t), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev); err != nil {
		s.t.Fatalf("Accept: %v", err)
	}
	if ev.ID == 0 {
		s.t.Fatal("Accept left Event.ID 0")
	}
	return ev
}

func (s *suite) claim(n int, l time.Duration) []*queue.Event {
	s.t.Helper()
	evs, err := s.eng.Claim(ctx(s.t), s.route, n, l, "worker-"+s.route)
	if err != nil {
		s.t.Fatalf("Claim: %v", err)
	}
	return evs
}

func (s *suite) settle(ev *queue.Event, v queue.Verdict, next time.Time, reason string) error {
	return s.eng.Settle(ctx(s.t), queue.Settlement{Token: ev.Token(), Verdict: v, NextAt: next, Reason: reason,
		Attempt: queue.Attempt{Attempt: ev.Attempt, Started: time.Now(), Latency: time.Millisecond, Status: 503, Error: "", BodyHead: []byte("busy")}})
}

func (s *suite) stats() queue.Stats {
	s.t.Helper()
	st, err := s.eng.Stats(ctx(s.t), s.route)
	if err != nil {
		s.t.Fatalf("Stats: %v", err)
	}
	return st
}

func ids(evs []*queue.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func testAcceptThenClaim(t *testing.T, s *suite) {
	a, b := s.accept(""), s.accept("")
	if b.ID <= a.ID {
		t.Fatalf("IDs %d then %d: want increasing", a.ID, b.ID)
	}
	rec, err := s.st.Get(ctx(t), a.Key)
	if err != nil || rec == nil || rec.State != idemhook.StateCompleted || rec.Status != http.StatusAccepted {
		t.Fatalf("the key's record after Accept = %+v, %v; want the accept answer", rec, err)
	}
	if st := s.stats(); st.Queued != 2 || st.Pending() != 2 || st.Oldest.IsZero() || st.NextAt.IsZero() {
		t.Fatalf("Stats = %+v; want 2 queued with Oldest and NextAt", st)
	}
	evs := s.claim(10, time.Minute)
	if !slices.Equal(ids(evs), []int64{a.ID, b.ID}) {
		t.Fatalf("Claim = %v; want %v in order", ids(evs), []int64{a.ID, b.ID})
	}
	got := evs[0]
	if got.Attempt != 1 || got.Key != a.Key || got.Method != a.Method || got.Target != a.Target ||
		string(got.Body) != string(a.Body) || !slices.Equal(got.Header["X-Two"], []string{"a", "b"}) ||
		!got.ReceivedAt.Equal(a.ReceivedAt) || got.Route != s.route {
		t.Fatalf("claimed %+v; want the accepted event %+v at attempt 1", got, a)
	}
	if more := s.claim(10, time.Minute); len(more) != 0 {
		t.Fatalf("a second Claim got %v while the leases hold", ids(more))
	}
	if st := s.stats(); st.Running != 2 || st.Queued != 0 {
		t.Fatalf("Stats = %+v; want 2 running", st)
	}
	for _, ev := range evs {
		if err := s.settle(ev, queue.Delivered, time.Time{}, ""); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	if st := s.stats(); st.Pending() != 0 || st.Dead != 0 || !st.Oldest.IsZero() {
		t.Fatalf("Stats after delivery = %+v; want empty", st)
	}
	if sum, _, err := s.eng.Get(ctx(t), a.ID); err != nil || sum != nil {
		t.Fatalf("Get of a delivered event = %+v, %v; want nil", sum, err)
	}
}

func testAcceptNeedsTheClaim(t *testing.T, s *suite) {
	key := "idem:queuetest:" + randHex(8)
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "mine", CreatedAt: time.Now()}
	if _, err := s.st.Claim(ctx(t), key, claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	other := &idemhook.Record{State: idemhook.StatePending, Token: "not-mine", CreatedAt: claim.CreatedAt}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: 202}
	ev := &queue.Event{Route: s.route, Key: key, Method: "POST", Target: "/", ReceivedAt: time.Now()}
	err := s.eng.Accept(ctx(t), queue.Completion{Key: key, Claim: other, Done: done, TTL: time.Hour}, ev)
	if !errors.Is(err, idemhook.ErrNotOwner) {
		t.Fatalf("Accept with a claim not held = %v; want ErrNotOwner", err)
	}
	if st := s.stats(); st.Pending() != 0 {
		t.Fatalf("Stats = %+v; a refused Accept appended an event", st)
	}
	if rec, _ := s.st.Get(ctx(t), key); rec == nil || rec.State != idemhook.StatePending {
		t.Fatalf("the key after a refused Accept = %+v; want the claim still pending", rec)
	}
}

func testLeaseLapses(t *testing.T, s *suite) {
	a := s.accept("")
	first := s.claim(1, lease)
	if len(first) != 1 || first[0].Attempt != 1 {
		t.Fatalf("Claim = %+v; want attempt 1", first)
	}
	again := s.waitClaim(lease)
	if again.ID != a.ID || again.Attempt != 2 {
		t.Fatalf("after the lease lapsed Claim = id %d attempt %d; want id %d attempt 2", again.ID, again.Attempt, a.ID)
	}
}

// waitClaim claims until one event comes back, within a bound.
func (s *suite) waitClaim(l time.Duration) *queue.Event {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if evs := s.claim(1, l); len(evs) == 1 {
			return evs[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatal("no event became due within 10s")
	return nil
}

func testSettleIsFenced(t *testing.T, s *suite) {
	s.accept("")
	stale := s.claim(1, lease)[0]
	fresh := s.waitClaim(time.Minute)
	if err := s.settle(stale, queue.Delivered, time.Time{}, ""); !errors.Is(err, queue.ErrSuperseded) {
		t.Fatalf("Settle with the stale token = %v; want ErrSuperseded", err)
	}
	if err := s.eng.Extend(ctx(t), stale.Token(), time.Minute); !errors.Is(err, queue.ErrSuperseded) {
		t.Fatalf("Extend with the stale token = %v; want ErrSuperseded", err)
	}
	if st := s.stats(); st.Running != 1 {
		t.Fatalf("Stats = %+v; the stale settle changed the event", st)
	}
	if err := s.eng.Extend(ctx(t), fresh.Token(), time.Minute); err != nil {
		t.Fatalf("Extend with the live token: %v", err)
	}
	if err := s.settle(fresh, queue.Delivered, time.Time{}, ""); err != nil {
		t.Fatalf("Settle with the live token: %v", err)
	}
	if err := s.settle(fresh, queue.Delivered, time.Time{}, ""); !errors.Is(err, queue.ErrSuperseded) {
		t.Fatalf("a second Settle of one attempt = %v; want ErrSuperseded", err)
	}
}

// A superseded attempt is still recorded, for the operator, while its event
// is kept.
func testSupersededIsRecorded(t *testing.T, s *suite) {
	a := s.accept("")
	stale := s.claim(1, lease)[0]
	s.waitClaim(time.Minute)
	if err := s.settle(stale, queue.Retry, time.Now(), ""); !errors.Is(err, queue.ErrSuperseded) {
		t.Fatalf("Settle with the stale token = %v; want ErrSuperseded", err)
	}
	_, attempts, err := s.eng.Get(ctx(t), a.ID)
	if err != nil || !slices.ContainsFunc(attempts, func(x queue.Attempt) bool { return x.Attempt == stale.Attempt && x.Status == 503 }) {
		t.Fatalf("attempts %+v, %v; want the superseded attempt %d recorded", attempts, err, stale.Attempt)
	}
}

func testRetryAndKill(t *testing.T, s *suite) {
	a, b := s.accept(""), s.accept("")
	evs := s.claim(2, time.Minute)
	if err := s.settle(evs[0], queue.Retry, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	if err := s.settle(evs[1], queue.Kill, time.Time{}, "the backend answered 400, which is not retried"); err != nil {
		t.Fatal(err)
	}
	st := s.stats()
	if st.Retrying != 1 || st.Dead != 1 || st.Queued != 0 || st.Running != 0 {
		t.Fatalf("Stats = %+v; want 1 retrying, 1 dead", st)
	}
	if d := time.Until(st.NextAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("Stats.NextAt in %s; want the retry's hour", d)
	}
	if more := s.claim(10, time.Minute); len(more) != 0 {
		t.Fatalf("Claim got %v: a retry not yet due, or a dead event", ids(more))
	}
	sum, _, err := s.eng.Get(ctx(t), b.ID)
	if err != nil || sum == nil || sum.State != queue.Dead || sum.Reason != "the backend answered 400, which is not retried" || sum.Attempt != 1 || sum.LastStatus != 503 {
		t.Fatalf("Get(dead) = %+v, %v", sum, err)
	}
	sum, _, _ = s.eng.Get(ctx(t), a.ID)
	if sum == nil || sum.State != queue.Queued || sum.Attempt != 1 {
		t.Fatalf("Get(retrying) = %+v", sum)
	}
}

func testOrdered(t *testing.T, s *suite) {
	g1a, g2a, g1b, free, g1c := s.accept("g1"), s.accept("g2"), s.accept("g1"), s.accept(""), s.accept("g1")
	evs := s.claim(10, time.Minute)
	if !slices.Equal(ids(evs), []int64{g1a.ID, g2a.ID, free.ID}) {
		t.Fatalf("Claim = %v; want the heads of g1 and g2 and the unordered event %v", ids(evs), []int64{g1a.ID, g2a.ID, free.ID})
	}
	// A retry keeps the head's place: the group waits for it.
	if err := s.settle(evs[0], queue.Retry, time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	evs2 := s.claim(10, time.Minute)
	if !slices.Equal(ids(evs2), []int64{g1a.ID}) {
		t.Fatalf("after the head's retry Claim = %v; want the head %d again", ids(evs2), g1a.ID)
	}
	if err := s.settle(evs2[0], queue.Delivered, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	evs3 := s.claim(10, time.Minute)
	if !slices.Equal(ids(evs3), []int64{g1b.ID}) {
		t.Fatalf("after the head's delivery Claim = %v; want the next of g1, %d", ids(evs3), g1b.ID)
	}
	// A dead head holds its group back until redriven or purged.
	if err := s.settle(evs3[0], queue.Kill, time.Time{}, "refused"); err != nil {
		t.Fatal(err)
	}
	if more := s.claim(10, time.Minute); len(more) != 0 {
		t.Fatalf("Claim = %v past a dead head", ids(more))
	}
	if _, err := s.eng.Purge(ctx(t), queue.Filter{Route: s.route, IDs: []int64{g1b.ID}}); err != nil {
		t.Fatal(err)
	}
	if evs4 := s.claim(10, time.Minute); !slices.Equal(ids(evs4), []int64{g1c.ID}) {
		t.Fatalf("after the dead head was purged Claim = %v; want %d", ids(evs4), g1c.ID)
	}
}

func testPause(t *testing.T, s *suite) {
	if err := s.eng.SetPaused(ctx(t), s.route, true); err != nil {
		t.Fatal(err)
	}
	a := s.accept("")
	if st := s.stats(); !st.Paused || st.Queued != 1 {
		t.Fatalf("Stats = %+v; want paused with the event queued", st)
	}
	if evs := s.claim(10, time.Minute); len(evs) != 0 {
		t.Fatalf("Claim on a paused route = %v", ids(evs))
	}
	if err := s.eng.SetPaused(ctx(t), s.route, false); err != nil {
		t.Fatal(err)
	}
	if evs := s.claim(10, time.Minute); !slices.Equal(ids(evs), []int64{a.ID}) {
		t.Fatalf("Claim after resume = %v; want %d", ids(evs), a.ID)
	}
}

func testRedriveAndPurge(t *testing.T, s *suite) {
	a, b, c := s.accept(""), s.accept(""), s.accept("")
	evs := s.claim(3, time.Minute)
	for _, ev := range evs {
		if err := s.settle(ev, queue.Kill, time.Time{}, "status "+fmt.Sprint(ev.ID%2)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.eng.Redrive(ctx(t), queue.Filter{}); err == nil {
		t.Fatal("Redrive with no route: want an error")
	}
	n, err := s.eng.Redrive(ctx(t), queue.Filter{Route: s.route, IDs: []int64{a.ID}})
	if err != nil || n != 1 {
		t.Fatalf("Redrive(one) = %d, %v; want 1", n, err)
	}
	got := s.claim(10, time.Minute)
	if len(got) != 1 || got[0].ID != a.ID || got[0].Attempt != 2 || got[0].Base != 1 || got[0].Since.Before(a.ReceivedAt) {
		t.Fatalf("after redrive Claim = %+v; want %d at attempt 2 with Base 1", got, a.ID)
	}
	n, err = s.eng.Redrive(ctx(t), queue.Filter{Route: s.route, States: []queue.State{queue.Dead}, Reason: "status " + fmt.Sprint(b.ID%2)})
	if err != nil || n != 1 {
		t.Fatalf("Redrive(by reason) = %d, %v; want 1", n, err)
	}
	keys, err := s.eng.Purge(ctx(t), queue.Filter{Route: s.route, States: []queue.State{queue.Dead}})
	if err != nil || len(keys) != 1 || keys[0] != c.Key {
		t.Fatalf("Purge(dead) = %v, %v; want [%s]", keys, err, c.Key)
	}
	if st := s.stats(); st.Dead != 0 || st.Queued+st.Retrying != 1 || st.Running != 1 {
		t.Fatalf("Stats = %+v; want the redriven one queued and the claimed one running", st)
	}
	if keys, err := s.eng.Purge(ctx(t), queue.Filter{Route: s.route}); err != nil || len(keys) != 1 {
		t.Fatalf("Purge(all) = %v, %v; want the one not running", keys, err)
	}
}

func testHasten(t *testing.T, s *suite) {
	s.accept("")
	ev := s.claim(1, time.Minute)[0]
	if err := s.settle(ev, queue.Retry, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	n, err := s.eng.Hasten(ctx(t), s.route)
	if err != nil || n != 1 {
		t.Fatalf("Hasten = %d, %v; want 1", n, err)
	}
	if got := s.claim(1, time.Minute); len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("after Hasten Claim = %+v; want attempt 2 now", got)
	}
}

func testAttemptsKept(t *testing.T, s *suite) {
	a := s.accept("")
	const n = queue.KeptAttempts + 5
	for i := 1; i <= n; i++ {
		ev := s.claim(1, time.Minute)
		if len(ev) != 1 || ev[0].Attempt != i {
			t.Fatalf("claim %d = %+v", i, ev)
		}
		if err := s.eng.Settle(ctx(t), queue.Settlement{Token: ev[0].Token(), Verdict: queue.Retry, NextAt: time.Now(),
			Attempt: queue.Attempt{Attempt: i, Started: time.Now(), Latency: time.Duration(i) * time.Millisecond, Status: 500 + i, Error: fmt.Sprint("e", i), BodyHead: []byte(fmt.Sprint("b", i)), Worker: "w"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, attempts, err := s.eng.Get(ctx(t), a.ID)
	if err != nil || len(attempts) != queue.KeptAttempts {
		t.Fatalf("Get kept %d attempts, %v; want %d", len(attempts), err, queue.KeptAttempts)
	}
	if attempts[0].Attempt != 1 || attempts[len(attempts)-1].Attempt != n || attempts[len(attempts)-1].Status != 500+n ||
		string(attempts[len(attempts)-1].BodyHead) != fmt.Sprint("b", n) || attempts[0].Error != "e1" || attempts[0].Worker != "w" {
		t.Fatalf("kept attempts %+v ... %+v; want the first and the last", attempts[0], attempts[len(attempts)-1])
	}
	for i := 1; i < len(attempts); i++ {
		if attempts[i].Attempt <= attempts[i-1].Attempt {
			t.Fatalf("attempts out of order: %d after %d", attempts[i].Attempt, attempts[i-1].Attempt)
		}
	}
}

func testListPages(t *testing.T, s *suite) {
	var want []int64
	for range 5 {
		want = append(want, s.accept("").ID)
	}
	var got []int64
	f := queue.Filter{Route: s.route, Limit: 2}
	for {
		page, err := s.eng.List(ctx(t), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("List gave %d; want at most 2", len(page))
		}
		for _, p := range page {
			got = append(got, p.ID)
			if p.State != queue.Queued || p.Route != s.route {
				t.Fatalf("summary %+v", p)
			}
		}
		f.AfterID = page[len(page)-1].ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List pages = %v; want %v", got, want)
	}
}

func testConcurrentClaims(t *testing.T, s *suite) {
	const events, workers = 60, 6
	for range events {
		s.accept("")
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				evs, err := s.eng.Claim(ctx(t), s.route, 4, time.Minute, fmt.Sprint("w", w))
				if err != nil {
					t.Error(err)
					return
				}
				if len(evs) == 0 {
					return
				}
				mu.Lock()
				for _, e := range evs {
					seen[e.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != events {
		t.Fatalf("%d events claimed; want %d", len(seen), events)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("event %d claimed %d times under one lease", id, n)
		}
	}
}

// An event accepted with a lease is running its first attempt: not claimed
// while the lease holds, settled with its token, and claimed as attempt 2
// once the lease lapses.
func testAcceptRunning(t *testing.T, s *suite) {
	key := "idem:queuetest:" + randHex(8)
	claim := &idemhook.Record{State: idemhook.StatePending, Token: randHex(8), CreatedAt: time.Now()}
	if _, err := s.st.Claim(ctx(t), key, claim, time.Minute); err != nil {
		t.Fatal(err)
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
	ordered := &queue.Event{Route: s.route, Key: key, OrderKey: "g", Method: "POST", Target: "/", ReceivedAt: time.Now(), Lease: time.Minute}
	if err := s.eng.Accept(ctx(t), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ordered); err == nil {
		t.Fatal("Accept of an ordered event with a lease: want an error")
	}
	ev := &queue.Event{Route: s.route, Key: key, Method: "POST", Target: "/", Body: []byte("x"), ReceivedAt: time.Now(), Lease: lease, Worker: "hybrid"}
	if err := s.eng.Accept(ctx(t), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev); err != nil {
		t.Fatal(err)
	}
	if ev.Attempt != 1 || ev.ID == 0 {
		t.Fatalf("accepted running: ID %d Attempt %d; want attempt 1", ev.ID, ev.Attempt)
	}
	if st := s.stats(); st.Running != 1 || st.Queued != 0 {
		t.Fatalf("Stats = %+v; want it running", st)
	}
	if got := s.claim(10, time.Minute); len(got) != 0 {
		t.Fatalf("Claim took %v while the first attempt's lease holds", ids(got))
	}
	again := s.waitClaim(time.Minute)
	if again.ID != ev.ID || again.Attempt != 2 || string(again.Body) != "x" {
		t.Fatalf("after the lease lapsed Claim = %+v; want attempt 2 of the event", again)
	}
	if err := s.settle(ev, queue.Delivered, time.Time{}, ""); !errors.Is(err, queue.ErrSuperseded) {
		t.Fatalf("Settle of the lapsed first attempt = %v; want ErrSuperseded", err)
	}
	if err := s.settle(again, queue.Delivered, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
}

// Every attempt of an event carries a larger fence than the one before it,
// and the first a larger one than the fence of the key's claim, given to
// Accept: an event accepted running makes attempt 1 with the claim's fence
// (a respond_within route's first attempt), a lapsed lease's next attempt
// and a retry get larger ones. A claim's fence ahead of the engine's clock
// (another clock made it) is a floor all the same.
func testFences(t *testing.T, s *suite) {
	for _, tt := range []struct {
		name  string
		ahead time.Duration // how far ahead of the clock the claim's fence is
	}{{"claim's fence", 0}, {"claim's fence an hour ahead", time.Hour}} {
		t.Run(tt.name, func(t *testing.T) {
			key := "idem:queuetest:" + randHex(8)
			claim := &idemhook.Record{State: idemhook.StatePending, Token: randHex(8), CreatedAt: time.Now()}
			if existing, err := s.st.Claim(ctx(t), key, claim, time.Minute); err != nil || existing != nil {
				t.Fatalf("Claim(%s) = %v, %v; want a new claim", key, existing, err)
			}
			claimed := uint64(time.Now().Add(tt.ahead).UnixMicro())
			done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
			ev := &queue.Event{Route: s.route, Key: key, Method: "POST", Target: "/", ReceivedAt: time.Now(),
				Lease: lease, Worker: "hybrid", Fence: claimed}
			if err := s.eng.Accept(ctx(t), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev); err != nil {
				t.Fatal(err)
			}
			if ev.Attempt != 1 || ev.Fence != claimed {
				t.Fatalf("accepted running: attempt %d fence %d; want attempt 1 with the claim's fence %d", ev.Attempt, ev.Fence, claimed)
			}
			lapsed := s.waitClaim(lease) // attempt 2, once attempt 1's lease lapsed
			if lapsed.ID != ev.ID || lapsed.Attempt != 2 || lapsed.Fence <= claimed {
				t.Fatalf("after the lease lapsed: event %d attempt %d fence %d; want attempt 2 of event %d with a fence above %d",
					lapsed.ID, lapsed.Attempt, lapsed.Fence, ev.ID, claimed)
			}
			if err := s.settle(lapsed, queue.Retry, time.Now(), ""); err != nil {
				t.Fatal(err)
			}
			retry := s.waitClaim(time.Minute)
			if retry.ID != ev.ID || retry.Attempt != 3 || retry.Fence <= lapsed.Fence {
				t.Fatalf("the retry: event %d attempt %d fence %d; want attempt 3 of event %d with a fence above %d",
					retry.ID, retry.Attempt, retry.Fence, ev.ID, lapsed.Fence)
			}
			if err := s.settle(retry, queue.Delivered, time.Time{}, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// refused is the error of an attempt the backend never answered.
const refused = "dial tcp 127.0.0.1:9: connect: connection refused"

// noAnswer settles ev's attempt as one that got no answer at all: no
// status, no body, only the transport's error.
func (s *suite) noAnswer(ev *queue.Event, v queue.Verdict, next time.Time, reason string) error {
	return s.eng.Settle(ctx(s.t), queue.Settlement{Token: ev.Token(), Verdict: v, NextAt: next, Reason: reason,
		Attempt: queue.Attempt{Attempt: ev.Attempt, Started: time.Now(), Latency: time.Millisecond, Error: refused, Worker: "w"}})
}

// An attempt that ends with no answer (refused, reset, timed out: no status,
// no body) settles like any failed attempt: retried at its NextAt, made due
// by Hasten (a breaker probe that succeeded), dead when killed (its attempts
// or its maximum age ran out), its error kept in its attempts' records and
// in its summary. A superseded one is recorded too.
func testNoAnswer(t *testing.T, s *suite) {
	a, b := s.accept(""), s.accept("")
	evs := s.claim(2, lease)
	if len(evs) != 2 {
		t.Fatalf("Claim = %v; want both", ids(evs))
	}
	if err := s.noAnswer(evs[0], queue.Retry, time.Now().Add(time.Hour), ""); err != nil {
		t.Fatalf("Settle(Retry) of an attempt with no answer: %v", err)
	}
	if err := s.noAnswer(evs[1], queue.Kill, time.Time{}, "its maximum age of 1h0m0s has passed; the last attempt: no answer: "+refused); err != nil {
		t.Fatalf("Settle(Kill) of an attempt with no answer: %v", err)
	}
	if st := s.stats(); st.Retrying != 1 || st.Dead != 1 || st.Running != 0 {
		t.Fatalf("Stats = %+v; want 1 retrying, 1 dead", st)
	}
	if got := s.claim(10, time.Minute); len(got) != 0 {
		t.Fatalf("Claim = %v before the retry's backoff ended", ids(got))
	}
	if n, err := s.eng.Hasten(ctx(t), s.route); err != nil || n != 1 {
		t.Fatalf("Hasten = %d, %v; want the retry made due", n, err)
	}
	again := s.claim(10, lease)
	if len(again) != 1 || again[0].ID != a.ID || again[0].Attempt != 2 {
		t.Fatalf("after Hasten Claim = %+v; want event %d at attempt 2", again, a.ID)
	}
	// Its lease lapses and another attempt takes it: the late settle of
	// attempt 2, with no answer either, is superseded and still recorded.
	third := s.waitClaim(time.Minute)
	if err := s.noAnswer(again[0], queue.Retry, time.Now(), ""); !errors.Is(err, queue.ErrSuperseded) {
		t.Fatalf("Settle of the superseded attempt with no answer = %v; want ErrSuperseded", err)
	}
	if err := s.noAnswer(third, queue.Kill, time.Time{}, "3 attempts made; the last: no answer: "+refused); err != nil {
		t.Fatalf("Settle(Kill) at the attempt limit: %v", err)
	}
	for _, tt := range []struct {
		ev       *queue.Event
		attempts []int
		reason   string
	}{{a, []int{1, 2, 3}, "3 attempts made"}, {b, []int{1}, "maximum age"}} {
		sum, attempts, err := s.eng.Get(ctx(t), tt.ev.ID)
		if err != nil || sum == nil || sum.State != queue.Dead || !strings.Contains(sum.Reason, tt.reason) ||
			sum.LastStatus != 0 || sum.LastError != refused {
			t.Fatalf("Get(%d) = %+v, %v; want dead (%q) with the last error %q", tt.ev.ID, sum, err, tt.reason, refused)
		}
		var got []int
		for _, at := range attempts {
			got = append(got, at.Attempt)
			if at.Status != 0 || at.Error != refused || len(at.BodyHead) != 0 || at.Worker != "w" {
				t.Fatalf("attempt %+v; want no status, no body and the error %q", at, refused)
			}
		}
		if !slices.Equal(got, tt.attempts) {
			t.Fatalf("event %d kept attempts %v; want %v", tt.ev.ID, got, tt.attempts)
		}
	}
}

// A dispatcher over the engine whose backend never answers: each event is
// retried after its backoff, then dead at the route's attempt limit or its
// maximum age, with every attempt's error recorded.
func testNoAnswerDispatched(t *testing.T, s *suite) {
	limited := s.accept("")
	agedRoute := s.route + "-aged"
	main := s.route
	s.route = agedRoute
	aged := s.accept("")
	s.route = main
	var mu sync.Mutex
	sent := map[int64][]int{}
	send := func(ctx context.Context, ev *queue.Event) queue.Result {
		mu.Lock()
		sent[ev.ID] = append(sent[ev.ID], ev.Attempt)
		mu.Unlock()
		return queue.Result{Err: errors.New(refused)}
	}
	d := queue.NewDispatcher(s.eng, queue.Options{Worker: "w", Poll: 10 * time.Millisecond, BreakerThreshold: -1})
	defer d.Close(context.Background())
	d.Set([]queue.Route{
		{Name: main, Send: send, MaxAttempts: 3, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond},
		// Its maximum age has passed by the first retry.
		{Name: agedRoute, Send: send, MaxAge: time.Nanosecond, BackoffMin: time.Millisecond},
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, route := range []string{main, agedRoute} {
		for {
			st, err := s.eng.Stats(ctx(t), route)
			if err != nil {
				t.Fatal(err)
			}
			if st.Dead == 1 && st.Pending() == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("route %s: Stats = %+v after 10s; want its event dead", route, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tt := range []struct {
		ev       *queue.Event
		attempts []int
		reason   string
	}{
		{limited, []int{1, 2, 3}, "3 attempts made; the last: no answer: " + refused},
		{aged, []int{1}, "its maximum age of 1ns has passed; the last attempt: no answer: " + refused},
	} {
		if !slices.Equal(sent[tt.ev.ID], tt.attempts) {
			t.Fatalf("event %d sent as attempts %v; want %v", tt.ev.ID, sent[tt.ev.ID], tt.attempts)
		}
		sum, attempts, err := s.eng.Get(ctx(t), tt.ev.ID)
		if err != nil || sum == nil || sum.State != queue.Dead || sum.Reason != tt.reason || sum.LastError != refused {
			t.Fatalf("Get(%d) = %+v, %v; want dead with the reason %q", tt.ev.ID, sum, err, tt.reason)
		}
		if len(attempts) != len(tt.attempts) {
			t.Fatalf("event %d kept %d attempts; want %d", tt.ev.ID, len(attempts), len(tt.attempts))
		}
		for _, at := range attempts {
			if at.Status != 0 || at.Error != refused || len(at.BodyHead) != 0 {
				t.Fatalf("attempt %+v; want the error %q, no status, no body", at, refused)
			}
		}
	}
}

// Event IDs are never reused, on any engine: once the queue is empty
// (every event delivered or purged), the next event gets a larger ID than
// any before, so that an ID and "event N, attempt M" name one event only.
func testIDsNeverReused(t *testing.T, s *suite) {
	var last int64
	for round := range 3 {
		a, b := s.accept(""), s.accept("")
		if a.ID <= last || b.ID <= a.ID {
			t.Fatalf("round %d: IDs %d, %d after %d; want each larger than every earlier one", round, a.ID, b.ID, last)
		}
		last = b.ID
		evs := s.claim(2, time.Minute)
		if len(evs) != 2 {
			t.Fatalf("Claim = %v; want both", ids(evs))
		}
		// One is delivered, the other killed and purged: the route's queue is empty.
		if err := s.settle(evs[0], queue.Delivered, time.Time{}, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.settle(evs[1], queue.Kill, time.Time{}, "refused"); err != nil {
			t.Fatal(err)
		}
		if keys, err := s.eng.Purge(ctx(t), queue.Filter{Route: s.route}); err != nil || len(keys) != 1 {
			t.Fatalf("Purge = %v, %v; want the dead one", keys, err)
		}
		if st := s.stats(); st.Pending() != 0 || st.Dead != 0 {
			t.Fatalf("Stats = %+v; want the route's queue empty", st)
		}
	}
}

// lane is the name of one of a fanned-out route's lanes (its destinations'
// routes), as the gateway names them.
func (s *suite) lane(name string) string { return s.route + "#" + name }

// newClaim claims a new key and returns its completion with the accept
// answer.
func (s *suite) newClaim() queue.Completion {
	s.t.Helper()
	key := "idem:queuetest:" + randHex(8)
	claim := &idemhook.Record{State: idemhook.StatePending, Token: randHex(8), CreatedAt: time.Now()}
	if existing, err := s.st.Claim(ctx(s.t), key, claim, time.Minute); err != nil || existing != nil {
		s.t.Fatalf("Claim(%s) = %v, %v; want a new claim", key, existing, err)
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"accepted":true}`)}
	return queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}
}

// laneEvent is an event of key on the route route, with a body of its own.
func laneEvent(route, key, order string) *queue.Event {
	return &queue.Event{
		Route: route, Key: key, OrderKey: order, Method: http.MethodPost, Target: "/hook?x=1",
		Header:     http.Header{"Content-Type": {"application/json"}, "X-Lane": {route}},
		Body:       []byte(`{"lane":"` + route + `"}`),
		ReceivedAt: time.Now().Truncate(time.Millisecond),
	}
}

// AcceptAll of events that share one request (a route's destinations do:
// an engine may keep it once per event but send it once) beside one whose
// request differs: each lane's claim returns its own event's request.
func testAcceptAllSharedRequest(t *testing.T, s *suite) {
	c := s.newClaim()
	shared := laneEvent(s.lane("shared"), "", "")
	lanes := []string{s.lane("a"), s.lane("other"), s.lane("b")}
	var evs []*queue.Event
	for _, l := range lanes {
		ev := *shared // the same header map and body
		ev.Route, ev.Key = l, c.Key+"#"+l
		if l == s.lane("other") {
			ev.Body = []byte(`{"other":true}`)
			ev.Header = http.Header{"X-Other": {"1"}}
		}
		evs = append(evs, &ev)
	}
	if err := s.eng.AcceptAll(ctx(t), c, evs); err != nil {
		t.Fatalf("AcceptAll: %v", err)
	}
	for i, l := range lanes {
		got := s.claimRoute(l)
		if len(got) != 1 {
			t.Fatalf("Claim(%s) = %d events; want its one", l, len(got))
		}
		want := evs[i]
		if g := got[0]; g.ID != want.ID || g.Key != want.Key || string(g.Body) != string(want.Body) ||
			!queue.SameRequest(g, want) {
			t.Errorf("lane %s claimed %+v; want the request %q %v", l, g, want.Body, want.Header)
		}
	}
}

// claimRoute claims up to 10 events of route.
func (s *suite) claimRoute(route string) []*queue.Event {
	s.t.Helper()
	evs, err := s.eng.Claim(ctx(s.t), route, 10, time.Minute, "worker-"+route)
	if err != nil {
		s.t.Fatalf("Claim(%s): %v", route, err)
	}
	return evs
}

func (s *suite) statsOf(route string) queue.Stats {
	s.t.Helper()
	st, err := s.eng.Stats(ctx(s.t), route)
	if err != nil {
		s.t.Fatalf("Stats(%s): %v", route, err)
	}
	return st
}

// AcceptAll completes the key once and appends one event per lane, each
// claimed on its own route; a second AcceptAll with the claim, now spent,
// appends nothing.
func testAcceptAll(t *testing.T, s *suite) {
	c := s.newClaim()
	lanes := []string{s.lane("billing"), s.lane("crm"), s.lane("audit")}
	orders := []string{"", "customer-7", ""}
	var evs []*queue.Event
	for i, l := range lanes {
		// Each lane's event carries a key of its own, to show that the
		// engine keeps each event's Key rather than the completion's.
		evs = append(evs, laneEvent(l, c.Key+"/"+l, orders[i]))
	}
	if err := s.eng.AcceptAll(ctx(t), c, evs); err != nil {
		t.Fatalf("AcceptAll: %v", err)
	}
	seen := map[int64]bool{}
	for _, ev := range evs {
		if ev.ID == 0 || seen[ev.ID] {
			t.Fatalf("AcceptAll gave IDs %v; want distinct, non-zero ones", ids(evs))
		}
		seen[ev.ID] = true
	}
	rec, err := s.st.Get(ctx(t), c.Key)
	if err != nil || rec == nil || rec.State != idemhook.StateCompleted || rec.Status != http.StatusAccepted ||
		string(rec.Body) != `{"accepted":true}` {
		t.Fatalf("the key's record after AcceptAll = %+v, %v; want the accept answer", rec, err)
	}
	for i, l := range lanes {
		if st := s.statsOf(l); st.Queued != 1 || st.Pending() != 1 {
			t.Fatalf("Stats(%s) = %+v; want its one event queued", l, st)
		}
		got := s.claimRoute(l)
		if len(got) != 1 {
			t.Fatalf("Claim(%s) = %v; want its one event %d", l, ids(got), evs[i].ID)
		}
		g, want := got[0], evs[i]
		if g.ID != want.ID || g.Route != l || g.Key != want.Key || g.OrderKey != want.OrderKey || g.Attempt != 1 ||
			string(g.Body) != string(want.Body) || !slices.Equal(g.Header["X-Lane"], []string{l}) ||
			g.Target != want.Target || !g.ReceivedAt.Equal(want.ReceivedAt) {
			t.Fatalf("Claim(%s) = %+v; want its own event %+v at attempt 1", l, g, want)
		}
	}
	// The claim is spent: a second AcceptAll with it fails and appends
	// nothing on any lane.
	again := []*queue.Event{laneEvent(lanes[0], c.Key, ""), laneEvent(lanes[1], c.Key, "customer-7"), laneEvent(s.lane("new"), c.Key, "")}
	err = s.eng.AcceptAll(ctx(t), c, again)
	if !errors.Is(err, idemhook.ErrNotOwner) {
		t.Fatalf("AcceptAll with a spent claim = %v; want ErrNotOwner", err)
	}
	for _, l := range lanes {
		if st := s.statsOf(l); st.Running != 1 || st.Pending() != 1 {
			t.Fatalf("Stats(%s) after a refused AcceptAll = %+v; want only the first event, running", l, st)
		}
	}
	if st := s.statsOf(s.lane("new")); st.Pending() != 0 {
		t.Fatalf("Stats(%s) after a refused AcceptAll = %+v; want nothing appended", s.lane("new"), st)
	}
}

// An ordered event accepted by AcceptAll takes its place in its lane's
// group: behind an earlier event of the group it is not due until that one
// settles, and in a lane where the group is empty it is due at once.
func testAcceptAllOrdered(t *testing.T, s *suite) {
	a, b := s.lane("a"), s.lane("b")
	s.route = a
	first := s.accept("g") // route a, group g
	c := s.newClaim()
	evs := []*queue.Event{laneEvent(a, c.Key, "g"), laneEvent(b, c.Key, "g")}
	if err := s.eng.AcceptAll(ctx(t), c, evs); err != nil {
		t.Fatalf("AcceptAll: %v", err)
	}
	if evs[0].ID <= first.ID {
		t.Fatalf("AcceptAll's event of lane a has ID %d, after %d; want a larger one", evs[0].ID, first.ID)
	}
	got := s.claimRoute(a)
	if !slices.Equal(ids(got), []int64{first.ID}) {
		t.Fatalf("Claim(a) = %v; want only the group's head %d", ids(got), first.ID)
	}
	if gb := s.claimRoute(b); !slices.Equal(ids(gb), []int64{evs[1].ID}) {
		t.Fatalf("Claim(b) = %v; want lane b's event %d, its group's head", ids(gb), evs[1].ID)
	}
	if more := s.claimRoute(a); len(more) != 0 {
		t.Fatalf("Claim(a) = %v while the group's head runs; want nothing", ids(more))
	}
	if err := s.settle(got[0], queue.Delivered, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	if next := s.claimRoute(a); !slices.Equal(ids(next), []int64{evs[0].ID}) {
		t.Fatalf("after the head's delivery Claim(a) = %v; want AcceptAll's event %d", ids(next), evs[0].ID)
	}
}

// AcceptAll refuses, before completing the key, what it can't accept: no
// events, two of one route, an event accepted running.
func testAcceptAllValidates(t *testing.T, s *suite) {
	c := s.newClaim()
	running := laneEvent(s.lane("b"), c.Key, "")
	running.Lease, running.Worker = time.Minute, "w"
	for _, tc := range []struct {
		name string
		evs  []*queue.Event
		want string
	}{
		{"none", nil, "no events"},
		{"nil event", []*queue.Event{laneEvent(s.lane("a"), c.Key, ""), nil}, "nil *Event"},
		{"one route twice", []*queue.Event{laneEvent(s.lane("a"), c.Key, ""), laneEvent(s.lane("a"), c.Key, "g")}, "two events of route"},
		{"running", []*queue.Event{laneEvent(s.lane("a"), c.Key, ""), running}, "running"},
	} {
		err := s.eng.AcceptAll(ctx(t), c, tc.evs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AcceptAll(%s) = %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
	for _, l := range []string{s.lane("a"), s.lane("b")} {
		if st := s.statsOf(l); st.Pending() != 0 {
			t.Errorf("Stats(%s) = %+v; a refused AcceptAll appended an event", l, st)
		}
	}
	if rec, _ := s.st.Get(ctx(t), c.Key); rec == nil || rec.State != idemhook.StatePending {
		t.Fatalf("the key after refused AcceptAlls = %+v; want the claim still pending", rec)
	}
	// The claim is still held: a valid AcceptAll takes it.
	ok := []*queue.Event{laneEvent(s.lane("a"), c.Key, ""), laneEvent(s.lane("b"), c.Key, "")}
	if err := s.eng.AcceptAll(ctx(t), c, ok); err != nil {
		t.Fatalf("AcceptAll after the refused ones: %v", err)
	}
	if st := s.statsOf(s.lane("b")); st.Queued != 1 {
		t.Fatalf("Stats(b) = %+v; want the valid AcceptAll's event", st)
	}
}
