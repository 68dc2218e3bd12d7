package pgstore_test

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/queue"
)

// acceptAll claims a fresh key in s and accepts on it one event per route
// of routes, each with the order key order ("" unordered). It calls before,
// when not nil, between the claim and the accept.
func acceptAll(tb testing.TB, s *pgstore.Store, q *pgstore.Queue, routes []string, order string, before func()) []*queue.Event {
	tb.Helper()
	key := "idem:pgqueue:" + rand.Text()
	claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
	if got, err := s.Claim(tb.Context(), key, claim, time.Minute); err != nil || got != nil {
		tb.Fatalf("Claim(%s) = %v, %v; want a new claim", key, got, err)
	}
	done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
	var evs []*queue.Event
	for _, r := range routes {
		evs = append(evs, &queue.Event{Route: r, Key: key, OrderKey: order, Method: http.MethodPost, Target: "/hook",
			Body: []byte(key), ReceivedAt: time.Now()})
	}
	if before != nil {
		before()
	}
	if err := q.AcceptAll(tb.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, evs); err != nil {
		tb.Fatalf("AcceptAll: %v", err)
	}
	return evs
}

// TestQueuedAcceptAllIsOneRoundTrip counts, on the wire, what an accept of
// three events (one per lane) sends once its statements are prepared: one
// round trip, unordered or ordered (the groups' locks ride in the same
// batch), with and without Config.Batch.
func TestQueuedAcceptAllIsOneRoundTrip(t *testing.T) {
	lanes := []string{"/rt#a", "/rt#b", "/rt#c"}
	for _, batch := range []bool{false, true} {
		for _, order := range []string{"", "customer-1"} {
			t.Run(fmt.Sprintf("batch=%t/ordered=%t", batch, order != ""), func(t *testing.T) {
				pool, c := countedPool(t)
				s, q := newQueue(t, pool, pgstore.Config{Batch: batch})
				acceptAll(t, s, q, lanes, order, nil) // prepares the statements
				evs := acceptAll(t, s, q, lanes, order, c.reset)
				if got := c.writes.Load(); got != 1 {
					c.mu.Lock()
					t.Errorf("AcceptAll of %d events: %d round trips (statements %v), want 1", len(evs), got, c.sql)
					c.mu.Unlock()
				}
				for i, l := range lanes {
					st, err := q.Stats(t.Context(), l)
					if err != nil || st.Queued != 2 {
						t.Errorf("Stats(%s) = %+v, %v; want both AcceptAlls' events queued", l, st, err)
					}
					if evs[i].ID == 0 {
						t.Errorf("event %d of lane %s has no ID", i, l)
					}
				}
			})
		}
	}
}

// TestQueueAcceptAllNoDeadlock has two goroutines accept, 200 times each,
// ordered events of the same two groups (lanes a and b, one order key), in
// opposite orders of their events. AcceptAll takes the groups' locks in one
// order whatever the events' order, so no accept fails with a deadlock,
// and each lane's group ends with one head: its oldest event.
func TestQueueAcceptAllNoDeadlock(t *testing.T) {
	pool := pgtest.Pool(t)
	s, q := newQueue(t, pool, pgstore.Config{})
	const rounds = 200
	lanes := [2][]string{{"/dl#a", "/dl#b"}, {"/dl#b", "/dl#a"}}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		min  = map[string]int64{}
	)
	for g := range 2 {
		wg.Go(func() {
			for range rounds {
				key := "idem:pgqueue:" + rand.Text()
				claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text(), CreatedAt: time.Now()}
				if _, err := s.Claim(t.Context(), key, claim, time.Minute); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
				var evs []*queue.Event
				for _, l := range lanes[g] {
					evs = append(evs, &queue.Event{Route: l, Key: key, OrderKey: "customer-1", Method: http.MethodPost,
						Target: "/hook", Body: []byte(key), ReceivedAt: time.Now()})
				}
				err := q.AcceptAll(t.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, evs)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, ev := range evs {
					if m, ok := min[ev.Route]; err == nil && (!ok || ev.ID < m) {
						min[ev.Route] = ev.ID
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d AcceptAlls failed; the first: %v", len(errs), errs[0])
	}
	for _, l := range lanes[0] {
		st, err := q.Stats(t.Context(), l)
		if err != nil || st.Queued != 2*rounds {
			t.Fatalf("Stats(%s) = %+v, %v; want %d queued", l, st, err, 2*rounds)
		}
		evs, err := q.Claim(t.Context(), l, 10, time.Minute, "w")
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, ev := range evs {
			got = append(got, ev.ID)
		}
		if !slices.Equal(got, []int64{min[l]}) {
			t.Fatalf("Claim(%s) = %v; want only the group's oldest event %d", l, got, min[l])
		}
	}
}
