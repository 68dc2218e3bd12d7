package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/syncbuf"
)

// runCommand runs "idemhook <cmd> --config path" in-process and returns its
// error and stderr. serve is stopped as soon as it listens.
func runCommand(t *testing.T, cmd, path string) (error, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncbuf.Buffer{}
	err := runEnv(ctx, env{
		args: []string{cmd, "--config", path}, getenv: envOf(), stdout: io.Discard, stderr: stderr,
		ready: func(addrs) { cancel() },
	})
	return err, stderr.String()
}

// Every refusal comes out of the same validation for check and serve, in
// the "file:line: field: message" format. The cases cover each kind of
// check: YAML syntax, unknown fields, field values, the listener, and the
// library's own route checks (which serve alone used to make, after check
// had passed the file).
func TestCheckRefusesWhatServeRefuses(t *testing.T) {
	const head = "listen: 127.0.0.1:0\nstore: {driver: memory}\nadmin: {listen: off}\naudit: {sink: none}\n"
	const route = "routes:\n  - path: /wh\n    upstream: http://127.0.0.1:1/x\n    source: s\n"
	tests := []struct {
		name string
		give string
		want string // the refusal, whole
	}{
		{"replay Content-Length", head + route + "    replay_headers: [Content-Type, Content-Length]\n",
			"idemhook.yaml:9: routes[0].replay_headers[1]: Content-Length is never stored or replayed (Set-Cookie, Authorization, hop-by-hop headers and Content-Length never are): remove it"},
		{"replay Set-Cookie", head + route + "    replay_headers:\n      - set-cookie\n",
			"idemhook.yaml:10: routes[0].replay_headers[0]: Set-Cookie is never stored or replayed (Set-Cookie, Authorization, hop-by-hop headers and Content-Length never are): remove it"},
		{"replay Authorization", head + route + "    replay_headers: [Authorization]\n",
			"idemhook.yaml:9: routes[0].replay_headers[0]: Authorization is never stored or replayed (Set-Cookie, Authorization, hop-by-hop headers and Content-Length never are): remove it"},
		{"replay Connection", head + route + "    replay_headers: [Connection]\n",
			"idemhook.yaml:9: routes[0].replay_headers[0]: Connection is never stored or replayed (Set-Cookie, Authorization, hop-by-hop headers and Content-Length never are): remove it"},
		{"lease under the library's minimum", head + route + "    lease: 500us\n",
			"idemhook.yaml:9: routes[0].lease: Lease 500µs is under the minimum of 1ms"},
		{"tab in the indentation", head + "routes:\n  - path: /wh\n\t  upstream: x\n",
			"idemhook.yaml:7: invalid YAML: a tab in the indentation (column 1): YAML indents with spaces only"},
		{"tab after a dash", head + "routes:\n  -\tpath: /wh\n",
			"idemhook.yaml:6: invalid YAML: a tab in the indentation (column 4): YAML indents with spaces only"},
		{"unknown field", head + route + "    retries: 3\n",
			`idemhook.yaml:9: routes[0].retries: unknown field "retries" (known: ` + strings.Join(config.RouteFields(), ", ") + ")"},
		{"bad duration", head + route + "    retry_after: soon\n",
			`idemhook.yaml:9: routes[0].retry_after: invalid duration "soon" (examples: 500ms, 30s, 10m, 24h, 7d)`},
		{"max_stored_body too large", head + route + "    max_stored_body: 2GiB\n",
			"idemhook.yaml:9: routes[0].max_stored_body: 2GiB is over 1GiB: a stored answer that large would be replayed from the store on every duplicate"},
		{"bad trusted proxy", head + "trusted_proxies: [10.0.0.0/8, lb]\n" + route,
			`idemhook.yaml:5: trusted_proxies[1]: invalid address or CIDR "lb" (e.g. 10.0.0.0/8, 192.168.1.10, fd00::/8)`},
		{"tls without key", head + "tls: {cert: c.pem}\n" + route,
			"idemhook.yaml:5: tls.key: missing: the private key file (PEM), with cert: the certificate file"},
		{"tls files missing", head + "tls: {cert: /nonexistent/c.pem, key: /nonexistent/k.pem}\n" + route,
			"idemhook.yaml:5: tls.cert: cannot load the certificate and key: open /nonexistent/c.pem: no such file or directory"},
		{"filter: an unknown name", head + route + "    filter: 'bdy.type == \"x\"'\n",
			`idemhook.yaml:9: routes[0].filter: column 1: unknown name "bdy" (the variables are body, json, headers, query and path)`},
		{"filter: a | block", head + route + "    filter: |\n      json &&\n        body.type.startsWith(\"x\") &&\n        path.size() > \"1\"\n",
			`idemhook.yaml:12: routes[0].filter: column 15: found no matching overload for '_>_' applied to '(int, string)'`},
		{"provider without secret", head + route + "    provider: stripe\n",
			"idemhook.yaml:9: routes[0].provider: provider stripe needs a secret: set secret_env: NAME_OF_VARIABLE, or secret_file: FILE (one secret per line, read again on every reload: several during a rotation)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, t.TempDir(), tt.give)
			checkErr, _ := runCommand(t, "check", path)
			serveErr, _ := runCommand(t, "serve", path)
			if checkErr == nil || serveErr == nil {
				t.Fatalf("check: %v; serve: %v; want both to refuse", checkErr, serveErr)
			}
			c, s := strings.ReplaceAll(checkErr.Error(), path, "idemhook.yaml"), strings.ReplaceAll(serveErr.Error(), path, "idemhook.yaml")
			if c != s {
				t.Errorf("check and serve differ:\ncheck: %s\nserve: %s", c, s)
			}
			if c != tt.want {
				t.Errorf("refusal:\n got %s\nwant %s", c, tt.want)
			}
			if !configLine.MatchString(c) {
				t.Errorf("%q is not in the file:line: field: message format", c)
			}
		})
	}
}

