package audit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/syncbuf"
)

// memSink keeps what it is given. When gate is set, each Write first
// signals entered and then waits for gate (or its context).
type memSink struct {
	mu      sync.Mutex
	batches [][]audit.Entry
	entered chan struct{}
	gate    chan struct{}
	fail    error
}

func (m *memSink) Write(ctx context.Context, entries []audit.Entry) error {
	if m.gate != nil {
		m.entered <- struct{}{}
		select {
		case <-m.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if m.fail != nil {
		return m.fail
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches = append(m.batches, slices.Clone(entries))
	return nil
}

func (m *memSink) all() []audit.Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []audit.Entry
	for _, b := range m.batches {
		out = append(out, b...)
	}
	return out
}

func entry(i int) audit.Entry {
	return audit.Entry{Time: base.Add(time.Duration(i) * time.Millisecond), Source: "stone", Key: fmt.Sprint(i), Outcome: "processed", Status: 200}
}

func TestRecorderDelivers(t *testing.T) {
	sink := &memSink{}
	r := audit.NewRecorder(sink, audit.RecorderConfig{BatchSize: 16, FlushInterval: time.Millisecond})
	const producers, each = 8, 250
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				r.Record(entry(p*each + i))
			}
		})
	}
	wg.Wait()
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := sink.all()
	if len(got) != producers*each {
		t.Fatalf("the sink got %d entries, want %d", len(got), producers*each)
	}
	seen := map[string]bool{}
	for _, e := range got {
		if seen[e.Key] {
			t.Fatalf("entry %s written twice", e.Key)
		}
		seen[e.Key] = true
	}
	sink.mu.Lock()
	for i, b := range sink.batches {
		if len(b) == 0 || len(b) > 16 {
			t.Errorf("batch %d has %d entries, want 1..16", i, len(b))
		}
	}
	sink.mu.Unlock()
	if r.Dropped() != 0 || r.Failed() != 0 {
		t.Errorf("dropped %d, failed %d; want 0, 0", r.Dropped(), r.Failed())
	}
}

// TestRecorderFlushInterval: a batch that never fills is written after the
// flush interval, without Close.
func TestRecorderFlushInterval(t *testing.T) {
	sink := &memSink{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	close(sink.gate)
	r := audit.NewRecorder(sink, audit.RecorderConfig{BatchSize: 100, FlushInterval: time.Millisecond})
	defer r.Close(context.Background())
	r.Record(entry(1))
	r.Record(entry(2))
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a partial batch was not written within 10s")
	}
}

func TestRecorderDropsWhenFull(t *testing.T) {
	sink := &memSink{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	var logs bytes.Buffer
	var onDrop atomic.Int64
	const queue = 10
	r := audit.NewRecorder(sink, audit.RecorderConfig{
		QueueSize:     queue,
		BatchSize:     1,
		FlushInterval: time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
		OnDrop:        func(n int) { onDrop.Add(int64(n)) },
	})
	// The first entry reaches the sink, which holds it: it counts against
	// the queue size until written, and nothing drains the queue.
	r.Record(entry(0))
	<-sink.entered
	for i := 1; i < queue; i++ {
		r.Record(entry(i))
	}
	if r.Dropped() != 0 {
		t.Fatalf("dropped %d entries with room in the queue", r.Dropped())
	}
	const extra = 5
	for i := range extra {
		r.Record(entry(100 + i))
	}
	if r.Dropped() != extra || onDrop.Load() != extra {
		t.Fatalf("Dropped() = %d, OnDrop total %d; want %d", r.Dropped(), onDrop.Load(), extra)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d drop WARNs for a burst, want 1 (at most one per second):\n%s", n, logs.String())
	}
	// Let the sink go: Close writes everything that was queued.
	go func() {
		for range sink.entered {
		}
	}()
	close(sink.gate)
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	close(sink.entered)
	if got := len(sink.all()); got != queue {
		t.Fatalf("the sink got %d entries, want %d", got, queue)
	}
	// After Close, Record drops.
	r.Record(entry(999))
	if r.Dropped() != extra+1 {
		t.Errorf("Record after Close: Dropped() = %d, want %d", r.Dropped(), extra+1)
	}
}

// TestRecorderCloseBounded: Close gives up when its context ends, and the
// sink's Write sees its context canceled.
func TestRecorderCloseBounded(t *testing.T) {
	sink := &memSink{entered: make(chan struct{}, 10), gate: make(chan struct{})}
	r := audit.NewRecorder(sink, audit.RecorderConfig{BatchSize: 1})
	r.Record(entry(0))
	r.Record(entry(1))
	<-sink.entered
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with a done context: got %v, want context.Canceled", err)
	}
	// The blocked Write returns once its context is canceled, and the
	// recorder stops. A second Close then returns nil.
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if r.Failed() != 2 {
		t.Errorf("Failed() = %d, want 2 (the canceled write and the unwritten entry)", r.Failed())
	}
}

