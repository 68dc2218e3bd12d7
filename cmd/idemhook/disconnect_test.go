package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
)

// TestSenderDisconnectStillStores: providers give up on a slow answer
// (iFood after 5 s, Slack after 3 s) and retry. The backend, like most
// (NestJS included), keeps processing when the gateway's connection to it
// closes, so the gateway must not abort its upstream call when the sender
// hangs up: it lets the backend answer, stores the answer, and replays it
// to the retry. Aborting released the claim and forwarded the retry again:
// the event was processed twice.
func TestSenderDisconnectStillStores(t *testing.T) {
	up := newUpstream(t)
	arrived, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	up.handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			close(arrived)
			<-release // a backend that does not watch its connection
			defer close(finished)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("call " + string(rune('0'+n))))
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.srv.URL, "header: x-key")), startOpts{})

	ctx, hangUp := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url("/webhooks/test"), strings.NewReader(`{"id":"evt_slow"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-key", "k1")
	sent := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	<-arrived
	hangUp() // the provider's timeout
	if err := <-sent; err == nil {
		t.Fatal("the sender's request was not cut")
	}
	close(release)
	<-finished
	state := ""
	waitFor(t, "the first delivery to be settled", func() bool {
		r := do(t, "GET", g.adminURL("/admin/keys/test/k1"), "")
		if r.Status == http.StatusNotFound {
			state = "absent"
			return true
		}
		state = decodeJSON[recordJSON](t, r).State
		return state != "pending"
	})
	if state != "completed" {
		t.Fatalf("after the sender hung up and the backend answered, the key is %s, want completed", state)
	}
	r := post(t, g.url("/webhooks/test"), `{"id":"evt_slow"}`, "x-key", "k1")
	if r.Body != "call 1" || r.Header.Get(idemhook.ReplayedHeader) != "true" || up.calls.Load() != 1 {
		t.Fatalf("retry = %d %q replayed=%q, upstream calls %d; want the stored \"call 1\" replayed, 1 call",
			r.Status, r.Body, r.Header.Get(idemhook.ReplayedHeader), up.calls.Load())
	}
}
