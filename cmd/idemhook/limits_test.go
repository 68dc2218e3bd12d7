package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// heldBackend is an upstream that counts each event it runs (by the
// body's id) and holds the deliveries whose body says "hold" until release
// is closed.
type heldBackend struct {
	mu      sync.Mutex
	runs    map[string]int
	release chan struct{}
	entered chan struct{}
}

func newHeldBackend(t *testing.T) (*heldBackend, *httptest.Server) {
	b := &heldBackend{runs: map[string]int{}, release: make(chan struct{}), entered: make(chan struct{}, 64)}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	t.Cleanup(b.unblock)
	return b, srv
}

func (b *heldBackend) unblock() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

func (b *heldBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		ID   string
		Hold bool
	}
	json.NewDecoder(r.Body).Decode(&ev) //nolint:errcheck // a bad body counts as the event ""
	b.mu.Lock()
	b.runs[ev.ID]++
	b.mu.Unlock()
	if ev.Hold {
		b.entered <- struct{}{}
		<-b.release
	}
	fmt.Fprintf(w, `{"ran":%q}`, ev.ID)
}

// ranOnce fails t unless exactly the events ids ran, each once.
func (b *heldBackend) ranOnce(t *testing.T, ids ...string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if b.runs[id] != 1 {
			t.Errorf("%s ran %d times, want 1", id, b.runs[id])
		}
	}
	if len(b.runs) != len(ids) {
		t.Errorf("the backend ran %v, want exactly %v", b.runs, ids)
	}
}

// rawPost sends one POST of body on the connection c and reads the answer.
func rawPost(t *testing.T, c net.Conn, path, body string) *http.Response {
	t.Helper()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestDeliveryAndConnectionLimits(t *testing.T) {
	backend, srv := newHeldBackend(t)
	cfg := routeConfig(srv.URL) + "limits: {max_connections: 4, max_deliveries: 2}\n"
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	url := g.url("/webhooks/test")
	var conns []net.Conn
	dial := func() net.Conn {
		c, err := net.Dial("tcp", g.Listen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		return c
	}

	// Two deliveries held in the backend: as many as max_deliveries.
	held := make(chan *http.Response, 2)
	for _, id := range []string{"evt_h1", "evt_h2"} {
		c := dial()
		go func() { held <- rawPost(t, c, "/webhooks/test", `{"id":"`+id+`","hold":true}`) }()
		<-backend.entered
	}
	// A third is answered 503 without reaching the backend.
	third := dial()
	r := rawPost(t, third, "/webhooks/test", `{"id":"evt_3"}`)
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "max_deliveries") {
		t.Fatalf("past max_deliveries: %d %v %s", r.StatusCode, r.Header, body)
	}
	// Four connections are open (two held, the third kept alive, one
	// idle): a fifth gets one 503 and is closed.
	dial()
	eventually(t, "4 connections open", func() bool { return metricValue(t, g.adminURL("/metrics"), "idemhook_connections_open") == 4 })
	fifth := dial()
	r = rawPost(t, fifth, "/webhooks/test", `{"id":"evt_5"}`)
	body, _ = io.ReadAll(r.Body)
	if r.StatusCode != http.StatusServiceUnavailable || !r.Close || !strings.Contains(string(body), "max_connections") {
		t.Fatalf("past max_connections: %d close=%v %s", r.StatusCode, r.Close, body)
	}
	if _, err := fifth.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the fifth connection was not closed: %v", err)
	}
	// The admin listener answers while the public one is saturated.
	if r := do(t, "GET", g.adminURL("/healthz"), ""); r.Status != http.StatusOK {
		t.Fatalf("/healthz while saturated: %d", r.Status)
	}

	backend.unblock()
	for range 2 {
		if r := <-held; r.StatusCode != http.StatusOK {
			t.Fatalf("held delivery: %d", r.StatusCode)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	eventually(t, "the connections closed", func() bool { return metricValue(t, g.adminURL("/metrics"), "idemhook_connections_open") == 0 })
	// The provider's retries of the two refused events go through.
	for _, id := range []string{"evt_3", "evt_5"} {
		if r := post(t, url, `{"id":"`+id+`"}`); r.Status != http.StatusOK {
			t.Fatalf("retry of %s: %d %s", id, r.Status, r.Body)
		}
	}
	backend.ranOnce(t, "evt_h1", "evt_h2", "evt_3", "evt_5")
	for _, m := range []string{`idemhook_overload_refused_total{reason="deliveries"}`, `idemhook_overload_refused_total{reason="connections"}`} {
		if v := metricValue(t, g.adminURL("/metrics"), m); v != 1 {
			t.Errorf("%s = %v, want 1", m, v)
		}
	}
}

// TestFileLimitFlood runs the gateway with 256 open files and opens 1,000
// connections to it at once: with the limits derived from the file limit
// the admin listener keeps answering during the flood; with a
// max_connections set past what the file limit allows the accepts fail
// with EMFILE, which is logged at a bounded rate. Either way the gateway
// answers a delivery again once the flood is gone, and each event runs
// once.
func TestFileLimitFlood(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	for _, tt := range []struct {
		name   string
		limits string
		emfile bool
	}{
		{"derived limits", "", false},
		{"max_connections past the file limit", "limits: {max_connections: 900}\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			backend, srv := newHeldBackend(t)
			backend.unblock()
			dir := t.TempDir()
			cfg := routeConfig(srv.URL) + tt.limits
			p := startProcWith(t, []string{prlimit, "--nofile=256:256", "--"}, writeConfig(t, dir, cfg))
			if !tt.emfile {
				p.waitLog(t, "max_connections=64")
			}
			const flood = 1000
			conns := make([]net.Conn, 0, flood)
			for range flood {
				c, err := net.DialTimeout("tcp", p.Listen, 2*time.Second)
				if err != nil {
					continue // the backlog is full: the flood is as large as it gets
				}
				fmt.Fprint(c, "POST /webhooks/test HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n") // a body that never comes
				conns = append(conns, c)
			}
			t.Logf("%d connections open", len(conns))
			if !tt.emfile {
				if r := do(t, "GET", p.adminURL("/healthz"), ""); r.Status != http.StatusOK {
					t.Fatalf("/healthz during the flood: %d", r.Status)
				}
			} else {
				p.waitLog(t, "idemhook accept failed")
			}
			for _, c := range conns {
				c.Close()
			}
			gone := time.Now()
			client := &http.Client{Timeout: 2 * time.Second}
			for i := 0; ; i++ {
				resp, err := client.Post(p.url("/webhooks/test"), "application/json", strings.NewReader(`{"id":"evt_after"}`))
				if err == nil {
					io.Copy(io.Discard, resp.Body) //nolint:errcheck
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
				if time.Since(gone) > 30*time.Second {
					t.Fatalf("no 200 within 30s of the flood (last: %v)\n%s", err, p.stderr)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("answered 200 %v after the flood's connections were closed", time.Since(gone).Round(time.Millisecond))
			backend.ranOnce(t, "evt_after")
			if lines := strings.Count(p.stderr.String(), "idemhook accept failed"); tt.emfile && lines > 4 {
				t.Errorf("%d accept-error lines: want at most one every 5s\n%s", lines, p.stderr)
			}
		})
	}
}