// The secrets of a secret_file are those the route's preset checks
// signatures with: a delivery signed with any of them passes, one signed
// with another secret does not.
func TestConfigSecretFileSecretsVerify(t *testing.T) {
	p := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(p, []byte("whsec_new\r\n# old\nwhsec_old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("idemhook.yaml", []byte(minimal+"    provider: stripe\n    secret_file: "+p+"\n"), envOf())
	if err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	printSummary(&summary, cfg)
	if want := " provider=stripe secret_file=" + p + " secrets=2 "; !strings.Contains(summary.String(), want) {
		t.Errorf("check's summary lacks %q:\n%s", want, summary.String())
	}
	body := []byte(`{"id":"evt_1"}`)
	for secret, want := range map[string]bool{"whsec_new": true, "whsec_old": true, "whsec_other": false, "# old": false} {
		req := httptest.NewRequest("POST", "/webhooks/stone", bytes.NewReader(body))
		req.Header.Set("Stripe-Signature", stripeSignature(secret, time.Now().Unix(), body))
		if err := cfg.Routes[0].Route.Preset.Verify(req, body); (err == nil) != want {
			t.Errorf("signed with %q: Verify = %v, want passing %v", secret, err, want)
		}
	}
}

// Settings that do nothing are warned about, not refused, by both commands
// alike.
func TestConfigWarnsAboutSettingsThatDoNothing(t *testing.T) {
	const head = "listen: 127.0.0.1:0\nstore: {driver: memory}\nadmin: {listen: off}\naudit: {sink: none}\nroutes:\n  - path: /wh\n    upstream: http://127.0.0.1:1/x\n    source: s\n"
	tests := []struct {
		name, give, want string
	}{
		{"wait_timeout without wait", head + "    in_flight: proceed\n    wait_timeout: 3s\n",
			"idemhook.yaml:10: routes[0].wait_timeout: does nothing with in_flight: proceed (only in_flight: wait waits)"},
		{"retry_after without reject or closed", head + "    retry_after: 9s\n",
			"idemhook.yaml:9: routes[0].retry_after: does nothing here: it is the Retry-After of in_flight: reject and of on_store_error: closed"},
		{"a huge max_body", head + "    max_body: 256MiB\n",
			"idemhook.yaml:9: routes[0].max_body: 268435456 bytes: each delivery buffers its whole body, so 10 concurrent deliveries of that size take 2560 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, t.TempDir(), tt.give)
			checkErr, checkOut := runCommand(t, "check", path)
			serveErr, serveLog := runCommand(t, "serve", path)
			if checkErr != nil || serveErr != nil {
				t.Fatalf("a warning refused the file: check %v, serve %v", checkErr, serveErr)
			}
			checkOut = strings.ReplaceAll(checkOut, path, "idemhook.yaml")
			serveLog = strings.ReplaceAll(serveLog, path, "idemhook.yaml")
			if !strings.Contains(checkOut, "warning: "+tt.want+"\n") {
				t.Errorf("check's output lacks the warning %q:\n%s", tt.want, checkOut)
			}
			if !strings.Contains(serveLog, tt.want) {
				t.Errorf("serve's log lacks the warning %q:\n%s", tt.want, serveLog)
			}
		})
	}
}

// check's summary says what the redis store's writes wait for.
func TestCheckSummaryRedisWait(t *testing.T) {
	const routes = "routes:\n  - path: /a\n    upstream: http://127.0.0.1:3000\n    source: a\n"
	tests := []struct {
		store, want string
	}{
		{"store: {driver: redis, url: \"redis://:pw@h:6379/0\"}",
			"  store    redis redis://:xxxxx@h:6379/0\n"},
		{"store: {driver: redis, url: \"redis://h:6379/0\", wait_replicas: 1}",
			"  store    redis redis://h:6379/0; claims and completions wait for 1 replica (WAIT, 100ms)\n"},
		{"store: {driver: redis, addrs: [\"s1:26379\"], master_name: m, wait_replicas: 2, wait_timeout: 50ms}",
			"  store    redis s1:26379; claims and completions wait for 2 replicas (WAIT, 50ms)\n"},
		{"store: {driver: redis, url: \"redis://h:6379/0\", wait_replicas: 1, wait_aof: true}",
			"  store    redis redis://h:6379/0; claims and completions wait for the AOF fsync of the master and 1 replica (WAITAOF, 100ms)\n"},
	}
	for _, tt := range tests {
		cfg, err := config.Parse("idemhook.yaml", []byte(tt.store+"\n"+routes), envOf())
		if err != nil {
			t.Fatal(err)
		}
		var summary bytes.Buffer
		printSummary(&summary, cfg)
		if !strings.Contains(summary.String(), tt.want) {
			t.Errorf("%s: check's summary lacks %q:\n%s", tt.store, tt.want, summary.String())
		}
	}
}

func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := writeConfig(t, dir, minimal)
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"check", "--config", good}, envOf(), &stdout, &stderr); err != nil {
		t.Fatalf("check of a valid file: %v", err)
	}
	for _, want := range []string{good + ": OK", "store    sqlite idemhook.db", "/webhooks/stone -> http://127.0.0.1:3000/webhook source=stone ttl=24h"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout.String())
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: nowhere\nroutes:\n  - path: /a\n    upstream: http://h/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(t.Context(), []string{"check", "--config", bad}, envOf(), &stdout, &stderr)
	want := "2 errors in the configuration:\n" +
		"  " + bad + `:1: listen: invalid address "nowhere": want host:port, e.g. 127.0.0.1:8080 or :8080` + "\n" +
		"  " + bad + `:3: routes[0].source: missing: the provider's label, e.g. source: stone (it names the keys: idem:<source>:<key>)`
	if err == nil || err.Error() != want {
		t.Errorf("check of a bad file = %v\nwant %s", err, want)
	}

	// serve refuses the same file before opening anything.
	if err := run(t.Context(), []string{"serve", "--config", bad}, envOf(), &stdout, &stderr); err == nil || err.Error() != want {
		t.Errorf("serve of a bad file = %v", err)
	}
	missing := filepath.Join(dir, "nope.yaml")
	err = run(t.Context(), []string{"check", "--config", missing}, envOf(), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "config file "+missing+" does not exist") {
		t.Errorf("check of a missing file = %v", err)
	}
}

