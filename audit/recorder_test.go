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
	// The first entry reaches the sink, which holds it: the queue is empty
	// and nothing drains it.
	r.Record(entry(0))
	<-sink.entered
	for i := 1; i <= queue; i++ {
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
	if got := len(sink.all()); got != 1+queue {
		t.Fatalf("the sink got %d entries, want %d", got, 1+queue)
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
	// recorder stops; a second Close then returns nil.
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if r.Failed() != 2 {
		t.Errorf("Failed() = %d, want 2 (the canceled write and the unwritten entry)", r.Failed())
	}
}

func TestRecorderWriteError(t *testing.T) {
	sink := &memSink{fail: errors.New("disk full")}
	var logs bytes.Buffer
	r := audit.NewRecorder(sink, audit.RecorderConfig{BatchSize: 4, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 10 {
		r.Record(entry(i))
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r.Failed() != 10 || r.Dropped() != 0 {
		t.Errorf("Failed() = %d, Dropped() = %d; want 10, 0", r.Failed(), r.Dropped())
	}
	if !strings.Contains(logs.String(), "disk full") {
		t.Errorf("the write error was not logged: %q", logs.String())
	}
}

// TestRecorderSQLite runs the recorder into the real SQLite sink.
func TestRecorderSQLite(t *testing.T) {
	s := newSQLite(t, time.Now)
	r := audit.NewRecorder(s, audit.RecorderConfig{BatchSize: 64})
	written := dataset(500)
	for _, e := range written {
		r.Record(e)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, _ := queryAll(t, s, audit.Filter{Limit: audit.MaxLimit})
	sameEntries(t, "recorded", got, expected(written, audit.Filter{}))
}

// An entry recorded after Close (a delivery finishing during shutdown) is
// dropped and counted; the WARN says why. It said "queue full ... the sink
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
