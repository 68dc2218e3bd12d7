package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// A gateway frozen past its lease (SIGSTOP, then SIGCONT) loses its claim
// to another gateway, and both call the backend. The store's owner token
// keeps the frozen one from storing its answer; the fence each forwards
// (Idempotent-Fence) lets a backend that records the largest keep it from
// committing its effect. These tests run two real gateway processes on one
// PostgreSQL, in front of such a backend.

// fencedBackend makes an event's effect once, fenced: each request raises
// the event's fence (the largest seen for its X-Event-Id) on arrival, and
// its commit is refused with 409 when a request with a larger fence has
// arrived since. It holds the first request it gets until release.
type fencedBackend struct {
	up      *upstream
	arrived chan uint64 // the first request's fence, once it is held
	release func()      // lets the first request go on to its commit

	mu        sync.Mutex
	highest   map[string]uint64
	committed map[string][]uint64 // the fences of the commits, by event
	refused   map[string][]uint64 // the fences of the refused commits, by event
}

func newFencedBackend(t *testing.T) *fencedBackend {
	b := &fencedBackend{
		up: newUpstream(t), arrived: make(chan uint64, 1),
		highest: map[string]uint64{}, committed: map[string][]uint64{}, refused: map[string][]uint64{},
	}
	hold := make(chan struct{})
	var once sync.Once
	b.release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(b.release) // before the upstream's Close, which waits for the held request
	b.up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		id := r.Header.Get("X-Event-Id")
		fence, err := strconv.ParseUint(r.Header.Get(gateway.HeaderFence), 10, 64)
		if err != nil {
			http.Error(w, "no fence", http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.highest[id] = max(b.highest[id], fence)
		b.mu.Unlock()
		if n == 1 {
			b.arrived <- fence
			<-hold
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if fence < b.highest[id] {
			b.refused[id] = append(b.refused[id], fence)
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, "refused: fence %d is below %d", fence, b.highest[id])
			return
		}
		b.committed[id] = append(b.committed[id], fence)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"committed_by":%d}`, fence)
	}
	return b
}

// outcome returns the fences of event id's commits and refusals.
func (b *fencedBackend) outcome(id string) (committed, refused []uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]uint64(nil), b.committed[id]...), append([]uint64(nil), b.refused[id]...)
}

// firstArrival waits for the backend's first request and returns its fence.
func (b *fencedBackend) firstArrival(t *testing.T, c *proc) uint64 {
	t.Helper()
	select {
	case f := <-b.arrived:
		return f
	case <-time.After(30 * time.Second):
		t.Fatalf("the backend got no request within 30s\n%s", c.stderr)
		return 0
	}
}

// fenceConfig is a one-route configuration on the PostgreSQL table table,
// in front of upstream, with the route's extra lines.
func fenceConfig(table, upstream string, extra ...string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: postgres, url: "${%s}", table: %s, timeout: 2s}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
    header: x-event-id
%s`, pgtest.EnvVar, table, upstream, "    "+strings.Join(extra, "\n    ")+"\n")
}

// fenceClient is the provider's client: its requests to a frozen gateway
// wait for it to be resumed, within a bound.
func fenceClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

type answer struct {
	status   int
	body     string
	replayed bool
	err      error
}

