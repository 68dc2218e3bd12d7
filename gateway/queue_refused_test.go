package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// runCounter is a backend that counts the runs of each X-Event-Id.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *runCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.runs[r.Header.Get("X-Event-Id")]++
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (c *runCounter) count() (events, runs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.runs {
		events++
		runs += n
	}
	return events, runs
}

// The configuration on the SQLite store: a queued route whose
// backend refuses connections (nothing listens on its port), beside a
// healthy proxy route. Senders behave like providers, sending each event
// again until it is answered 2xx. The healthy route runs each event exactly
// once, every event to the queued route is accepted at its first delivery
// (no 503), and once the backend listens the queue drains within seconds.
func TestQueueRefusedBackendBesideAHealthyRoute(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := l.Addr().String()
	l.Close() // nothing listens there until the backend comes back
	healthy := &runCounter{runs: map[string]int{}}
	hsrv := &http.Server{Handler: healthy}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hsrv.Serve(hl)
	t.Cleanup(func() { hsrv.Close() })

	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - {path: /q, upstream: "http://%s/q", source: q, header: x-event-id, deliver: queue}
  - {path: /p, upstream: "http://%s/p", source: p, header: x-event-id}
`, filepath.Join(t.TempDir(), "idemhook.db"), refusedAddr, hl.Addr().String())
	url, g, _ := startGateway(t, text)

	const events, senders = 60, 6
	var mu sync.Mutex
	answers := map[string]map[int]int{"/q": {}, "/p": {}} // route -> status -> count
	firstNot2xx := map[string]int{}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := s; i < events; i += senders {
				for _, route := range []string{"/q", "/p"} {
					id := fmt.Sprintf("%s-%d", route[1:], i)
					for try := 0; ; try++ {
						r := gatewaytest.Post(t, url+route, "{}", "X-Event-Id", id)
						mu.Lock()
						answers[route][r.Status]++
						if r.Status/100 != 2 && try == 0 {
							firstNot2xx[route]++
						}
						mu.Unlock()
						if r.Status/100 == 2 {
							break
						}
						if try == 50 {
							t.Errorf("%s %s: no 2xx in 50 tries (last %d %s)", route, id, r.Status, r.Body)
							break
						}
						time.Sleep(20 * time.Millisecond) // the provider's backoff
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("answers: %v", answers)
	if n, runs := healthy.count(); n != events || runs != events {
		t.Errorf("healthy route: %d events in %d runs; want %d once each", n, runs, events)
	}
	if answers["/q"][http.StatusServiceUnavailable] != 0 || firstNot2xx["/q"] != 0 || answers["/q"][http.StatusAccepted] != events {
		t.Errorf("queued route answers %v; want %d accepts, no 503", answers["/q"], events)
	}

	// The backend comes back on its port.
	queued := &runCounter{runs: map[string]int{}}
	ql, err := net.Listen("tcp", refusedAddr)
	if err != nil {
		t.Fatalf("the backend's port was taken meanwhile: %v", err)
	}
	qsrv := &http.Server{Handler: queued}
	go qsrv.Serve(ql)
	t.Cleanup(func() { qsrv.Close() })
	back := time.Now()
	deadline := back.Add(15 * time.Second)
	for {
		if n, _ := queued.count(); n == events {
			break
		}
		if time.Now().After(deadline) {
			n, _ := queued.count()
			t.Fatalf("%d of %d queued events delivered 15s after the backend came back", n, events)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the queue drained %v after the backend came back", time.Since(back).Round(time.Millisecond))
	queueDrained(t, g)
	if n, runs := queued.count(); n != events || runs != events {
		t.Errorf("queued route: %d events in %d runs; want %d once each", n, runs, events)
	}
}
