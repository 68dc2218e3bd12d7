package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/sqlitestore"
)

// sqliteChildConfig is a one-route gateway on the SQLite file path, the
// store's errors answered 503 (closed), both listeners on free ports.
func sqliteChildConfig(t *testing.T, path, upstreamURL string) string {
	return writeConfig(t, t.TempDir(), fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %s}
admin: {listen: 127.0.0.1:0}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
    on_store_error: closed
`, path, upstreamURL))
}

// waitReady polls /readyz until its status is want, and returns its body.
func waitReady(t *testing.T, adminURL string, want int) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := do(t, "GET", adminURL, "")
		if r.Status == want {
			return r.Body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz is still %d %q after 30s, want %d", r.Status, r.Body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The SQLite file is deleted under a running gateway process (a cleanup
// job). The store notices within its check interval and logs an ERROR.
// /readyz turns 503 naming the store. Deliveries are refused
// (on_store_error: closed) rather than acknowledged into a file nothing
// will open again. The WARN names the store: "WebhookIdempotencyGuard
// SQLite error".
func TestSQLiteFileDeletedUnderARunningGateway(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "idemhook.db")
	c := startProc(t, sqliteChildConfig(t, db, up.Srv.URL))
	for i := range 5 {
		if r := post(t, c.url("/webhooks/test"), fmt.Sprintf(`{"id":%d}`, i)); r.Status != 200 {
			t.Fatalf("delivery %d: %d %s", i, r.Status, r.Body)
		}
	}
	if body := waitReady(t, c.adminURL("/readyz"), 200); !strings.Contains(body, "store (sqlite "+db+"): ok") {
		t.Fatalf("/readyz before: %q", body)
	}

	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	body := waitReady(t, c.adminURL("/readyz"), http.StatusServiceUnavailable)
	if !strings.Contains(body, "store (sqlite "+db+"): down:") || !strings.Contains(body, "was deleted") {
		t.Errorf("/readyz after the deletion does not name the store and the cause: %q", body)
	}
	c.waitLog(t, "level=ERROR msg=\"sqlitestore: database file lost")

	// A retry of a delivery acknowledged before, and a new event: neither
	// reaches the upstream, both are told to come back.
	for _, b := range []string{`{"id":0}`, `{"id":"new"}`} {
		r := post(t, c.url("/webhooks/test"), b)
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			t.Errorf("delivery %s after the deletion: %d %q, want 503 with Retry-After", b, r.Status, r.Body)
		}
	}
	if n := up.Calls.Load(); n != 5 {
		t.Errorf("the upstream ran %d times, want 5", n)
	}
	c.waitLog(t, "WebhookIdempotencyGuard SQLite error for key=idem:test:")

	c.signal(t, syscall.SIGTERM)
	if err := c.wait(t); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, c.stderr)
	}
}

// The file's pages are overwritten under a running gateway (another program
// writing the same file). The gateway holds its claims in memory and knows
// the file's keys, so the next delivery's claim touches no page: it reaches
// the upstream, and the write of its record fails. From then on claims fail
// until a write succeeds. /readyz, whose probe claims as deliveries do, says
// the store is down, and the next delivery gets 503 (on_store_error:
// closed) rather than running without its record.
func TestSQLitePagesOverwrittenUnderARunningGateway(t *testing.T) {
	up := newUpstream(t)
	db := filepath.Join(t.TempDir(), "idemhook.db")
	c := startProc(t, sqliteChildConfig(t, db, up.Srv.URL))
	for i := range 50 {
		post(t, c.url("/webhooks/test"), fmt.Sprintf(`{"id":%d,"pad":%q}`, i, strings.Repeat("x", 500)))
	}
	waitReady(t, c.adminURL("/readyz"), 200)

	// Another program moves every page into the file, overwrites all but
	// the first, then writes a little. That makes the gateway's connection
	// drop its cached pages.
	other, err := sqlitestore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte(strings.Repeat("\xde\xad\xbe\xef", 1024))
	for off := int64(4096); off < 64*4096; off += 4096 {
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if _, err := other.Exec("CREATE TABLE scratch (x)"); err != nil {
		t.Fatalf("the other program's write: %v", err)
	}

	first := post(t, c.url("/webhooks/test"), `{"id":"after"}`)
	if first.Status != http.StatusOK {
		t.Errorf("the first delivery on the overwritten file: %d %s, want the upstream's 200", first.Status, first.Body)
	}
	c.waitLog(t, "WebhookIdempotencyInterceptor cache write failed for key=idem:test:")
	body := waitReady(t, c.adminURL("/readyz"), http.StatusServiceUnavailable)
	if !strings.Contains(body, "store (sqlite "+db+"): down: claim of a probe key:") || !strings.Contains(body, "can't be written") {
		t.Errorf("/readyz does not name the store's failing step: %q", body)
	}
	calls := up.Calls.Load()
	r := post(t, c.url("/webhooks/test"), `{"id":"next"}`)
	if r.Status != http.StatusServiceUnavailable {
		t.Errorf("a delivery once a write failed: %d %s, want 503 (on_store_error: closed)", r.Status, r.Body)
	}
	if n := up.Calls.Load(); n != calls {
		t.Errorf("the upstream ran %d more times after the write failed, want 0", n-calls)
	}
}

// A Redis that answers reads but refuses writes with READONLY (a replica
// the store was pointed at after a failover). A probe that only read an
// absent key answered 200 while every delivery failed open. The probe
// claims, as deliveries do, so /readyz says the store is down and why.
func TestReadyzRedisThatRefusesWrites(t *testing.T) {
	// A replica of a master that doesn't exist: reads answer, writes get
	// READONLY.
	replica := redistest.StartServer(t, "--replicaof", "127.0.0.1", "1", "--replica-read-only", "yes", "--replica-serve-stale-data", "yes")
	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "store: {driver: memory}", "store: {driver: redis, url: "+replica.URL()+"}", 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	r := do(t, "GET", g.adminURL("/readyz"), "")
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Body, "store (redis "+replica.URL()+"): down: claim of a probe key:") ||
		!strings.Contains(r.Body, "READONLY") {
		t.Errorf("/readyz on a read-only Redis = %d %q, want 503 naming the store and READONLY", r.Status, r.Body)
	}
	if d := post(t, g.url("/webhooks/test"), `{"id":1}`); d.Status != 200 || !strings.Contains(g.stderr.String(), "WebhookIdempotencyGuard Redis error for key=") {
		t.Errorf("a delivery: %d, log:\n%s", d.Status, g.stderr)
	}
}