func TestCommands(t *testing.T) {
	tests := []struct {
		args       []string
		wantOut    string // in stdout
		wantErr    string // exact error, "" for none
		wantUsage  bool
		wantStderr string
	}{
		{args: []string{"version"}, wantOut: "idemhook "},
		{args: []string{"help"}, wantOut: "idemhook serve --config FILE"},
		{args: nil, wantErr: `no command given (run "idemhook help")`, wantUsage: true, wantStderr: "Usage:"},
		{args: []string{"frobnicate"}, wantErr: `unknown command "frobnicate" (run "idemhook help")`, wantUsage: true},
		{args: []string{"check", "extra"}, wantErr: `unexpected argument "extra" (idemhook check --config FILE) (run "idemhook help")`, wantUsage: true},
		{args: []string{"serve", "--conf", "x"}, wantErr: `flag provided but not defined: -conf (run "idemhook help")`, wantUsage: true},
		{args: []string{"serve", "-h"}, wantStderr: "-config string"},
		{args: []string{"demo", "now"}, wantErr: `demo takes no arguments (run "idemhook help")`, wantUsage: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, envOf(), &stdout, &stderr)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if tt.wantUsage && !errors.As(err, new(usageError)) {
				t.Errorf("err is not a usageError (exit 2)")
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantOut, stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, stderr.String())
			}
		})
	}
}

