package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/pgtest"
)

// gatewayChildEnv, when set, makes the test binary run the gateway's main
// instead of the tests: the two-gateway test starts real gateway processes
// that way, without building a binary.
const gatewayChildEnv = "IDEMHOOK_TEST_RUN_GATEWAY"

func TestMain(m *testing.M) {
	if os.Getenv(gatewayChildEnv) != "" {
		os.Args = append([]string{os.Args[0]}, strings.Fields(os.Getenv(gatewayChildEnv))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestConfigPostgresStore(t *testing.T) {
	const routes = "routes:\n  - path: /a\n    upstream: http://127.0.0.1:3000\n    source: a\n"
	t.Run("valid", func(t *testing.T) {
		text := "store:\n  driver: postgres\n  url: ${PG}\n  table: hooks.idemhook_keys\n" + routes
		cfg, err := parseConfig("f.yaml", []byte(text), envOf("PG", "postgres://gw:pw@db.internal:5432/shop"))
		if err != nil {
			t.Fatal(err)
		}
		want := StoreConfig{Driver: "postgres", URL: "postgres://gw:pw@db.internal:5432/shop", Table: "hooks.idemhook_keys"}
		if fmt.Sprint(cfg.Store) != fmt.Sprint(want) {
			t.Fatalf("store %+v, want %+v", cfg.Store, want)
		}
		// The audit trail goes to the same database by default.
		if cfg.Audit.Sink != "postgres" || cfg.Audit.URL != want.URL || cfg.Audit.Table != "" {
			t.Fatalf("audit %+v, want the postgres sink on the store's URL", cfg.Audit)
		}
	})
	t.Run("defaults and audit overrides", func(t *testing.T) {
		text := "store: {driver: postgres, url: \"postgresql://127.0.0.1/x\"}\naudit: {sink: log}\n" + routes
		cfg, err := parseConfig("f.yaml", []byte(text), envOf())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Store.Table != "idemhook_keys" || cfg.Audit.Sink != "log" || cfg.Audit.URL != "" {
			t.Fatalf("store %+v audit %+v", cfg.Store, cfg.Audit)
		}
		text = "store: {driver: postgres, url: \"postgresql://127.0.0.1/x\"}\naudit: {sink: postgres, table: trail}\n" + routes
		if cfg, err = parseConfig("f.yaml", []byte(text), envOf()); err != nil || cfg.Audit.URL != "postgresql://127.0.0.1/x" || cfg.Audit.Table != "trail" {
			t.Fatalf("audit postgres without url: %+v, %v", cfg.Audit, err)
		}
	})
	for _, tc := range []struct{ name, store, want string }{
		{"no url", "store:\n  driver: postgres\n", "f.yaml:2: store.url: driver postgres needs url"},
		{"unset env", "store:\n  driver: postgres\n  url: ${NOPE}\n", "f.yaml:3: store.url: environment variable NOPE is not set"},
		{"bad scheme", "store:\n  driver: postgres\n  url: mysql://x\n", "f.yaml:3: store.url: invalid PostgreSQL URL \"mysql://x\": the scheme must be postgres:// or postgresql://"},
		{"bad port, password hidden", "store:\n  driver: postgres\n  url: postgres://u:s3cret@h:99999/db\n", "f.yaml:3: store.url: invalid PostgreSQL URL \"postgres://u:xxxxx@h:99999/db\": invalid port"},
		{"bad table", "store:\n  driver: postgres\n  url: postgres://h/db\n  table: \"x; DROP TABLE y\"\n", "f.yaml:4: store.table: table \"x; DROP TABLE y\": want letters, digits and underscores"},
		{"table for sqlite", "store:\n  driver: sqlite\n  table: keys\n", "f.yaml:3: store.table: only used by driver postgres (driver is sqlite)"},
		{"url for memory", "store:\n  driver: memory\n  url: postgres://h/db\n", "f.yaml:3: store.url: only used by drivers redis and postgres (driver is memory)"},
		{"prefix for postgres", "store:\n  driver: postgres\n  url: postgres://h/db\n  prefix: p\n", "f.yaml:4: store.prefix: only used by driver redis (driver is postgres)"},
		{"unknown driver", "store:\n  driver: mysql\n", "f.yaml:2: store.driver: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig("f.yaml", []byte(tc.store+routes), envOf())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tc.want)
			}
			if strings.Contains(fmt.Sprint(err), "s3cret") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

// gatewayProc is a gateway running in a child process.
type gatewayProc struct {
	cmd           *exec.Cmd
	listen, admin string
}

var listeningLine = regexp.MustCompile(`msg="idemhook listening" listen=(\S+) admin=(\S+)`)

// startGatewayProcess runs `idemhook serve --config path` in a child process
// (this test binary, see TestMain) and waits until it listens.
func startGatewayProcess(t *testing.T, path string) *gatewayProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), gatewayChildEnv+"=serve --config "+path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{cmd: cmd}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // stopped already when the test passed
		cmd.Wait()         //nolint:errcheck
	})
	found := make(chan []string, 1)
	var log strings.Builder
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	select {
	case m := <-found:
		g.listen, g.admin = m[1], m[2]
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the gateway process did not start within 30s; its log:\n%s", log.String())
	}
	return g
}

// stop ends the gateway the way an orchestrator does, with SIGTERM, and
// waits for its graceful shutdown (the audit trail is flushed then).
func (g *gatewayProc) stop(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("gateway process: %v", err)
	}
}

