package idemhook_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// Route.Lease replaces Options.Lease for one route: the pending claim lives
// that long (a duplicate after it takes over), and a wait that times out
// says so in Retry-After.
func TestRouteLease(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{Lease: time.Minute})
	b := newBlocker()
	defer close(b.release)
	short := e.route(idemhook.Route{Source: "short", Lease: 7 * time.Second, InFlight: idemhook.InFlightWait, WaitTimeout: 10 * time.Millisecond}, b)
	sendAsync(short, `{"id":1}`)
	<-b.started
	r := send(short, `{"id":1}`)
	if r.Code != 409 || r.Header().Get("Retry-After") != "7" {
		t.Errorf("a duplicate that waited out WaitTimeout: %d Retry-After %q, want 409 and 7 (the route's lease)", r.Code, r.Header().Get("Retry-After"))
	}
	// Past the route's lease (well before its first renewal, due after
	// Lease/3 of real time), the claim has lapsed: a duplicate claims it.
	e.clock.Advance(8 * time.Second)
	sendAsync(short, `{"id":1}`)
	select {
	case <-b.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the duplicate did not take over a claim past the route's lease")
	}

	other := e.route(idemhook.Route{Source: "other", InFlight: idemhook.InFlightWait, WaitTimeout: 10 * time.Millisecond}, b)
	go send(other, `{"id":2}`)
	<-b.started
	if r := send(other, `{"id":2}`); r.Header().Get("Retry-After") != "60" {
		t.Errorf("without Route.Lease, Retry-After = %q, want 60 (Options.Lease)", r.Header().Get("Retry-After"))
	}
	for _, bad := range []time.Duration{-time.Second, time.Microsecond} {
		if _, err := e.mw.Route(idemhook.Route{Source: "x", Lease: bad}); err == nil || !strings.Contains(err.Error(), "Lease") {
			t.Errorf("Route with Lease %v: %v, want an error naming Lease", bad, err)
		}
	}
}
