// Package deploy_test checks the deploy files: it builds the binary with the
// Dockerfile's own build command (no container engine needed), runs it with
// the image's configuration plus a queued route, and checks that the alert
// rules and the dashboard ask only for metrics the running gateway exposes.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/syncbuf"
	"go.yaml.in/yaml/v3"
)

const testVersion = "v0.0.0-deploytest"

// buildCommand returns the shell command of the Dockerfile's RUN line that
// builds the gateway.
func buildCommand(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for line := range strings.Lines(string(data)) {
		if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "RUN "); ok && strings.Contains(cmd, "go build") {
			found = append(found, cmd)
		}
	}
	if len(found) != 1 {
		t.Fatalf("Dockerfile has %d RUN lines with go build, want 1: %q", len(found), found)
	}
	cmd := found[0]
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-ldflags=", "-X main.version=${VERSION}", "-o /out/idemhook", "./cmd/idemhook"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("the Dockerfile's build command lacks %q: %s", want, cmd)
		}
	}
	return cmd
}

// buildImageBinary runs the Dockerfile's build command from the repository
// root, with /out/ moved to a temporary directory, and returns the binary.
func buildImageBinary(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	cmd := strings.ReplaceAll(buildCommand(t), "/out/", out+"/")
	sh := exec.Command("sh", "-c", cmd)
	sh.Dir = ".."
	sh.Env = append(os.Environ(), "VERSION="+testVersion)
	if b, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	return filepath.Join(out, "idemhook")
}

func TestImageBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway: not in -short")
	}
	bin := buildImageBinary(t)

	t.Run("static", func(t *testing.T) {
		f, err := elf.Open(bin)
		if err != nil {
			t.Skipf("not an ELF binary (%s): %v", runtime.GOOS, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Error("the binary asks for a dynamic loader (PT_INTERP): not static, it would not start on distroless/static")
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("the binary links %v: not static", libs)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		root, _ := filepath.Abs("..")
		if bytes.Contains(data, []byte(root)) {
			t.Errorf("the binary holds the build directory %s: built without -trimpath", root)
		}
	})

	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("idemhook version: %v\n%s", err, out)
		}
		// The revision and its time are the build's (unknown without VCS
		// information): the version set at link time comes first.
		head, tail := fmt.Sprintf("idemhook %s rev ", testVersion), fmt.Sprintf(") %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		if !strings.HasPrefix(string(out), head) || !strings.HasSuffix(string(out), tail) {
			t.Errorf("idemhook version = %q, want %q...%q", out, head, tail)
		}
	})

	t.Run("serve", func(t *testing.T) {
		names := serveImageConfig(t, bin)
		checkRules(t, names)
		checkDashboard(t, names)
	})
}

