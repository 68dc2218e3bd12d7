package queue_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/queue"
)

// refusingSettles is a memory engine whose Settle fails while refuse is
// set, as a store that is briefly unreachable.
type refusingSettles struct {
	*queue.Memory
	refuse atomic.Bool
}

var errUnreachable = errors.New("the store is unreachable")

func (e *refusingSettles) Settle(ctx context.Context, s queue.Settlement) error {
	if e.refuse.Load() {
		return errUnreachable
	}
	return e.Memory.Settle(ctx, s)
}

func newRefusing(t *testing.T) (*refusingSettles, func(key string) int64) {
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &refusingSettles{Memory: queue.NewMemory(st)}
	accept := func(key string) int64 {
		claim := &idemhook.Record{State: idemhook.StatePending, Token: key, CreatedAt: time.Now()}
		if _, err := st.Claim(t.Context(), key, claim, time.Minute); err != nil {
			t.Fatal(err)
		}
		done := &idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.Now(), Status: http.StatusAccepted}
		ev := &queue.Event{Route: "r", Key: key, Method: "POST", Target: "/", ReceivedAt: time.Now()}
		if err := e.Accept(t.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: time.Hour}, ev); err != nil {
			t.Fatal(err)
		}
		return ev.ID
	}
	return e, accept
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// counting is a backend that counts the attempts of each event and
// accepts every one.
type counting struct {
	mu   sync.Mutex
	sent map[int64]int
}

func (c *counting) send(ctx context.Context, ev *queue.Event) queue.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent[ev.ID]++
	return queue.Result{Status: http.StatusOK}
}

func (c *counting) check(t *testing.T, ids []int64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.sent[id] != 1 {
			t.Errorf("event %d sent %d times; want once", id, c.sent[id])
		}
	}
	if len(c.sent) != len(ids) {
		t.Errorf("%d events sent; want %d", len(c.sent), len(ids))
	}
}

// A settle the engine fails is kept and tried again at every poll, counted
// and reported to SettleFailed, until the engine takes it: the event is
// then delivered, sent once, and nothing stays running.
func TestSettleFailedIsKeptAndRetried(t *testing.T) {
	e, accept := newRefusing(t)
	e.refuse.Store(true)
	var ids []int64
	for i := range 5 {
		ids = append(ids, accept(fmt.Sprint("k", i)))
	}
	var hooked atomic.Int64
	b := &counting{sent: map[int64]int{}}
	d := queue.NewDispatcher(e, queue.Options{Poll: 5 * time.Millisecond, SettleFailed: func(route string, ev *queue.Event, err error) {
		if route == "r" && errors.Is(err, errUnreachable) {
			hooked.Add(1)
		}
	}})
	defer d.Close(context.Background())
	d.Set([]queue.Route{{Name: "r", Send: b.send}})
	eventually(t, "5 settles pending", func() bool { return d.SettlesPending("r") == 5 })
	// Retried at every poll: the failures grow past the first five.
	eventually(t, "the kept settles retried", func() bool { return d.SettleFailures("r") >= 20 && hooked.Load() >= 20 })
	if st, _ := e.Stats(t.Context(), "r"); st.Running != 5 {
		t.Fatalf("Stats = %+v while the settles fail; want 5 running", st)
	}
	// The breaker counts the backend's answers (all 200 here), not the
	// store's failures to record them.
	if d.BreakerOpen("r") {
		t.Error("the breaker opened on settles that failed; want it to count the backend only")
	}
	e.refuse.Store(false)
	eventually(t, "the kept settles stored", func() bool {
		st, _ := e.Stats(t.Context(), "r")
		return d.SettlesPending("r") == 0 && st.Pending() == 0
	})
	b.check(t, ids)
}

// Close tries the kept settles once more.
func TestCloseRetriesKeptSettles(t *testing.T) {
	e, accept := newRefusing(t)
	e.refuse.Store(true)
	id := accept("k")
	b := &counting{sent: map[int64]int{}}
	// A poll of an hour: after the attempt, only Close tries the settle again.
	d := queue.NewDispatcher(e, queue.Options{Poll: time.Hour})
	d.Set([]queue.Route{{Name: "r", Send: b.send}})
	d.Wake("r")
	eventually(t, "the settle kept", func() bool { return d.SettlesPending("r") == 1 && d.SettleFailures("r") >= 2 })
	e.refuse.Store(false)
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.Stats(t.Context(), "r"); st.Pending() != 0 || d.SettlesPending("r") != 0 {
		t.Fatalf("after Close: Stats %+v, %d settles pending; want the kept settle stored", st, d.SettlesPending("r"))
	}
	b.check(t, []int64{id})
}
