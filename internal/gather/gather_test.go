package gather_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/gather"
)

func TestNext(t *testing.T) {
	queue := make(chan int, 10)
	stop := make(chan struct{})
	for i := range 5 {
		queue <- i
	}
	batch, ok := gather.Next(nil, queue, stop, 3)
	if !ok || !slices.Equal(batch, []int{0, 1, 2}) {
		t.Fatalf("first batch %v, %v; want [0 1 2] (max 3)", batch, ok)
	}
	batch, ok = gather.Next(batch, queue, stop, 3)
	if !ok || !slices.Equal(batch, []int{3, 4}) {
		t.Fatalf("second batch %v, %v; want [3 4] (what waits)", batch, ok)
	}
	go func() { queue <- 7 }()
	if batch, ok = gather.Next(batch, queue, stop, 3); !ok || !slices.Equal(batch, []int{7}) {
		t.Fatalf("batch after waiting %v, %v; want [7]", batch, ok)
	}
	close(stop)
	if batch, ok = gather.Next(batch, queue, stop, 3); ok || len(batch) != 0 {
		t.Fatalf("after stop: %v, %v; want no items and false", batch, ok)
	}
}

func TestWorkers(t *testing.T) {
	var mu sync.Mutex
	var got []int
	batches := 0
	w := gather.Start(2, 4, func(batch []int) {
		mu.Lock()
		got = append(got, batch...)
		batches++
		mu.Unlock()
	})
	for i := range 100 {
		w.Queue() <- i
	}
	w.Close()
	slices.Sort(got)
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("exec saw %v in %d batches, want 0..99 once each", got, batches)
	}
	select {
	case <-w.Stopped():
	default:
		t.Fatal("Stopped is not closed after Close")
	}
}

func TestDeadline(t *testing.T) {
	now := time.Now()
	short, cancel1 := context.WithDeadline(context.Background(), now.Add(time.Second))
	defer cancel1()
	long, cancel2 := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancel2()

	var d gather.Deadline
	d.Add(short)
	d.Add(long)
	ctx, cancel := d.Context()
	if dl, ok := ctx.Deadline(); !ok || !dl.Equal(now.Add(time.Hour)) {
		t.Errorf("deadline %v, %v; want the latest, %v", dl, ok, now.Add(time.Hour))
	}
	cancel()

	d.Add(context.Background())
	ctx, cancel = d.Context()
	if _, ok := ctx.Deadline(); ok {
		t.Error("a call without a deadline left the batch with one")
	}
	cancel()
}

// waitFor polls cond until it holds or a deadline of 10s passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// noWorkers waits until no goroutine runs a Workers' loop: those of an
// earlier test may still be returning after their Close.
func noWorkers(t *testing.T) {
	t.Helper()
	waitFor(t, "goroutines of Workers left", func() bool { return gather.Live() == 0 })
}

// TestIdleWorkers checks that Workers from StartIdle start no goroutine
// until an item comes, serve every item of concurrent callers, and leave
// no goroutine once idle, however many ran.
func TestIdleWorkers(t *testing.T) {
	noWorkers(t)
	var mu sync.Mutex
	var got []int
	w := gather.StartIdle(3, 4, 20*time.Millisecond, time.Millisecond, func(batch []int) {
		mu.Lock()
		got = append(got, batch...)
		mu.Unlock()
	})
	defer w.Close()
	if n := gather.Live(); n != 0 || w.Running() != 0 {
		t.Fatalf("%d goroutines (%d counted) before the first Put, want 0", n, w.Running())
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				if err := w.Put(t.Context(), round*100+i); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if r := w.Running(); r < 1 || r > 3 {
			t.Fatalf("round %d: %d goroutines counted, want 1 to 3", round, r)
		}
		waitFor(t, "goroutines left after the idle period", func() bool {
			return gather.Live() == 0 && w.Running() == 0
		})
	}
	mu.Lock()
	slices.Sort(got)
	mu.Unlock()
	if len(got) != 300 || got[0] != 0 || got[299] != 299 {
		t.Fatalf("exec saw %d items, want 0..299 once each", len(got))
	}
}

// TestIdleWorkersRetiring has Puts arrive while the goroutines retire, many
// times over: none must be left waiting for a goroutine that has gone.
func TestIdleWorkersRetiring(t *testing.T) {
	var done atomic.Int64
	w := gather.StartIdle(2, 4, time.Microsecond, time.Microsecond, func(batch []int) { done.Add(int64(len(batch))) })
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				if err := w.Put(ctx, i); err != nil {
					t.Errorf("caller %d, Put %d: %v (stranded)", g, i, err)
					return
				}
				if i%16 == 0 {
					time.Sleep(time.Duration(i%3) * 10 * time.Microsecond)
				}
			}
		})
	}
	wg.Wait()
	w.Close() // waits for the batches running
	if n := done.Load(); n != 8000 {
		t.Fatalf("exec saw %d items, want 8000", n)
	}
}