// A route with a preset keeps its answers for the provider's retry window
// plus a day; check prints the effective TTL of every route and warns (a
// warning, not an error) about a configured TTL shorter than the window.
func TestCheckPrintsEffectiveTTLsAndWarnsAboutShortOnes(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, `routes:
  - path: /stripe
    upstream: http://127.0.0.1:3000/
    source: stripe
    provider: stripe
    secret_env: STRIPE_SECRET
  - path: /stripe-short
    upstream: http://127.0.0.1:3000/
    source: stripe-short
    provider: stripe
    secret_env: STRIPE_SECRET
    ttl: 24h
  - path: /plain
    upstream: http://127.0.0.1:3000/
    source: plain
    filter: |
      json &&
      body.type.startsWith("payment_intent.")
`)
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"check", "--config", path}, envOf("STRIPE_SECRET", "whsec_x"), &stdout, &stderr); err != nil {
		t.Fatalf("check: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"/stripe -> http://127.0.0.1:3000/ source=stripe ttl=4d in_flight=wait on_store_error=open provider=stripe retry_window=3d",
		"/stripe-short -> http://127.0.0.1:3000/ source=stripe-short ttl=24h in_flight=wait",
		"/plain -> http://127.0.0.1:3000/ source=plain ttl=24h in_flight=wait on_store_error=open filter=\"json &&\\nbody.type.startsWith(\\\"payment_intent.\\\")\"\n",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout.String())
		}
	}
	wantWarn := "warning: " + path + ":12: routes[1].ttl: 24h is shorter than stripe's retry window (3d): a retry after the TTL runs the event again; the preset's default is 4d\n"
	if stderr.String() != wantWarn {
		t.Errorf("check warnings:\n%s\nwant:\n%s", stderr.String(), wantWarn)
	}
}

// configLine is the format of every refusal and warning.
var configLine = regexp.MustCompile(`^idemhook\.yaml:\d+: (\S+: )?\S`)

// check prints a route with destinations with each destination: its
// upstream, the form of its Idempotency-Key, its filter and the queue
// settings it sets apart from the route's; a filter that does not compile
// is refused at its line.
func TestCheckPrintsDestinations(t *testing.T) {
	dir := t.TempDir()
	text := `store: {driver: sqlite, path: ` + filepath.Join(dir, "idemhook.db") + `}
routes:
  - path: /webhooks/stripe
    source: stripe
    provider: stripe
    secret_env: STRIPE_SECRET
    deliver: queue
    queue: {max_attempts: 20}
    destinations:
      - {name: billing, upstream: http://billing:3000/stripe, filter: 'body.type.startsWith("payment_intent.")'}
      - {name: crm, upstream: http://crm:8080/hooks/stripe, filter: 'body.type.startsWith("customer.")',
         queue: {order_by: "json:data.object.customer", rate: 20}}
      - {name: analytics, upstream: http://analytics:9000/ingest}
`
	path := writeConfig(t, dir, text)
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"check", "--config", path}, envOf("STRIPE_SECRET", "whsec_x"), &stdout, &stderr); err != nil {
		t.Fatalf("check: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"    /webhooks/stripe -> 3 destinations source=stripe ttl=",
		"      billing -> http://billing:3000/stripe key=<store key>#billing filter=\"body.type.startsWith(\\\"payment_intent.\\\")\"\n",
		"      crm -> http://crm:8080/hooks/stripe key=<store key>#crm filter=\"body.type.startsWith(\\\"customer.\\\")\" rate=20 order_by=json:data.object.customer\n",
		"      analytics -> http://analytics:9000/ingest key=<store key>#analytics filter=none (every event)\n",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout.String())
		}
	}
	bad := writeConfig(t, t.TempDir(), strings.Replace(text, `filter: 'body.type.startsWith("customer.")'`, `filter: 'body.type.startsWith(1)'`, 1))
	stdout.Reset()
	stderr.Reset()
	err := run(t.Context(), []string{"check", "--config", bad}, envOf("STRIPE_SECRET", "whsec_x"), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error()+stderr.String(), bad+":11: routes[0].destinations[1].filter: column") {
		t.Errorf("check of a bad destination filter: %v\n%s", err, stderr.String())
	}
}
