package gather_test

import (
	"context"
	"slices"
	"sync"
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