func deliver(c *http.Client, url, id string) answer {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"id":"`+id+`"}`))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Id", id)
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(body), resp.Header.Get("Idempotent-Replayed") == "true", err}
}

// Gateway A forwards event E and is frozen (SIGSTOP) while the backend
// holds its request. The provider's retry goes to gateway B, which waits
// for A's claim to lapse (lease 1s: A renews no more), takes E over and
// forwards it with a larger fence; the backend commits it. A resumed
// (SIGCONT), the backend goes on with A's request and refuses its commit:
// its fence is lower. The effect is committed once, A's refusal is not
// stored over B's answer, and every re-delivery, to either gateway,
// replays B's answer.
func TestPostgresFrozenGatewayIsFenced(t *testing.T) { frozenGateway(t) }

// frozenGateway runs the scenario of TestPostgresFrozenGatewayIsFenced,
// with its checks, and returns what the backend saw: the requests, and the
// fences it committed and refused.
func frozenGateway(t *testing.T) (calls int64, committed, refused []uint64) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "gw_fence")
	b := newFencedBackend(t)
	path := writeConfig(t, t.TempDir(), fenceConfig(table, b.up.Srv.URL, "lease: 1s", "wait_timeout: 30s"))
	gwA, gwB := startProc(t, path), startProc(t, path)
	client := fenceClient(t)
	const id = "evt-frozen"

	first := make(chan answer, 1)
	go func() { first <- deliver(client, gwA.url("/webhooks/test"), id) }()
	fenceA := b.firstArrival(t, gwA)
	gwA.signal(t, syscall.SIGSTOP)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			gwA.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // a failed test: let it die normally
		}
	})

	retry := deliver(client, gwB.url("/webhooks/test"), id)
	committed, _ = b.outcome(id)
	if retry.err != nil || retry.status != http.StatusOK || len(committed) != 1 {
		t.Fatalf("the retry to B: %d %q %v, commits %v; want B to take the event over and the backend to commit it\nA:\n%s\nB:\n%s",
			retry.status, retry.body, retry.err, committed, gwA.stderr, gwB.stderr)
	}
	fenceB := committed[0]
	if fenceB <= fenceA {
		t.Fatalf("B's fence %d; want more than A's %d", fenceB, fenceA)
	}

	gwA.signal(t, syscall.SIGCONT)
	resumed = true
	b.release()
	stale := <-first
	if stale.err != nil || stale.status != http.StatusConflict {
		t.Fatalf("A's delivery after SIGCONT: %d %q %v; want the backend's 409", stale.status, stale.body, stale.err)
	}
	committed, refused = b.outcome(id)
	if len(committed) != 1 || len(refused) != 1 || refused[0] != fenceA {
		t.Fatalf("commits %v, refusals %v; want B's commit (fence %d) once and A's refused (fence %d)", committed, refused, fenceB, fenceA)
	}
	for _, g := range []*proc{gwA, gwB} {
		if a := deliver(client, g.url("/webhooks/test"), id); a.err != nil || a.status != http.StatusOK || !a.replayed || a.body != retry.body {
			t.Fatalf("re-delivery to %s: %d %q replayed=%v %v; want B's answer %q replayed", g.Listen, a.status, a.body, a.replayed, a.err, retry.body)
		}
	}
	if n := b.up.Calls.Load(); n != 2 {
		t.Fatalf("the backend got %d requests; want 2 (A's and B's)", n)
	}
	return b.up.Calls.Load(), committed, refused
}

// The same on a queued route: gateway A accepts event E and sends its
// first attempt, then is frozen while the backend holds it. Gateway B,
// started on the same queue, claims E's next attempt once the first one's
// lease lapses (attempt_timeout plus the queue's 15s margin) and sends it
// with a larger fence; the backend commits it. A resumed, its attempt ends
// (its timeout passed while frozen), its settle is superseded, and the
// backend refuses the held attempt's commit.
func TestPostgresFrozenGatewayQueuedAttemptIsFenced(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "gw_fenceq")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, suffix := range []string{"_queue_attempts", "_queue_routes", "_queue"} {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+table+suffix); err != nil {
				t.Errorf("dropping %s%s: %v", table, suffix, err)
			}
		}
	})
	b := newFencedBackend(t)
	path := writeConfig(t, t.TempDir(), fenceConfig(table, b.up.Srv.URL,
		"deliver: queue", "queue: {attempt_timeout: 1s, backoff_min: 50ms, backoff_max: 200ms}"))
	gwA := startProc(t, path)
	client := fenceClient(t)
	const id = "evt-frozen-queued"

	if a := deliver(client, gwA.url("/webhooks/test"), id); a.err != nil || a.status != http.StatusAccepted {
		t.Fatalf("the delivery to A: %d %q %v; want 202", a.status, a.body, a.err)
	}
	fenceA := b.firstArrival(t, gwA)
	gwA.signal(t, syscall.SIGSTOP)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			gwA.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // a failed test: let it die normally
		}
	})
	gwB := startProc(t, path)

	deadline := time.Now().Add(60 * time.Second) // the lease is 16s
	for {
		if committed, _ := b.outcome(id); len(committed) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt from B committed within 60s\nB:\n%s", gwB.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	gwA.signal(t, syscall.SIGCONT)
	resumed = true
	b.release()
	gwA.waitLog(t, "an attempt outlived its lease")
	eventually(t, "the backend's verdict on A's attempt", func() bool { _, refused := b.outcome(id); return len(refused) == 1 })
	committed, refused := b.outcome(id)
	if len(committed) != 1 || committed[0] <= fenceA || refused[0] != fenceA {
		t.Fatalf("commits %v, refusals %v; want one commit with a fence above A's %d, and A's refused", committed, refused, fenceA)
	}
	for _, g := range []*proc{gwA, gwB} {
		if a := deliver(client, g.url("/webhooks/test"), id); a.err != nil || a.status != http.StatusAccepted || !a.replayed {
			t.Fatalf("re-delivery to %s: %d %q replayed=%v %v; want the accept answer replayed, nothing queued", g.Listen, a.status, a.body, a.replayed, a.err)
		}
	}
	attempts := map[string]bool{}
	for _, r := range b.up.Received() {
		attempts[r.Header.Get(gateway.HeaderAttempt)] = true
	}
	if n := b.up.Calls.Load(); n != 2 || !attempts["1"] || !attempts["2"] {
		t.Fatalf("the backend got %d requests, attempts %v; want attempt 1 from A and 2 from B", n, attempts)
	}
}
