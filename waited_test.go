package idemhook_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// DeliveryInfo.Waited is how long a delivery waited for another one of its
// key, whatever came of it: a replay, or a take-over once the first
// released its claim. It is read from the middleware's clock.
func TestDeliveryInfoWaited(t *testing.T) {
	tests := []struct {
		name        string
		firstStatus int64
		wantSecond  idemhook.Outcome
	}{
		{"the first answers: replayed", 0, idemhook.OutcomeInFlightWaited},
		{"the first fails: taken over", 500, idemhook.OutcomeProcessed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			st, err := memstore.New(memstore.Config{Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			var gets atomic.Int64
			var mu sync.Mutex
			var infos []idemhook.DeliveryInfo
			mw, err := idemhook.New(st, idemhook.Options{
				Now: clk.Now,
				OnStoreCall: func(c idemhook.StoreCallInfo) {
					if c.Op == "get" {
						gets.Add(1)
					}
				},
				OnDelivery: func(d idemhook.DeliveryInfo) {
					mu.Lock()
					infos = append(infos, d)
					mu.Unlock()
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			wrap, err := mw.Route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait, WaitTimeout: time.Minute, Scope: unscoped})
			if err != nil {
				t.Fatal(err)
			}
			b := newBlocker()
			b.status.Store(tt.firstStatus)
			route := wrap(b)
			first := sendAsync(route, `{"id":1}`)
			<-b.started
			second := sendAsync(route, `{"id":1}`)
			for gets.Load() == 0 { // the duplicate is waiting
				time.Sleep(time.Millisecond)
			}
			clk.Advance(2 * time.Second)
			close(b.release)
			<-first
			<-second
			mu.Lock()
			defer mu.Unlock()
			if len(infos) != 2 {
				t.Fatalf("%d deliveries", len(infos))
			}
			if infos[0].Waited != 0 {
				t.Errorf("the first delivery: Waited = %v, want 0", infos[0].Waited)
			}
			if d := infos[1]; d.Outcome != tt.wantSecond || d.Waited != 2*time.Second {
				t.Errorf("the duplicate: %s after waiting %v, want %s after 2s", d.Outcome, d.Waited, tt.wantSecond)
			}
		})
	}
}