// flakySink fails every Write while down is set, with the error down. A
// Write may also store only the first partial entries and then fail.
type flakySink struct {
	mu      sync.Mutex
	down    error
	partial int
	got     []audit.Entry
	writes  int
}

func (f *flakySink) Write(ctx context.Context, entries []audit.Entry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.down != nil {
		return f.down
	}
	if n := f.partial; n > 0 && n < len(entries) {
		f.partial = 0
		f.got = append(f.got, entries[:n]...)
		return &audit.PartialWriteError{Written: n, Err: errors.New("connection reset")}
	}
	f.got = append(f.got, entries...)
	return nil
}

func (f *flakySink) set(down error) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *flakySink) entries() []audit.Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A sink that is down at the start and comes back. The entries wait up to
// the queue size, and the rest are dropped and counted. Health says the
// sink fails. Once it is back, every accepted entry is written exactly
// once, in order.
func TestRecorderRetriesUntilTheSinkIsBack(t *testing.T) {
	sink := &flakySink{down: errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")}
	var logs syncbuf.Buffer
	const queue = 10
	r := audit.NewRecorder(sink, audit.RecorderConfig{
		QueueSize: queue, BatchSize: 4, FlushInterval: time.Millisecond,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	defer r.Close(context.Background())
	for i := range queue + 15 {
		r.Record(entry(i))
	}
	if r.Dropped() != 15 {
		t.Fatalf("Dropped() = %d with %d entries over a queue of %d, want 15", r.Dropped(), queue+15, queue)
	}
	eventually(t, "Health reports the failing sink", func() bool {
		waiting, err := r.Health()
		return waiting == queue && err != nil && strings.Contains(err.Error(), "connection refused")
	})
	eventually(t, "the batch is retried", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.writes >= 3
	})
	sink.set(nil)
	eventually(t, "the waiting entries are written", func() bool { return len(sink.entries()) == queue })
	eventually(t, "Health reports the sink recovered", func() bool {
		waiting, err := r.Health()
		return waiting == 0 && err == nil
	})
	for i, e := range sink.entries() {
		if e.Key != fmt.Sprint(i) {
			t.Fatalf("entry %d is %q: entries lost, repeated or reordered", i, e.Key)
		}
	}
	// Down again, later: the same.
	sink.set(errors.New("server closed the connection"))
	r.Record(entry(100))
	eventually(t, "Health reports the second outage", func() bool { _, err := r.Health(); return err != nil })
	sink.set(nil)
	eventually(t, "the entry of the second outage is written", func() bool { return len(sink.entries()) == queue+1 })
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r.Failed() != 0 || r.Dropped() != 15 {
		t.Errorf("Failed() = %d, Dropped() = %d; want 0, 15", r.Failed(), r.Dropped())
	}
	if n := strings.Count(logs.String(), "the sink refuses entries"); n != 2 {
		t.Errorf("%d WARNs for two outages, want 2:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "the sink takes entries again"); n != 2 {
		t.Errorf("%d INFOs for two recoveries, want 2:\n%s", n, logs.String())
	}
}

// A Write that stored part of a batch before failing: only the rest is
// retried, so no entry is stored twice.
func TestRecorderPartialWrite(t *testing.T) {
	sink := &flakySink{partial: 3}
	r := audit.NewRecorder(sink, audit.RecorderConfig{BatchSize: 8, FlushInterval: time.Millisecond, RetryMin: time.Millisecond})
	for i := range 8 {
		r.Record(entry(i))
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := sink.entries()
	if len(got) != 8 {
		t.Fatalf("the sink holds %d entries, want 8", len(got))
	}
	for i, e := range got {
		if e.Key != fmt.Sprint(i) {
			t.Fatalf("entry %d is %q", i, e.Key)
		}
	}
}

// Close gives up on a sink that stays down when its context ends. What
// waited is counted as failed.
func TestRecorderCloseWhileTheSinkIsDown(t *testing.T) {
	sink := &flakySink{down: errors.New("disk full")}
	r := audit.NewRecorder(sink, audit.RecorderConfig{BatchSize: 4, RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	for i := range 10 {
		r.Record(entry(i))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with the sink down: %v, want DeadlineExceeded", err)
	}
	eventually(t, "the recorder stops", func() bool { return r.Failed() == 10 })
	if r.Dropped() != 0 {
		t.Errorf("Dropped() = %d, want 0", r.Dropped())
	}
}

// An entry recorded after Close (a delivery finishing during shutdown) is
// dropped and counted, and the WARN says why. It said "queue full ... the sink
// is down or too slow", sending whoever read it after a clean shutdown to
// look for a sink problem that did not exist.
func TestRecorderDropAfterCloseSaysClosed(t *testing.T) {
	var logs bytes.Buffer
	r := audit.NewRecorder(&memSink{}, audit.RecorderConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.Record(entry(1))
	if r.Dropped() != 1 {
		t.Fatalf("Dropped() = %d, want 1", r.Dropped())
	}
	if got := logs.String(); !strings.Contains(got, "recorder closed") || strings.Contains(got, "queue full") {
		t.Fatalf("WARN after Close:\n%s", got)
	}
}
