package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

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
// the file:line: field: message format: the cases cover each kind of check
// (YAML syntax, unknown fields, field values, the listener, the library's
// own route checks, which serve alone used to make, after check had passed
// the file).
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