// TestIdleWorkersClose checks that Close stops running goroutines at once,
// without waiting for the idle period, and that Put then fails.
func TestIdleWorkersClose(t *testing.T) {
	noWorkers(t)
	w := gather.StartIdle(2, 4, time.Hour, time.Hour, func([]int) {})
	for i := range 10 {
		if err := w.Put(t.Context(), i); err != nil {
			t.Fatal(err)
		}
	}
	if gather.Live() == 0 {
		t.Fatal("no goroutine after Put")
	}
	w.Close()
	if n := w.Running(); n != 0 {
		t.Fatalf("%d goroutines counted after Close, want 0", n)
	}
	// Close has waited for them; what remains is their last return.
	noWorkers(t)
	w.Close() // twice is fine
	if err := w.Put(t.Context(), 1); !errors.Is(err, gather.ErrStopped) {
		t.Fatalf("Put after Close: %v, want ErrStopped", err)
	}
}

// TestIdleWorkersGather checks that while a batch runs, the items that
// arrive wait for it instead of starting more goroutines: with a stall
// period longer than the test, 64 concurrent callers are served by one
// goroutine, in batches of several items.
func TestIdleWorkersGather(t *testing.T) {
	noWorkers(t)
	var batches, items, most atomic.Int64
	w := gather.StartIdle(4, 256, time.Hour, time.Hour, func(batch []int) {
		batches.Add(1)
		items.Add(int64(len(batch)))
		if n := int64(gather.Live()); n > most.Load() {
			most.Store(n) // one goroutine runs exec at a time here: no race on most
		}
		time.Sleep(100 * time.Microsecond) // a round trip, during which callers gather
	})
	defer w.Close()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 50 {
				if err := w.Put(t.Context(), g*50+i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	w.Close() // a Put returns once its item is taken: wait for the last batch to run
	if n := items.Load(); n != 64*50 {
		t.Fatalf("exec saw %d items, want %d", n, 64*50)
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d goroutines ran at once, want 1 (none stalled)", m)
	}
	if b := batches.Load(); b >= 64*50/2 {
		t.Fatalf("%d batches for %d items: the callers did not gather", b, 64*50)
	}
}

// TestIdleWorkersStall checks that a batch that runs longer than the stall
// period does not hold up the items that arrive meanwhile: another
// goroutine starts and runs them while the first is still stalled.
// TestIdleWorkersStallLatePut: an item put after the batch has already
// run for longer than the stall period, with nothing waiting when that
// period ended, still starts another goroutine instead of waiting for the
// stalled batch to end. (On a loaded machine TestIdleWorkersStall's Put can
// come that late too.)
func TestIdleWorkersStallLatePut(t *testing.T) {
	noWorkers(t)
	stalled, release := make(chan struct{}), make(chan struct{})
	second := make(chan int, 1)
	w := gather.StartIdle(2, 4, time.Hour, time.Millisecond, func(batch []int) {
		if batch[0] == 1 {
			close(stalled)
			<-release
			return
		}
		second <- batch[0]
	})
	defer w.Close()
	defer close(release)
	if err := w.Put(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	<-stalled
	// Let the first stall period end with nothing waiting: 50 times the
	// period. (Sleeping sets the scene; nothing below waits for a time.)
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := w.Put(ctx, 2); err != nil {
		t.Fatalf("Put after the stall period, behind a stalled batch: %v", err)
	}
	select {
	case v := <-second:
		if v != 2 {
			t.Fatalf("second batch starts with %d, want 2", v)
		}
	case <-ctx.Done():
		t.Fatal("the item behind a stalled batch did not run")
	}
}

func TestIdleWorkersStall(t *testing.T) {
	noWorkers(t)
	stalled, release := make(chan struct{}), make(chan struct{})
	second := make(chan int, 1)
	w := gather.StartIdle(2, 4, time.Hour, time.Millisecond, func(batch []int) {
		if batch[0] == 1 {
			close(stalled)
			<-release // stalled, as a WAIT for a replica that doesn't answer
			return
		}
		second <- batch[0]
	})
	defer w.Close()
	defer close(release)
	if err := w.Put(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	<-stalled // item 1's batch runs, without item 2
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := w.Put(ctx, 2); err != nil {
		t.Fatalf("Put behind a stalled batch: %v", err)
	}
	select {
	case v := <-second:
		if v != 2 {
			t.Fatalf("second batch starts with %d, want 2", v)
		}
	case <-ctx.Done():
		t.Fatal("the item behind a stalled batch did not run")
	}
	if r := w.Running(); r != 2 {
		t.Fatalf("%d goroutines counted, want 2", r)
	}
}
