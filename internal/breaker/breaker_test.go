package breaker

import (
	"sync"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestBreakerOpensAfterThresholdAndProbes(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	var changes []bool
	b := New(3, time.Second, c.now, func(open bool) { changes = append(changes, open) })

	for i := range 2 {
		if !b.Allow() {
			t.Fatalf("call %d refused while closed", i)
		}
		b.Done(false)
	}
	if b.Open() {
		t.Fatal("open after 2 failures, threshold 3")
	}
	b.Allow()
	b.Done(false)
	if !b.Open() || b.Allow() {
		t.Fatal("want open and refusing after 3 failures")
	}
	c.t = c.t.Add(999 * time.Millisecond)
	if b.Allow() {
		t.Fatal("allowed before the cooldown passed")
	}
	c.t = c.t.Add(time.Millisecond)
	if !b.Allow() {
		t.Fatal("probe refused after the cooldown")
	}
	if b.Allow() {
		t.Fatal("a second probe was allowed while the first is out")
	}
	b.Done(false) // probe failed: open again for a full cooldown
	if b.Allow() {
		t.Fatal("allowed right after a failed probe")
	}
	c.t = c.t.Add(time.Second)
	if !b.Allow() {
		t.Fatal("second probe refused")
	}
	b.Done(true)
	if b.Open() || !b.Allow() {
		t.Fatal("want closed after a successful probe")
	}
	if want := []bool{true, false}; len(changes) != 2 || changes[0] != want[0] || changes[1] != want[1] {
		t.Fatalf("changes = %v, want %v", changes, want)
	}
}

func TestBreakerSuccessResetsFailures(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	b := New(2, time.Second, c.now, nil)
	b.Done(false)
	b.Done(true)
	b.Done(false)
	if b.Open() {
		t.Fatal("opened although the failures were not consecutive")
	}
}

func TestBreakerDisabled(t *testing.T) {
	b := New(0, time.Second, time.Now, nil)
	for range 100 {
		b.Done(false)
	}
	if b.Open() || !b.Allow() {
		t.Fatal("a breaker with threshold 0 opened")
	}
}

func TestBreakerConcurrentUse(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	b := New(5, time.Hour, c.now, nil)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 100 {
				if b.Allow() {
					b.Done(false)
				}
			}
		})
	}
	wg.Wait()
	if !b.Open() {
		t.Fatal("breaker closed after 5000 failures")
	}
}