// serveImageConfig runs bin with the image's configuration (its paths and
// addresses moved to a temporary directory and loopback), sends a delivery
// twice, and returns the metric names /metrics exposes.
func serveImageConfig(t *testing.T, bin string) map[string]bool {
	data, err := os.ReadFile("idemhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	state, cwd := t.TempDir(), t.TempDir()
	cfg := strings.NewReplacer(
		"/var/lib/idemhook", state,
		"0.0.0.0:8080", "127.0.0.1:0",
		"0.0.0.0:9090", "127.0.0.1:0",
	).Replace(string(data))
	cfgPath := filepath.Join(t.TempDir(), "idemhook.yaml")
	if err := os.WriteFile(cfgPath, withQueuedRoute(t, cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/hooks/refuse") {
			// Not retried: the queued event that gets it is dead at once.
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q,"call":%d}`, r.URL.Path, n)
	}))
	defer up.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfgPath)
	cmd.Dir = cwd
	cmd.Env = []string{"IDEMHOOK_ADMIN_TOKEN=deploy-test-token", "UPSTREAM_URL=" + up.URL + "/hooks", "PATH=/nonexistent"}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	listening := make(chan map[string]any, 1)
	var logs syncbuf.Buffer // written by the scanner, read on a failure
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "idemhook listening" {
				listening <- line
			}
		}
		exited <- cmd.Wait()
	}()
	var addr map[string]any
	select {
	case addr = <-listening:
	case err := <-exited:
		t.Fatalf("the gateway exited before listening: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway did not listen within 30s")
	}
	listen, admin := addr["listen"].(string), addr["admin"].(string)

	var bodies []string
	for i := range 2 {
		resp, err := http.Post("http://"+listen+"/webhooks/orders", "application/json", strings.NewReader(`{"id":"evt_1"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, string(b))
		if replayed := resp.Header.Get("Idempotent-Replayed") == "true"; resp.StatusCode != 200 || replayed != (i == 1) {
			t.Errorf("delivery %d: status %d replayed %v, want 200 %v", i+1, resp.StatusCode, replayed, i == 1)
		}
	}
	if calls.Load() != 1 || bodies[0] != bodies[1] || bodies[0] != `{"path":"/hooks/orders","call":1}` {
		t.Errorf("upstream calls %d, answers %q; want 1 call and the first answer twice", calls.Load(), bodies)
	}

	// The queued route: one event delivered, one refused for good (dead),
	// so that its attempt and dead counters have a series.
	for _, path := range []string{"/queued/ok", "/queued/refuse"} {
		resp, err := http.Post("http://"+listen+path, "application/json", strings.NewReader(`{"id":"evt_q"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Errorf("POST %s: status %d, want 202 (accepted into the queue)", path, resp.StatusCode)
		}
	}
	// Both events' series, waited for together: the two events are
	// delivered independently, so one series can come before the other
	// (a CI run under load scraped the dead one before the delivered one).
	queued := []string{
		`idemhook_queue_attempts_total{destination="",result="delivered",route="/queued/",status="200"} 1`,
		`idemhook_queue_dead_total{destination="",route="/queued/"} 1`,
	}
	var metrics []byte
	for deadline := time.Now().Add(20 * time.Second); ; {
		metrics = scrape(t, admin)
		missing := slices.DeleteFunc(slices.Clone(queued), func(want string) bool { return strings.Contains(string(metrics), want) })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("20s after two queued events, /metrics lacks %q: the queued route did not deliver them\n%s", missing, logs.String())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := `idemhook_build_info{goversion="` + runtime.Version() + `",version="` + testVersion + `"} 1`; !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	names := map[string]bool{} // the metric families the gateway serves
	for line := range strings.Lines(string(metrics)) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the gateway did not stop within 20s of SIGTERM")
	}
	// Everything it wrote is under the state directory (the volume).
	if _, err := os.Stat(filepath.Join(state, "idemhook.db")); err != nil {
		t.Errorf("no SQLite file on the volume: %v", err)
	}
	if left, _ := os.ReadDir(cwd); len(left) > 0 {
		t.Errorf("the gateway wrote %v to its working directory, outside the volume", left)
	}
	return names
}

// withQueuedRoute adds to the configuration cfg a route with deliver: queue
// to the same upstream, since the idemhook_queue_* series exist only on a
// gateway with a queued route.
func withQueuedRoute(t *testing.T, cfg string) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(cfg), &doc); err != nil {
		t.Fatalf("idemhook.yaml: %v", err)
	}
	routes, ok := doc["routes"].([]any)
	if !ok {
		t.Fatalf("idemhook.yaml: routes is %T, want a list", doc["routes"])
	}
	doc["routes"] = append(routes, map[string]any{
		"path":     "/queued/",
		"upstream": "${UPSTREAM_URL}",
		"source":   "queued",
		"deliver":  "queue",
	})
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// scrape returns the body of the admin listener's /metrics.
func scrape(t *testing.T, admin string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer deploy-test-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	return metrics
}

var metricRef = regexp.MustCompile(`\bidemhook_[a-z_]+\b`)

// checkExpr reports the idemhook metrics expr uses that the gateway does not
// expose (a histogram's _bucket, _sum and _count count as its name).
func checkExpr(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: expression uses no idemhook metric: %s", where, expr)
	}
	for _, ref := range refs {
		base := ref
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(ref, s); ok && names[b] {
				base = b
			}
		}
		if !names[base] {
			t.Errorf("%s: %s is not a metric the gateway exposes", where, ref)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string            `yaml:"alert"`
			Expr   string            `yaml:"expr"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func checkRules(t *testing.T, names map[string]bool) {
	data, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatalf("prometheus/alerts.yml: %v", err)
	}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExpr(t, "alert "+r.Alert, r.Expr, names)
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity label", r.Alert)
			}
		}
	}
	// The conditions an operator must hear about.
	for _, want := range []string{"IdemhookBreakerOpen", "IdemhookStoreErrors", "IdemhookAuditEntriesLost", "IdemhookReplayRatioHigh", "IdemhookUpstreamFailing",
		"IdemhookQueueOldestEventOld", "IdemhookQueueDeadEvents", "IdemhookQueueAttemptsSuperseded", "IdemhookQueueBackendDown", "IdemhookQueuePaused", "IdemhookOverloaded",
		"IdemhookConfigReloadFailed"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("prometheus/alerts.yml has no alert %s", want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: the rules were checked against the exposed metrics only")
		return
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func checkDashboard(t *testing.T, names map[string]bool) {
	data, err := os.ReadFile("grafana/idemhook.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/idemhook.json: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("grafana/idemhook.json: uid %q, %d panels", dash.UID, len(dash.Panels))
	}
	// Grafana's variables, replaced as it does before a query, so that
	// promtool can parse the expressions as recording rules.
	vars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*", "$source", ".*", "$route", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			checkExpr(t, "panel "+p.Title, tg.Expr, names)
			q, _ := json.Marshal(vars.Replace(tg.Expr)) // a JSON string is a YAML string
			n++
			fmt.Fprintf(&rules, "      - record: dashboard:expr%d\n        expr: %s\n", n, q)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: the dashboard's queries were checked against the exposed metrics only")
		return
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries do not parse: %v\n%s", err, out)
	}
}
