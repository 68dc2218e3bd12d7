package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/syncbuf"
)

// configLine is the format of every refusal and warning.
var configLine = regexp.MustCompile(`^idemhook\.yaml:\d+: (\S+: )?\S`)

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
			`idemhook.yaml:9: routes[0].retries: unknown field "retries" (known: ` + strings.Join(routeFields, ", ") + ")"},
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
		{"provider without secret", head + route + "    provider: stripe\n",
			"idemhook.yaml:9: routes[0].provider: provider stripe needs a secret: set secret_env: NAME_OF_VARIABLE (or secrets: [${VAR}] to accept several during a rotation)"},
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

// secret_env takes a variable's name. Given as $NAME or ${NAME}, the advice
// is the name alone, and the secret never appears in the error.
func TestConfigSecretEnv(t *testing.T) {
	env := envOf("STRIPE_SECRET", "whsec_do_not_show")
	tests := []struct {
		give string
		want string
	}{
		{"$STRIPE_SECRET", "secret_env takes the variable's name: secret_env: STRIPE_SECRET"},
		{`"${STRIPE_SECRET}"`, "secret_env takes the variable's name: secret_env: STRIPE_SECRET"},
		{`"${UNSET}"`, "secret_env takes the variable's name: secret_env: UNSET"},
		{`"${A B}"`, "secret_env takes the name of an environment variable, without $: secret_env: STRIPE_WEBHOOK_SECRET"},
		{`"stripe secret"`, `invalid environment variable name "stripe secret"`},
		{"UNSET", "environment variable UNSET is not set or empty (export it, or use secrets: [${UNSET}])"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			_, err := parseConfig("idemhook.yaml", []byte(minimal+"    provider: stripe\n    secret_env: "+tt.give+"\n"), env)
			want := "idemhook.yaml:6: routes[0].secret_env: " + tt.want
			if err == nil || err.Error() != want {
				t.Errorf("error:\n got %v\nwant %s", err, want)
			}
			if err != nil && strings.Contains(err.Error(), "whsec_do_not_show") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

func TestConfigPostgresStore(t *testing.T) {
	const routes = "routes:\n  - path: /a\n    upstream: http://127.0.0.1:3000\n    source: a\n"
	t.Run("valid", func(t *testing.T) {
		text := "store:\n  driver: postgres\n  url: ${PG}\n  table: hooks.idemhook_keys\n" + routes
		cfg, err := parseConfig("f.yaml", []byte(text), envOf("PG", "postgres://gw:pw@db.internal:5432/shop"))
		if err != nil {
			t.Fatal(err)
		}
		want := storeSettings{Driver: "postgres", URL: "postgres://gw:pw@db.internal:5432/shop", Table: "hooks.idemhook_keys"}
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
	for _, tt := range []struct{ name, store, want string }{
		{"no url", "store:\n  driver: postgres\n", "f.yaml:2: store.url: driver postgres needs url"},
		{"unset env", "store:\n  driver: postgres\n  url: ${NOPE}\n", "f.yaml:3: store.url: environment variable NOPE is not set"},
		{"bad scheme", "store:\n  driver: postgres\n  url: mysql://x\n", "f.yaml:3: store.url: invalid PostgreSQL URL \"mysql://x\": the scheme must be postgres:// or postgresql://"},
		{"bad port, password hidden", "store:\n  driver: postgres\n  url: postgres://u:s3cret@h:99999/db\n", "f.yaml:3: store.url: invalid PostgreSQL URL \"postgres://u:xxxxx@h:99999/db\": invalid port"},
		{"bad table", "store:\n  driver: postgres\n  url: postgres://h/db\n  table: \"x; DROP TABLE y\"\n", "f.yaml:4: store.table: table \"x; DROP TABLE y\": want letters, digits and underscores"},
		{"table for sqlite", "store:\n  driver: sqlite\n  table: keys\n", "f.yaml:3: store.table: only used by driver postgres (driver is sqlite)"},
		{"url for memory", "store:\n  driver: memory\n  url: postgres://h/db\n", "f.yaml:3: store.url: only used by drivers redis and postgres (driver is memory)"},
		{"prefix for postgres", "store:\n  driver: postgres\n  url: postgres://h/db\n  prefix: p\n", "f.yaml:4: store.prefix: only used by driver redis (driver is postgres)"},
		{"compact_keys for sqlite", "store:\n  driver: sqlite\n  compact_keys: true\n", "f.yaml:3: store.compact_keys: only used by driver redis (driver is sqlite)"},
		{"compact_keys not a boolean", "store:\n  driver: redis\n  url: redis://h:6379/0\n  compact_keys: yes\n", "f.yaml:4: store.compact_keys: invalid compact_keys \"yes\" (want true or false)"},
		{"unknown driver", "store:\n  driver: mysql\n", "f.yaml:2: store.driver: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig("f.yaml", []byte(tt.store+routes), envOf())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tt.want)
			}
			if strings.Contains(fmt.Sprint(err), "s3cret") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	env := envOf("A", "x", "B", "y z")
	tests := []struct {
		give, want, wantErr string
	}{
		{give: "plain", want: "plain"},
		{give: "${A}", want: "x"},
		{give: "pre-${A}-${B}", want: "pre-x-y z"},
		{give: "$$A costs $5", want: "$A costs $5"},
		{give: "${MISSING:-fallback}", want: "fallback"},
		{give: "${A:-fallback}", want: "x"},
		{give: "${MISSING}", wantErr: "environment variable MISSING is not set or empty (used as ${MISSING})"},
		{give: "${A", wantErr: `unclosed ${ in "${A"`},
		{give: "${1A}", wantErr: `invalid variable name "1A" in ${...}`},
	}
	for _, tt := range tests {
		got, err := expand(tt.give, env)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("expand(%q) error = %v, want %q", tt.give, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
}

// TestExpandBareVariable: "$NAME" without braces is not expanded; taken
// literally it would make, e.g., the admin token the public string
// "$IDEMHOOK_ADMIN_TOKEN". It is an error that says how to write it, and
// the message does not repeat the value (which may be a literal secret).
func TestExpandBareVariable(t *testing.T) {
	env := envOf("TOKEN", "s3cret")
	for _, give := range []string{"$TOKEN", "Bearer-$_X", "abc$Token"} {
		got, err := expand(give, env)
		if err == nil {
			t.Errorf("expand(%q) = %q, want an error", give, got)
			continue
		}
		if !strings.Contains(err.Error(), "${NAME}") || strings.Contains(err.Error(), give) {
			t.Errorf("expand(%q) error = %q, want advice on ${NAME} without the value", give, err)
		}
	}
	// Still literal: $$, a $ before a digit, a space or the end.
	for give, want := range map[string]string{"$$TOKEN": "$TOKEN", "costs $5": "costs $5", "a $ b": "a $ b", "end$": "end$"} {
		if got, err := expand(give, env); err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", give, got, err, want)
		}
	}
	// Through the parser: the error names the file, line and field.
	text := "admin: {listen: \"0.0.0.0:9090\", token: $TOKEN}\n" + minimal
	_, err := parseConfig("f.yaml", []byte(text), env)
	if err == nil || !strings.Contains(err.Error(), "f.yaml:1: admin.token:") {
		t.Fatalf("parseConfig error = %v, want f.yaml:1: admin.token: ...", err)
	}
}

func TestParseSizeAndDuration(t *testing.T) {
	sizes := []struct {
		give string
		want int64
	}{
		{"1048576", 1 << 20}, {"5MiB", 5 << 20}, {"512KiB", 512 << 10}, {"1MB", 1000000}, {"2 gib", 2 << 30}, {"10B", 10},
		{"0", 0}, {"-1", 0}, {"1.5MiB", 0}, {"MiB", 0}, {"5XB", 0},
	}
	for _, tt := range sizes {
		got, err := parseSize(tt.give)
		if (err != nil) != (tt.want == 0) || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tt.give, got, err, tt.want)
		}
	}
	durations := []struct {
		give string
		want time.Duration
	}{
		{"500ms", 500 * time.Millisecond}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"1h30m", 90 * time.Minute},
		{"1x", -1}, {"d", -1}, {"", -1},
	}
	for _, tt := range durations {
		got, err := parseDuration(tt.give)
		if (err != nil) != (tt.want == -1) || (err == nil && got != tt.want) {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
}
