package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/syncbuf"
)

// TestChildGateway is not a test of its own: it is the gateway process the
// crash tests start, kill with SIGKILL and start again. It runs only when
// IDEMHOOK_CHILD_CONFIG names a configuration; it writes its addresses as
// JSON to IDEMHOOK_CHILD_READY.
func TestChildGateway(t *testing.T) {
	cfg := os.Getenv("IDEMHOOK_CHILD_CONFIG")
	if cfg == "" {
		t.Skip("the gateway child process of the crash tests; runs only when started by them")
	}
	err := runEnv(context.Background(), env{
		args:   []string{"serve", "--config", cfg},
		getenv: os.Getenv,
		stdout: os.Stdout,
		stderr: os.Stderr,
		ready: func(a addrs) {
			b, _ := json.Marshal(a)
			tmp := os.Getenv("IDEMHOOK_CHILD_READY") + ".tmp"
			os.WriteFile(tmp, b, 0o600)                       //nolint:errcheck
			os.Rename(tmp, os.Getenv("IDEMHOOK_CHILD_READY")) //nolint:errcheck
		},
	})
	t.Fatalf("the gateway returned: %v", err)
}

// child is a gateway in a process of its own.
type child struct {
	cmd  *exec.Cmd
	addr addrs
	log  *syncbuf.Buffer
}

// startChild runs the gateway on configPath in a child process and waits
// until it listens.
func startChild(t *testing.T, configPath string) *child {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildGateway$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEMHOOK_CHILD_CONFIG="+configPath, "IDEMHOOK_CHILD_READY="+ready)
	c := &child{cmd: cmd, log: &syncbuf.Buffer{}}
	cmd.Stdout, cmd.Stderr = io.Discard, c.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) //nolint:errcheck
	for range 3000 {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &c.addr) == nil {
			return c
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the gateway child did not start within 30s; log:\n%s", c.log)
	return nil
}

// kill ends the child with SIGKILL, as a crash or an OOM kill would.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.cmd.Wait() //nolint:errcheck // killed
}

// A gateway killed with SIGKILL while its deliveries are at the upstream
// leaves their claims pending in the SQLite file. Restarted on the file, it
// frees them at once (the file's lock says their owner is dead), so each
// killed event runs exactly once more when the provider retries, and is
// replayed after that; under wait the retry is not held for wait_timeout
// and then refused, under reject it is not refused with 409.
func TestKilledGatewayRunsEachEventOnceMore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gateway processes")
	}
	for _, policy := range []string{"wait", "reject"} {
		t.Run(policy, func(t *testing.T) {
			up := newUpstream(t)
			hold := make(chan struct{})
			var holdOnce sync.Once
			t.Cleanup(func() { holdOnce.Do(func() { close(hold) }) })
			calls := map[string]int{}
			var mu sync.Mutex
			up.handle = func(w http.ResponseWriter, r *http.Request, n int64) {
				var ev struct{ ID string }
				json.Unmarshal(up.received()[n-1].Body, &ev) //nolint:errcheck
				mu.Lock()
				calls[ev.ID]++
				first := calls[ev.ID] == 1
				mu.Unlock()
				if first {
					select { // at the backend when the gateway dies
					case <-hold:
					case <-r.Context().Done():
					}
					return
				}
				fmt.Fprintf(w, `{"processed":%q}`, ev.ID)
			}
			dir := t.TempDir()
			cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
    in_flight: %s
`, filepath.Join(dir, "state.db"), up.srv.URL, policy)
			path := writeConfig(t, dir, cfg)

			const events = 5
			gw := startChild(t, path)
			for i := range events {
				go http.Post("http://"+gw.addr.Listen+"/webhooks/test", "application/json", //nolint:errcheck,bodyclose // the gateway dies under it
					strings.NewReader(fmt.Sprintf(`{"id":"evt_%d"}`, i)))
			}
			for up.calls.Load() < events {
				time.Sleep(time.Millisecond)
			}
			gw.kill(t)

			gw = startChild(t, path)
			if !strings.Contains(gw.log.String(), "freed_pending_claims="+fmt.Sprint(events)) {
				t.Errorf("the restarted gateway did not report freeing %d claims; log:\n%s", events, gw.log)
			}
			url := "http://" + gw.addr.Listen + "/webhooks/test"
			for round, wantReplayed := range []string{"", "true"} {
				for i := range events {
					r := post(t, url, fmt.Sprintf(`{"id":"evt_%d"}`, i))
					if r.Status != 200 || r.Header.Get("Idempotent-Replayed") != wantReplayed {
						t.Fatalf("round %d, evt_%d after the restart: %d %q replayed=%q", round, i, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"))
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range events {
				if n := calls[fmt.Sprintf("evt_%d", i)]; n != 2 {
					t.Errorf("evt_%d reached the upstream %d times, want 2 (the killed delivery and its retry)", i, n)
				}
			}
		})
	}
}

// A second gateway process on the same SQLite file is refused at start.
func TestSecondGatewayOnOneSQLiteFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.srv.URL), "store: {driver: memory}", fmt.Sprintf("store: {driver: sqlite, path: %q}", db), 1)
	path := writeConfig(t, dir, cfg)
	startGateway(t, path, startOpts{})
	var stderr strings.Builder
	err := run(t.Context(), []string{"serve", "--config", path}, func(string) string { return "" }, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "is held by process") || !strings.Contains(err.Error(), "one gateway process per SQLite file") {
		t.Fatalf("second gateway on %s: %v", db, err)
	}
}
