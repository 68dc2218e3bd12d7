package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// The hop-by-hop headers (RFC 9110 section 7.6.1), those of the fixed list
// and those the Connection header names, belong to one connection: a
// queued event does not keep the provider's, nor forward them to the
// backend, and a respond_within answer neither passes the backend's to the
// provider nor stores them for the replay.
func TestHopHeadersRemoved(t *testing.T) {
	hop := []string{"Connection", "Keep-Alive", "X-Hop", "X-Hop-Too"}
	t.Run("queued event", func(t *testing.T) {
		up := gatewaytest.NewUpstream(t)
		url, _, _ := startGateway(t, queueConfig(t.TempDir(), up.Srv.URL, "backoff_min: 20ms, backoff_max: 100ms"))
		r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", "hop",
			"Connection", "X-Hop, x-hop-too", "X-Hop", "secret", "X-Hop-Too", "secret", "Keep-Alive", "timeout=5", "X-Kept", "yes")
		if r.Status != http.StatusAccepted {
			t.Fatalf("queued delivery: %d %q; want the accept answer", r.Status, r.Body)
		}
		// The backend gets the event from the queue: what it receives is
		// what was stored.
		testutil.Eventually(t, "the queued event delivered", func() bool { return len(up.Received()) > 0 })
		got := up.Received()[0].Header
		if got.Get("X-Kept") != "yes" {
			t.Errorf("the backend got %v; want X-Kept forwarded", got)
		}
		for _, name := range hop {
			if v, ok := got[http.CanonicalHeaderKey(name)]; ok {
				t.Errorf("the backend got %s: %q, a header of the provider's connection", name, v)
			}
		}
	})
	t.Run("respond_within answer", func(t *testing.T) {
		up := gatewaytest.NewUpstream(t)
		up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Connection", "X-Hop, x-hop-too")
			w.Header().Set("X-Hop", "secret")
			w.Header().Set("X-Hop-Too", "secret")
			w.Header().Set("X-Kept", "yes")
			w.WriteHeader(http.StatusCreated)
		}
		// The route would store and replay the backend's X-Hop headers if
		// they reached the middleware.
		cfg := strings.Replace(hybridConfig(t.TempDir(), up.Srv.URL), "    respond_within: 3s\n",
			"    respond_within: 3s\n    replay_headers: [X-Kept, X-Hop, X-Hop-Too]\n", 1)
		url, _, _ := startGateway(t, cfg)
		for i, what := range []string{"the answer", "its replay"} {
			r := gatewaytest.Post(t, url+"/webhooks/test", "{}", "X-Event-Id", "hop")
			if r.Status != http.StatusCreated || r.Header.Get("X-Kept") != "yes" {
				t.Fatalf("%s: %d %v; want the backend's 201 with X-Kept", what, r.Status, r.Header)
			}
			if replayed := r.Header.Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
				t.Fatalf("%s: Idempotent-Replayed %q", what, r.Header.Get("Idempotent-Replayed"))
			}
			for _, name := range hop[2:] { // Connection and Keep-Alive are the gateway's own
				if v, ok := r.Header[http.CanonicalHeaderKey(name)]; ok {
					t.Errorf("%s carries %s: %q, a header of the backend's connection", what, name, v)
				}
			}
		}
		if n := up.Calls.Load(); n != 1 {
			t.Fatalf("the backend was called %d times; want 1, the second answer a replay", n)
		}
	})
}
