package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/sqlitestore"
)

// The audit sink shares the SQLite file with the store but not its writer:
// while every write of the trail fails (triggers refuse them), claims go
// on. Each event of a proxy route runs once and its re-delivery is a
// replay, /readyz stays 200 and names the sink as down with its entries
// waiting, and once the sink takes writes again the kept entries are
// written: none is lost. This is docs/queue.md's decision "the audit
// trail -> claims (SQLite)".
func TestAuditFailureStopsNoClaims(t *testing.T) {
	var mu sync.Mutex
	ran := map[string]int{}
	up := gatewaytest.NewUpstream(t)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		mu.Lock()
		ran[r.Header.Get("X-Event-Id")]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
	path := filepath.Join(t.TempDir(), "idemhook.db")
	_, g, _ := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: off}
audit: {sink: sqlite}
routes:
  - {path: /webhooks/test, upstream: %s/hook, source: test, header: x-event-id}
`, path, up.Srv.URL))
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()

	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	refuse := []string{
		`CREATE TRIGGER test_refuse_insert BEFORE INSERT ON audit_segments BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
		`CREATE TRIGGER test_refuse_update BEFORE UPDATE ON audit_segments BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
	}
	for _, stmt := range refuse {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}

	const events = 20
	for i := range events {
		id := fmt.Sprint("e", i)
		for copy := range 2 {
			r := gatewaytest.Post(t, srv.URL+"/webhooks/test", "{}", "X-Event-Id", id)
			if r.Status != http.StatusOK {
				t.Fatalf("event %s, copy %d: %d %s; want 200 while the trail fails", id, copy, r.Status, r.Body)
			}
			if replayed := r.Header.Get(idemhook.ReplayedHeader) == "true"; replayed != (copy == 1) {
				t.Errorf("event %s, copy %d: Idempotent-Replayed %q; want the second copy replayed", id, copy, r.Header.Get(idemhook.ReplayedHeader))
			}
		}
	}
	mu.Lock()
	for i := range events {
		if n := ran[fmt.Sprint("e", i)]; n != 1 {
			t.Errorf("event e%d ran %d times while the trail failed; want once", i, n)
		}
	}
	mu.Unlock()
	var ready gatewaytest.Response
	testutil.Eventually(t, "/readyz naming the audit sink down", func() bool {
		ready = gatewaytest.Do(t, http.MethodGet, admin.URL+"/readyz", "")
		return strings.Contains(ready.Body, "audit (sqlite "+path+"): down")
	})
	if ready.Status != http.StatusOK || !strings.Contains(ready.Body, "store (sqlite "+path+"): ok") {
		t.Errorf("/readyz while the trail fails: %d %s; want 200 with the store ok", ready.Status, ready.Body)
	}

	for _, stmt := range []string{`DROP TRIGGER test_refuse_insert`, `DROP TRIGGER test_refuse_update`} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "every delivery in the trail once it takes writes", func() bool {
		st := gatewaytest.DecodeJSON[adminapi.Stats](t, gatewaytest.Do(t, http.MethodGet, admin.URL+"/admin/stats", ""))
		return gatewaytest.SourceStats(t, st, "test").Hour.Total == 2*events
	})
	if ready := gatewaytest.Do(t, http.MethodGet, admin.URL+"/readyz", ""); ready.Status != http.StatusOK || strings.Contains(ready.Body, "down") {
		t.Errorf("/readyz after the trail recovered: %d %s", ready.Status, ready.Body)
	}
}