// TestPostgresTwoGateways runs two gateway processes on one PostgreSQL (the
// store and the audit trail in the same database) and sends concurrent
// copies of each event split across both: every event reaches the upstream
// once, every copy gets its answer, and both gateways' trails land in the
// one table.
func TestPostgresTwoGateways(t *testing.T) {
	pool := pgtest.Pool(t)
	keys := pgtest.Table(t, pool, "gw_keys")
	trail := pgtest.Table(t, pool, "gw_audit")
	up := newUpstream(t)
	up.handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		time.Sleep(50 * time.Millisecond) // the copies arrive while the first runs
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"call":%d}`, n)
	}
	cfg := strings.Replace(routeConfig(up.srv.URL, "in_flight: wait"),
		"store: {driver: memory}",
		fmt.Sprintf("store: {driver: postgres, url: \"${%s}\", table: %s}", pgtest.EnvVar, keys), 1)
	cfg = strings.Replace(cfg, "audit: {sink: none}", "audit: {sink: postgres, table: "+trail+"}", 1)
	cfg = strings.Replace(cfg, "log: {level: debug}", "log: {level: info}", 1)
	path := writeConfig(t, t.TempDir(), cfg)
	gws := []*gatewayProc{startGatewayProcess(t, path), startGatewayProcess(t, path)}

	const events, copies = 5, 20
	var wg sync.WaitGroup
	answers := make([][]response, events)
	for e := range events {
		answers[e] = make([]response, copies)
		for c := range copies {
			g := gws[c%2]
			wg.Go(func() {
				answers[e][c] = post(t, "http://"+g.listen+"/webhooks/test", fmt.Sprintf(`{"id":"evt_two_%d"}`, e))
			})
		}
	}
	wg.Wait()
	if n := up.calls.Load(); n != events {
		t.Fatalf("upstream calls = %d, want %d (one per event)", n, events)
	}
	for e := range events {
		for c, a := range answers[e] {
			if a.Status != http.StatusOK || a.Body != answers[e][0].Body {
				t.Fatalf("event %d copy %d: %d %q, want 200 %q", e, c, a.Status, a.Body, answers[e][0].Body)
			}
		}
	}
	for _, g := range gws {
		if r := do(t, http.MethodGet, "http://"+g.admin+"/readyz", ""); r.Status != http.StatusOK {
			t.Fatalf("readyz = %d %s", r.Status, r.Body)
		}
	}
	// /readyz reads the store's table: without it, it answers 503.
	if _, err := pool.Exec(t.Context(), `ALTER TABLE `+pgx.Identifier{keys}.Sanitize()+` RENAME TO `+pgx.Identifier{keys + "_away"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	r := do(t, http.MethodGet, "http://"+gws[0].admin+"/readyz", "")
	if _, err := pool.Exec(t.Context(), `ALTER TABLE `+pgx.Identifier{keys + "_away"}.Sanitize()+` RENAME TO `+pgx.Identifier{keys}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("readyz without the table = %d %s, want 503", r.Status, r.Body)
	}

	for _, g := range gws {
		g.stop(t)
	}
	var total, processed int
	err := pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE outcome = $1) FROM `+pgx.Identifier{trail}.Sanitize(),
		string(idemhook.OutcomeProcessed)).Scan(&total, &processed)
	if err != nil {
		t.Fatal(err)
	}
	if total != events*copies || processed != events {
		t.Fatalf("audit trail: %d entries, %d processed; want %d and %d", total, processed, events*copies, events)
	}
}

// TestPostgresStoreUnreachableAtStart: the table is created at start, so a
// gateway whose PostgreSQL can't be reached says so and exits instead of
// serving without its store.
func TestPostgresStoreUnreachableAtStart(t *testing.T) {
	up := newUpstream(t)
	cfg := strings.Replace(routeConfig(up.srv.URL), "store: {driver: memory}",
		"store: {driver: postgres, url: \"postgres://postgres:pw@127.0.0.1:1/none?connect_timeout=2\"}", 1)
	path := writeConfig(t, t.TempDir(), cfg)
	var stderr strings.Builder
	err := runEnv(t.Context(), env{args: []string{"serve", "--config", path}, getenv: envOf(), stdout: &stderr, stderr: &stderr})
	if err == nil || !strings.Contains(err.Error(), "postgres store postgres://postgres:xxxxx@127.0.0.1:1/none") {
		t.Fatalf("serve: %v", err)
	}
}
