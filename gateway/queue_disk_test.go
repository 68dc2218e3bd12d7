package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// A queue whose disk falls under the free-space floor answers new events
// 503 with Retry-After, keeping nothing (their claims are released), and
// accepts again once space returns. The floor is raised above the disk's free space to stand for a
// full disk.
func TestQueueRefusesWhenTheDiskIsAlmostFull(t *testing.T) {
	if _, ok := freeBytes(t.TempDir()); !ok {
		t.Skip("no statfs here")
	}
	up := gatewaytest.NewUpstream(t)
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /hook
    upstream: %s/hook
    source: test
    header: x-event-id
    deliver: queue
`, filepath.Join(t.TempDir(), "idemhook.db"), up.Srv.URL)
	cfg, err := config.Parse("f.yaml", []byte(text), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(t.Context())
	setMinFreeDisk(g, 1<<62)
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	r := gatewaytest.Post(t, srv.URL+"/hook", "{}", "X-Event-Id", "a")
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("with the disk almost full: %d %v; want 503 with Retry-After", r.Status, r.Header)
	}
	if rec, err := g.store.Get(t.Context(), "idem:test:a"); err != nil || rec != nil {
		t.Fatalf("the refused event's key holds %+v, %v; want nothing claimed", rec, err)
	}
	setMinFreeDisk(g, 0)
	testutil.Eventually(t, "accepted once space is back", func() bool {
		return gatewaytest.Post(t, srv.URL+"/hook", "{}", "X-Event-Id", "a").Status == http.StatusAccepted
	})
	testutil.Eventually(t, "delivered", func() bool { return up.Calls.Load() == 1 })
}

// A re-delivery of an event the queue accepted is answered its stored
// accept (a replay) while the disk is almost full: the disk is checked only
// once the claim found nothing stored, so only new events are refused, and
// the accepted event reaches the backend once.
func TestQueueReplaysAcceptedEventsWhenTheDiskIsAlmostFull(t *testing.T) {
	if _, ok := freeBytes(t.TempDir()); !ok {
		t.Skip("no statfs here")
	}
	up := gatewaytest.NewUpstream(t)
	release := make(chan struct{})
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		<-release // the backend holds each attempt until the test lets it go
		w.WriteHeader(http.StatusOK)
	}
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /hook
    upstream: %s/hook
    source: test
    header: x-event-id
    deliver: queue
`, filepath.Join(t.TempDir(), "idemhook.db"), up.Srv.URL)
	cfg, err := config.Parse("f.yaml", []byte(text), gatewaytest.EnvOf())
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(t.Context())
	setMinFreeDisk(g, 0)
	defer close(release)
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	if r := gatewaytest.Post(t, srv.URL+"/hook", "{}", "X-Event-Id", "a"); r.Status != http.StatusAccepted {
		t.Fatalf("event a with space: %d", r.Status)
	}
	setMinFreeDisk(g, 1<<62)
	testutil.Eventually(t, "the disk taken for almost full", func() bool { return g.queues.Load().diskLow.Load() })
	for range 2 {
		r := gatewaytest.Post(t, srv.URL+"/hook", "{}", "X-Event-Id", "a")
		if r.Status != http.StatusAccepted || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("re-delivery of accepted event a with the disk almost full: %d %v %s; want its accept replayed", r.Status, r.Header, r.Body)
		}
	}
	if r := gatewaytest.Post(t, srv.URL+"/hook", "{}", "X-Event-Id", "b"); r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("new event b with the disk almost full: %d %v; want 503 with Retry-After", r.Status, r.Header)
	}
	if rec, err := g.store.Get(t.Context(), "idem:test:b"); err != nil || rec != nil {
		t.Fatalf("the refused event's key holds %+v, %v; want its claim released", rec, err)
	}
	release <- struct{}{}
	testutil.Eventually(t, "event a delivered", func() bool { return up.Calls.Load() == 1 })
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("%d attempts; want event a's one", n)
	}
}

// setMinFreeDisk sets the free-space floor of g's queue and checks the disk
// against it at once, as the queue's next tick would.
func setMinFreeDisk(g *Gateway, floor uint64) {
	q := g.queues.Load()
	q.minFreeDisk.Store(floor)
	q.checkDisk()
}
