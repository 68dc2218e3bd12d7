package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/suggest"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// The helpers shared with the other gateway tests (internal/testutil/gatewaytest).
const minimal = gatewaytest.Minimal

var envOf = gatewaytest.EnvOf

func TestConfigDefaults(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(minimal), envOf())
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[0]
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"listen", cfg.Listen, "127.0.0.1:8080"},
		{"store.driver", cfg.Store.Driver, "sqlite"},
		{"store.path", cfg.Store.Path, "idemhook.db"},
		{"admin.listen", cfg.Admin.Listen, "127.0.0.1:9090"},
		{"audit.sink", cfg.Audit.Sink, "sqlite"},
		{"audit.path", cfg.Audit.Path, "idemhook.db"},
		{"audit.retention", cfg.Audit.Retention, 7 * 24 * time.Hour},
		{"log.format", cfg.Log.Format, "text"},
		{"log.level", cfg.Log.Level, "info"},
		{"shutdown_timeout", cfg.ShutdownTimeout, 10 * time.Second},
		{"path", r.Path, "/webhooks/stone"},
		{"upstream", r.Upstream.String(), "http://127.0.0.1:3000/webhook"},
		{"upstream_timeout", r.UpstreamTimeout, 30 * time.Second},
		{"source", r.Route.Source, "stone"},
		{"ttl", r.Route.TTL, 24 * time.Hour},
		{"header", r.Route.Header, ""}, // the middleware's default, idempotency-key
		{"in_flight", r.Route.InFlight, idemhook.InFlightWait},
		{"wait_timeout", r.Route.WaitTimeout, 10 * time.Second},
		{"on_store_error", r.Route.OnStoreError, idemhook.StoreErrorOpen},
		{"max_body", r.Route.MaxBodyBytes, int64(5 << 20)},
		{"preset", r.Route.Preset == nil, true},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestConfigAllFields(t *testing.T) {
	text := `listen: 0.0.0.0:8443
shutdown_timeout: 3s
store: {driver: redis, addrs: [10.0.0.1:6379, 10.0.0.2:6379], password: "${REDIS_PASSWORD}", prefix: "gw:", compact_keys: true}
admin: {listen: 0.0.0.0:9443, token: "${ADMIN_TOKEN}"}
audit: {sink: postgres, url: "postgres://postgres@127.0.0.1:5432/test", table: deliveries, retention: 30d}
log: {format: json, level: warn}
routes:
  - path: /hooks/
    upstream: https://backend.internal/in?x=1
    source: github
    ttl: 72h
    header: X-GitHub-Delivery
    in_flight: wait
    wait_timeout: 2s
    on_store_error: closed
    max_body: 512KiB
    upstream_timeout: 5s
    replay_headers: [Content-Type, X-Request-Id]
    provider: slack
    secrets: ["${GH_NEW}", "${GH_OLD}"]
    tolerance: 1m
`
	cfg, err := Parse("f.yaml", []byte(text), envOf("REDIS_PASSWORD", "pw", "ADMIN_TOKEN", "tok", "GH_NEW", "n", "GH_OLD", "o"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[0]
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"store.addrs", strings.Join(cfg.Store.Addrs, ","), "10.0.0.1:6379,10.0.0.2:6379"},
		{"store.password", cfg.Store.Password, "pw"},
		{"store.prefix", cfg.Store.Prefix, "gw:"},
		{"store.compact_keys", cfg.Store.Compact, true},
		{"store.path", cfg.Store.Path, ""},
		{"admin.token", cfg.Admin.Token, "tok"},
		{"audit.table", cfg.Audit.Table, "deliveries"},
		{"audit.retention", cfg.Audit.Retention, 30 * 24 * time.Hour},
		{"log.format", cfg.Log.Format, "json"},
		{"shutdown_timeout", cfg.ShutdownTimeout, 3 * time.Second},
		{"ttl", r.Route.TTL, 72 * time.Hour},
		{"header", r.Route.Header, "X-GitHub-Delivery"},
		{"in_flight", r.Route.InFlight, idemhook.InFlightWait},
		{"wait_timeout", r.Route.WaitTimeout, 2 * time.Second},
		{"on_store_error", r.Route.OnStoreError, idemhook.StoreErrorClosed},
		{"max_body", r.Route.MaxBodyBytes, int64(512 << 10)},
		{"upstream_timeout", r.UpstreamTimeout, 5 * time.Second},
		{"replay_headers", strings.Join(r.Route.ReplayHeaders, ","), "Content-Type,X-Request-Id"},
		{"preset", r.Route.Preset != nil && r.Route.Preset.Name == "slack", true}, // tolerance needs a timestamped provider
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	route := func(extra string) string { return minimal + extra }
	tests := []struct {
		name string
		give string
		env  []string
		want []string // every error, in order
	}{
		{
			name: "unknown top-level field",
			give: "listne: 127.0.0.1:8080\n" + minimal,
			want: []string{`idemhook.yaml:1: listne: unknown field "listne": did you mean "listen"? (known: listen, store, admin, audit, log, shutdown_timeout, routes, tls, trusted_proxies, limits)`},
		},
		{
			name: "unknown route field",
			give: route("    tll: 1h\n"),
			want: []string{`idemhook.yaml:5: routes[0].tll: unknown field "tll": did you mean "ttl"? (known: path, upstream, source, ttl, header, in_flight, wait_timeout, on_store_error, provider, secret_env, secrets, secret_file, tenants, provider_options, tolerance, max_body, upstream_timeout, replay_headers, store_statuses, require_key, share_keys, lease, max_stored_body, retry_after, deliver, respond_within, forward_secret, items, filter, accept, queue, destinations)`},
		},
		{
			name: "unknown field in a section",
			give: "store: {driver: memory, drvier: redis}\n" + minimal,
			want: []string{`idemhook.yaml:1: store.drvier: unknown field "drvier": did you mean "driver"? (known: driver, path, url, addrs, master_name, username, password, prefix, compact_keys, table, timeout, wait_replicas, wait_timeout, wait_aof)`},
		},
		{
			name: "unknown field, capitalised",
			give: route("    Provider: stripe\n"),
			want: []string{`idemhook.yaml:5: routes[0].Provider: unknown field "Provider": did you mean "provider"? (known: ` + strings.Join(routeFields, ", ") + ")"},
		},
		{
			name: "unknown field near none",
			give: "store: {driver: memory, hostname: h}\n" + minimal,
			want: []string{`idemhook.yaml:1: store.hostname: unknown field "hostname" (known: driver, path, url, addrs, master_name, username, password, prefix, compact_keys, table, timeout, wait_replicas, wait_timeout, wait_aof)`},
		},
		{
			name: "misspelt value",
			give: route("    in_flight: wiat\n"),
			want: []string{`idemhook.yaml:5: routes[0].in_flight: invalid in_flight "wiat": did you mean "wait"? (want proceed, wait or reject)`},
		},
		{
			name: "misspelt provider option",
			give: route("    provider: evolution\n    secret_env: S\n    provider_options: {headr: apikey}\n"),
			env:  []string{"S", "x"},
			want: []string{`idemhook.yaml:7: routes[0].provider_options.headr: provider evolution: option headr: unknown option (known: header): did you mean "header"?`},
		},
		{
			name: "missing source",
			give: "routes:\n  - path: /a\n    upstream: http://127.0.0.1:3000/\n",
			want: []string{`idemhook.yaml:2: routes[0].source: missing: the provider's label, e.g. source: stone (it names the keys: idem:<source>:<key>)`},
		},
		{
			name: "missing path and upstream",
			give: "routes:\n  - source: stone\n",
			want: []string{
				`idemhook.yaml:2: routes[0].path: missing: the path this route receives, e.g. /webhooks/stone`,
				`idemhook.yaml:2: routes[0].upstream: missing: the URL deliveries are forwarded to, e.g. http://127.0.0.1:3000/webhook`,
			},
		},
		{
			name: "bad duration",
			give: minimal + "  - path: /b\n    upstream: http://127.0.0.1:3000/b\n    source: b\n    ttl: 1x\n",
			want: []string{`idemhook.yaml:8: routes[1].ttl: invalid duration "1x" (examples: 500ms, 30s, 10m, 24h, 7d)`},
		},
		{
			name: "negative duration",
			give: route("    wait_timeout: -1s\n"),
			want: []string{`idemhook.yaml:5: routes[0].wait_timeout: must be positive, got "-1s"`},
		},
		{
			name: "malformed upstream",
			give: "routes:\n  - path: /a\n    upstream: \"http://[::1\"\n    source: a\n",
			want: []string{`idemhook.yaml:3: routes[0].upstream: malformed upstream URL "http://[::1": missing ']' in host`},
		},
		{
			name: "upstream scheme",
			give: "routes:\n  - path: /a\n    upstream: 127.0.0.1:3000\n    source: a\n",
			want: []string{`idemhook.yaml:3: routes[0].upstream: malformed upstream URL "127.0.0.1:3000": first path segment in URL cannot contain colon`},
		},
		{
			name: "upstream without host",
			give: "routes:\n  - path: /a\n    upstream: http:///x\n    source: a\n",
			want: []string{`idemhook.yaml:3: routes[0].upstream: malformed upstream URL "http:///x": no host`},
		},
		{
			name: "in_flight",
			give: route("    in_flight: sometimes\n"),
			want: []string{`idemhook.yaml:5: routes[0].in_flight: invalid in_flight "sometimes" (want proceed, wait or reject)`},
		},
		{
			name: "on_store_error",
			give: route("    on_store_error: ignore\n"),
			want: []string{`idemhook.yaml:5: routes[0].on_store_error: invalid on_store_error "ignore" (want open or closed)`},
		},
		{
			name: "unknown provider",
			give: route("    provider: strip\n    secret_env: S\n"),
			env:  []string{"S", "x"},
			want: []string{`idemhook.yaml:5: routes[0].provider: unknown provider "strip": did you mean "stripe"? (known: adyen, asaas, evolution, github, hubspot, ifood, instagram, mailgun, mercadopago, messenger, paddle, sendgrid, shopify, slack, standardwebhooks, stone, stripe, svix, twilio, twitch, whatsapp-cloud, zoom)`},
		},
		{
			name: "provider without secret",
			give: route("    provider: stripe\n"),
			want: []string{`idemhook.yaml:5: routes[0].provider: provider stripe needs a secret: set secret_env: NAME_OF_VARIABLE, or secret_file: FILE (one secret per line, read again on every reload: several during a rotation)`},
		},
		{
			name: "secret_env unset",
			give: route("    provider: stripe\n    secret_env: STRIPE_WEBHOOK_SECRET\n"),
			want: []string{`idemhook.yaml:6: routes[0].secret_env: environment variable STRIPE_WEBHOOK_SECRET is not set or empty (export it, or use secrets: [${STRIPE_WEBHOOK_SECRET}])`},
		},
		{
			name: "secrets entry unset",
			give: route("    provider: stripe\n    secrets: [\"${NEW}\", \"${OLD}\"]\n"),
			env:  []string{"NEW", "n"},
			want: []string{`idemhook.yaml:6: routes[0].secrets[1]: environment variable OLD is not set or empty (used as ${OLD})`},
		},
		{
			name: "adyen secret not hex",
			give: route("    provider: adyen\n    secrets:\n      - 44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056\n      - not-hex\n"),
			want: []string{`idemhook.yaml:8: routes[0].secrets[1]: provider adyen: secret #2 is not a hex HMAC key (Adyen's Customer Area shows it as hex digits, e.g. 64 of them)`},
		},
		{
			name: "adyen secret_env not hex",
			give: route("    provider: adyen\n    secret_env: ADYEN_HMAC_KEY\n    secrets: [abcd]\n"),
			env:  []string{"ADYEN_HMAC_KEY", "s3cret"},
			want: []string{`idemhook.yaml:6: routes[0].secret_env: provider adyen: secret #1 is not a hex HMAC key (Adyen's Customer Area shows it as hex digits, e.g. 64 of them)`},
		},
		{
			name: "sendgrid without key",
			give: route("    provider: sendgrid\n"),
			want: []string{`idemhook.yaml:5: routes[0].provider: provider sendgrid needs a secret: set secret_env: NAME_OF_VARIABLE, or secret_file: FILE (one secret per line, read again on every reload: several during a rotation), or provider_options: {public_key: ...}`},
		},
		{
			name: "sendgrid secret not a key",
			give: route("    provider: sendgrid\n    secrets:\n      - MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEYP7UuiVanTHJYet0xjVtaMBJuJI7Yfps5mliLmDyn7Z5A/4QCLi8maQa6elWKLxk8vGyDC1+n1F3o8KU1EYimQ==\n      - not-a-key\n"),
			want: []string{`idemhook.yaml:8: routes[0].secrets[1]: provider sendgrid: secret #2 is not a verification key: want the base64 public key SendGrid's Mail Settings show (signed event webhook)`},
		},
		{
			name: "sendgrid public_key not a key",
			give: route("    provider: sendgrid\n    provider_options:\n      public_key: MFkwEw==\n"),
			want: []string{`idemhook.yaml:7: routes[0].provider_options.public_key: provider sendgrid: option public_key: is not a public key: want the base64 public key SendGrid's Mail Settings show (signed event webhook)`},
		},
		{
			name: "secret without provider",
			give: route("    secret_env: S\n"),
			env:  []string{"S", "x"},
			want: []string{`idemhook.yaml:5: routes[0].secret_env: only used with provider: (the signature check of a preset); set provider or remove secret_env`},
		},
		{
			name: "unknown provider option",
			give: route("    provider: stripe\n    secret_env: S\n    provider_options: {colour: blue}\n"),
			env:  []string{"S", "x"},
			want: []string{`idemhook.yaml:7: routes[0].provider_options.colour: provider stripe: option colour: unknown option (this provider takes no options)`},
		},
		{
			name: "duplicate paths",
			give: minimal + "  - path: /webhooks/stone\n    upstream: http://127.0.0.1:3000/b\n    source: b\n",
			want: []string{`idemhook.yaml:5: routes[1].path: duplicate path "/webhooks/stone" (also routes[0], line 2)`},
		},
		{
			name: "bad path",
			give: "routes:\n  - path: webhooks/a\n    upstream: http://127.0.0.1:3000/\n    source: a\n",
			want: []string{`idemhook.yaml:2: routes[0].path: invalid path "webhooks/a": must start with /`},
		},
		{
			name: "unclean path",
			give: "routes:\n  - path: /a//b\n    upstream: http://127.0.0.1:3000/\n    source: a\n",
			want: []string{`idemhook.yaml:2: routes[0].path: invalid path "/a//b": not clean (did you mean "/a/b"?)`},
		},
		{
			name: "bad listen address",
			give: "listen: 8080\n" + minimal,
			want: []string{`idemhook.yaml:1: listen: invalid address "8080": want host:port, e.g. 127.0.0.1:8080 or :8080`},
		},
		{
			name: "bad listen port",
			give: "listen: 127.0.0.1:99999\n" + minimal,
			want: []string{`idemhook.yaml:1: listen: invalid address "127.0.0.1:99999": bad port "99999"`},
		},
		{
			name: "admin on the same address",
			give: "listen: 127.0.0.1:8080\nadmin: {listen: 127.0.0.1:8080}\n" + minimal,
			want: []string{`idemhook.yaml:2: admin.listen: same address as listen (127.0.0.1:8080): give the admin listener its own port`},
		},
		{
			name: "admin token required off loopback",
			give: "admin: {listen: \":9090\"}\n" + minimal,
			want: []string{`idemhook.yaml:1: admin.token: required when admin.listen (:9090) is not a loopback address: the admin API can delete keys (use token: ${IDEMHOOK_ADMIN_TOKEN})`},
		},
		{
			name: "store driver",
			give: "store: {driver: mongo}\n" + minimal,
			want: []string{`idemhook.yaml:1: store.driver: invalid driver "mongo" (want sqlite, redis, postgres or memory)`},
		},
		{
			name: "redis without url",
			give: "store:\n  driver: redis\n" + minimal,
			want: []string{`idemhook.yaml:2: store: driver redis needs url (redis://host:port/db) or addrs (a list of host:port)`},
		},
		{
			name: "redis with an empty url",
			give: "store: {driver: redis, url: }\n" + minimal,
			want: []string{`idemhook.yaml:1: store: driver redis needs url (redis://host:port/db) or addrs (a list of host:port)`},
		},
		{
			name: "redis bad url",
			give: "store: {driver: redis, url: \"http://x:1\"}\n" + minimal,
			want: []string{`idemhook.yaml:1: store.url: invalid Redis URL "http://x:1": redis: invalid URL scheme: http (want redis://[user:password@]host:port/db)`},
		},
		{
			name: "field of another driver",
			give: "store: {driver: memory, url: \"redis://x:1\"}\n" + minimal,
			want: []string{`idemhook.yaml:1: store.url: only used by drivers redis and postgres (driver is memory)`},
		},
		{
			name: "postgres without url",
			give: "audit: {sink: postgres}\n" + minimal,
			want: []string{`idemhook.yaml:1: audit.url: sink postgres needs url (postgres://user:password@host:5432/db), unless the store is PostgreSQL too`},
		},
		{
			name: "bad size",
			give: route("    max_body: 5 parsecs\n"),
			want: []string{`idemhook.yaml:5: routes[0].max_body: invalid size "5 parsecs" (examples: 5MiB, 512KiB, 1048576)`},
		},
		{
			name: "bad header name",
			give: route("    header: \"x key\"\n"),
			want: []string{`idemhook.yaml:5: routes[0].header: invalid header name "x key"`},
		},
		{
			name: "env var in a string",
			give: "listen: ${LISTEN}\n" + minimal,
			want: []string{`idemhook.yaml:1: listen: environment variable LISTEN is not set or empty (used as ${LISTEN})`},
		},
		{
			name: "field given twice",
			give: "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n" + minimal,
			want: []string{`idemhook.yaml:2: listen: field given twice (first at line 1)`},
		},
		{
			name: "wrong kind",
			give: "routes: {path: /a}\n",
			want: []string{`idemhook.yaml:1: routes: expected a list of routes (- path: ...), got a mapping`},
		},
		{
			name: "no routes",
			give: "listen: 127.0.0.1:8080\n",
			want: []string{`idemhook.yaml:1: routes: missing: the gateway needs at least one route (path, upstream, source)`},
		},
		{
			name: "empty file",
			give: "",
			want: []string{`idemhook.yaml:1: the file is empty: it needs at least routes: (see examples/idemhook.yaml)`},
		},
		{
			name: "YAML syntax",
			give: "listen: a\n\tb: c\n",
			want: []string{`idemhook.yaml:2: invalid YAML: a tab in the indentation (column 1): YAML indents with spaces only`},
		},
		{
			name: "two routes with one source",
			give: "routes:\n  - path: /a\n    upstream: http://h/\n    source: s\n  - path: /b\n    upstream: http://h/\n    source: s\n",
			want: []string{
				`idemhook.yaml:4: routes[0].source: source "s" is also used by routes[1], line 7: routes with one source share keys and answer each other's deliveries; give each route its own source, or set share_keys: true on every route of the source`,
				`idemhook.yaml:7: routes[1].source: source "s" is also used by routes[0], line 4: routes with one source share keys and answer each other's deliveries; give each route its own source, or set share_keys: true on every route of the source`,
			},
		},
		{
			name: "one source, share_keys on one route only",
			give: "routes:\n  - path: /a\n    upstream: http://h/\n    source: s\n    share_keys: true\n  - path: /b\n    upstream: http://h/\n    source: s\n",
			want: []string{
				`idemhook.yaml:8: routes[1].source: source "s" is also used by routes[0], line 4: routes with one source share keys and answer each other's deliveries; give each route its own source, or set share_keys: true on every route of the source`,
			},
		},
		{
			name: "a source the keys can't hold",
			give: "routes:\n  - path: /a\n    upstream: http://h/\n    source: a@b\n  - path: /b\n    upstream: http://h/\n    source: \"c d\"\n  - path: /c\n    upstream: http://h/\n    source: e:f\n",
			want: []string{
				`idemhook.yaml:4: routes[0].source: invalid source "a@b": a non-empty label without ':', '@' or spaces, e.g. stone`,
				`idemhook.yaml:7: routes[1].source: invalid source "c d": a non-empty label without ':', '@' or spaces, e.g. stone`,
				`idemhook.yaml:10: routes[2].source: invalid source "e:f": a non-empty label without ':', '@' or spaces, e.g. stone`,
			},
		},
		{
			name: "store_statuses and booleans",
			give: route("    store_statuses: [404, 200, 503, x]\n    require_key: yes\n"),
			want: []string{
				`idemhook.yaml:5: routes[0].store_statuses[1]: invalid status "200": want a 3xx or 4xx status to store and replay like a success (2xx always is; 1xx and 5xx never are)`,
				`idemhook.yaml:5: routes[0].store_statuses[2]: invalid status "503": want a 3xx or 4xx status to store and replay like a success (2xx always is; 1xx and 5xx never are)`,
				`idemhook.yaml:5: routes[0].store_statuses[3]: invalid status "x": want a 3xx or 4xx status to store and replay like a success (2xx always is; 1xx and 5xx never are)`,
				`idemhook.yaml:6: routes[0].require_key: invalid require_key "yes" (want true or false)`,
			},
		},
		{
			name: "every error at once",
			give: "listen: 8080\nroutes:\n  - path: /a\n    upstream: ftp://x\n    ttl: soon\n  - path: /a\n    upstream: http://h/\n    source: b\n    in_flight: later\n",
			want: []string{
				`idemhook.yaml:1: listen: invalid address "8080": want host:port, e.g. 127.0.0.1:8080 or :8080`,
				`idemhook.yaml:3: routes[0].source: missing: the provider's label, e.g. source: stone (it names the keys: idem:<source>:<key>)`,
				`idemhook.yaml:4: routes[0].upstream: malformed upstream URL "ftp://x": want http:// or https://`,
				`idemhook.yaml:5: routes[0].ttl: invalid duration "soon" (examples: 500ms, 30s, 10m, 24h, 7d)`,
				`idemhook.yaml:6: routes[1].path: duplicate path "/a" (also routes[0], line 3)`,
				`idemhook.yaml:9: routes[1].in_flight: invalid in_flight "later" (want proceed, wait or reject)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("idemhook.yaml", []byte(tt.give), envOf(tt.env...), clients)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want Errors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestConfigYAMLErrorLine(t *testing.T) {
	routes := strings.Repeat("  - path: /r\n    upstream: http://h/\n    source: r\n    share_keys: true\n", 20) // lines 2 to 81
	tests := []struct {
		name string
		give string
		want string
	}{
		{"key under-indented in a route", "routes:\n  - path: /x\n   upstream: http://h/\n    source: s\n",
			`idemhook.yaml:3: invalid YAML: did not find expected '-' indicator (this line is indented differently from the fields or entries above it)`},
		{"key under-indented in the 21st route", "routes:\n" + routes + "  - path: /x\n    upstream: http://h/\n   source: s\n",
			`idemhook.yaml:84: invalid YAML: did not find expected '-' indicator (this line is indented differently from the fields or entries above it)`},
		{"key over-indented", "routes:\n  - path: /x\n      upstream: http://h/\n",
			`idemhook.yaml:3: invalid YAML: mapping values are not allowed in this context`},
		{"key out of its route", "routes:\n- path: /x\n  upstream: http://h/\n source: s\n",
			`idemhook.yaml:4: invalid YAML: did not find expected key (this line is indented differently from the fields or entries above it)`},
		{"section key indented", "listen: 127.0.0.1:8080\n store: {driver: memory}\n",
			`idemhook.yaml:2: invalid YAML: mapping values are not allowed in this context`},
		{"unclosed quote", "routes:\n  - path: /x\n    upstream: \"http://h/\n    source: s\n",
			`idemhook.yaml:3: invalid YAML: found unexpected end of stream`},
		{"unclosed list", "store: {driver: memory}\nroutes:\n  - path: /x\n    replay_headers: [A, B\n    source: s\n",
			`idemhook.yaml:4: invalid YAML: did not find expected ',' or ']'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("idemhook.yaml", []byte(tt.give), envOf())
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"ttl", "ttl", 0},
		{"", "ttl", 3},
		{"tll", "ttl", 1},                // a substitution
		{"listne", "listen", 1},          // two neighbours swapped
		{"secretfile", "secret_file", 1}, // an insertion
		{"providers", "provider", 1},     // a deletion
		{"retries", "retry_after", 6},
	}
	for _, tt := range tests {
		if got := suggest.Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestExampleConfigs(t *testing.T) {
	env := envOf("STRIPE_WEBHOOK_SECRET", "whsec_x", "ADYEN_HMAC_KEY", "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056", "META_APP_SECRET", "meta", "SHOPIFY_WEBHOOK_SECRET", "shpss_x", "GITHUB_WEBHOOK_SECRET", "gh", "REDIS_URL", "redis://127.0.0.1:6379/0",
		"AUDIT_URL", "postgres://postgres@127.0.0.1:5432/test", "IDEMHOOK_ADMIN_TOKEN", "t",
		"IDEMHOOK_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
	tests := []struct {
		file   string
		routes int
	}{
		{"idemhook.yaml", 6},
		{"redis.yaml", 3},
		{"postgres.yaml", 1},
	}
	for _, tt := range tests {
		cfg, err := Load(filepath.Join("../../examples", tt.file), env)
		if err != nil {
			t.Errorf("examples/%s: %v", tt.file, err)
			continue
		}
		if len(cfg.Routes) != tt.routes {
			t.Errorf("examples/%s: %d routes, want %d", tt.file, len(cfg.Routes), tt.routes)
		}
	}
}

func FuzzConfig(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("listen: ${X:-127.0.0.1:1}\nstore: {driver: redis, addrs: [a:1]}\nroutes: [{path: /a, upstream: 'http://h', source: s, provider: stripe, secrets: [x], provider_options: {a: b}}]\n"))
	f.Add([]byte("store: {driver: postgres, url: 'postgres://u:p@h:5432/d?sslmode=disable', table: s.t}\naudit: {sink: postgres}\nroutes: [{path: /a, upstream: 'http://h', source: s}]\n"))
	f.Add([]byte("routes: [{path: /s/{tenant}, upstream: 'http://h', source: s, provider: stripe, tenants: {a: {secret_env: X}, b.c: {secrets: [y, z]}, d: {secret_file: /nonexistent}}}]\n"))
	f.Add([]byte("a: &x [*x]\nroutes: *x\n"))
	f.Add([]byte("routes:\n  - &r {path: /a, upstream: 'http://h', source: s}\n  - *r\n"))
	if data, err := os.ReadFile("../../examples/idemhook.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data, envOf("X", "1"))
		if err == nil && (cfg == nil || len(cfg.Routes) == 0) {
			t.Fatalf("no error and no routes")
		}
		var errs Errors
		if err != nil && !errors.As(err, &errs) {
			t.Fatalf("error of type %T: %v", err, err)
		}
		for _, e := range errs {
			if e.Line < 1 || e.File != "fuzz.yaml" {
				t.Fatalf("error without a position: %+v", e)
			}
		}
	})
}

// TestConfigSecondDocument: a "---" followed by more YAML starts a second
// document, which a single Unmarshal drops without a word. A setting
// written there (here listen) would be silently ignored, and the gateway
// would start with another configuration than the file shows.
func TestConfigSecondDocument(t *testing.T) {
	text := minimal + "---\nlisten: 0.0.0.0:9999\n"
	_, err := Parse("f.yaml", []byte(text), envOf())
	if err == nil {
		t.Fatal("Parse accepted a file whose second YAML document is ignored")
	}
	if want := "f.yaml:6:"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s (the second document)", err, want)
	}
	// One document with --- before or after it stays valid.
	for _, text := range []string{"---\n" + minimal, minimal + "---\n", minimal + "---\n# end\n", minimal + "...\n"} {
		if _, err := Parse("f.yaml", []byte(text), envOf()); err != nil {
			t.Fatalf("one document %q: %v", text, err)
		}
	}
}

// TestConfigMergeKeys: YAML merge keys ("<<: *anchor", "<<: [*a, *b]") are
// the usual way to share settings between routes. The merged fields apply
// unless the route sets them itself, merged fields are checked like written
// ones (an unknown one names the line where it is written), and a merge of
// something other than a mapping is an error naming its line.
func TestConfigMergeKeys(t *testing.T) {
	text := `routes:
  - &stripe
    path: /a
    upstream: http://127.0.0.1:3000/a
    source: a
    ttl: 48h
    in_flight: wait
  - <<: *stripe
    path: /b
    source: b
    ttl: 1h
  - <<: [*stripe]
    path: /c
    source: c
`
	cfg, err := Parse("f.yaml", []byte(text), envOf())
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"b upstream (merged)", cfg.Routes[1].Upstream.String(), "http://127.0.0.1:3000/a"},
		{"b ttl (own)", cfg.Routes[1].Route.TTL, time.Hour},
		{"b in_flight (merged)", string(cfg.Routes[1].Route.InFlight), "wait"},
		{"b path (own)", cfg.Routes[1].Path, "/b"},
		{"c ttl (merged)", cfg.Routes[2].Route.TTL, 48 * time.Hour},
		{"c source (own)", cfg.Routes[2].Route.Source, "c"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	bad := []struct{ name, text, want string }{
		{"unknown merged field", `routes:
  - &r
    path: /a
    upstream: http://127.0.0.1:3000/a
    source: a
  - <<: {retries: 3}
    path: /b
    upstream: http://127.0.0.1:3000/a
    source: b
`, `f.yaml:6: routes[1].retries: unknown field "retries"`},
		{"merge of a scalar", `routes:
  - <<: nope
    path: /b
    upstream: http://127.0.0.1:3000/a
    source: b
`, `f.yaml:2: routes[0].<<: can only merge a mapping`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.text), envOf())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestConfigAliasBomb: anchors that merge each other twice at every level
// stand for 2^26 routes' worth of fields in a 27-line file. The file is
// refused with one error instead of being expanded.
func TestConfigAliasBomb(t *testing.T) {
	lines := []string{"x0: &a0 {path: /a}"}
	for i := 1; i < 25; i++ {
		lines = append(lines, fmt.Sprintf("x%d: &a%d {<<: [*a%d, *a%d]}", i, i, i-1, i-1))
	}
	lines = append(lines, "routes:", "  - <<: [*a24, *a24]", "    upstream: http://h/", "    source: s")
	_, err := Parse("f.yaml", []byte(strings.Join(lines, "\n")), envOf())
	want := ": routes[0]: the file stands for more than 200000 values once its aliases are expanded"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
}

// TestConfigProviderOptionsDuplicate: a provider option given twice is an
// error naming the second line, as for every other mapping of the file,
// instead of the last value silently winning (here the verify_token Meta's
// challenge is checked against).
func TestConfigProviderOptionsDuplicate(t *testing.T) {
	text := `routes:
  - path: /wa
    upstream: http://127.0.0.1:3000/wa
    source: wa
    provider: whatsapp-cloud
    secrets: [app-secret]
    provider_options:
      verify_token: first
      verify_token: second
`
	_, err := Parse("f.yaml", []byte(text), envOf())
	if err == nil {
		t.Fatal("Parse accepted provider_options with verify_token twice")
	}
	if want := "f.yaml:9: routes[0].provider_options.verify_token: field given twice (first at line 8)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
}

// TestConfigErrorsHideURLPasswords: a URL whose password comes from the
// environment (${PW}) and that is wrong in some other way must be reported
// without the password, whether or not the URL parses. Configuration errors
// are printed to terminals and CI logs.
func TestConfigErrorsHideURLPasswords(t *testing.T) {
	const pw = "hunter2-Secret"
	route := func(upstream string) string {
		return "routes:\n  - path: /a\n    upstream: " + upstream + "\n    source: a\n"
	}
	tests := []struct {
		name, yaml, field string
	}{
		{"upstream with user info", route("http://user:${PW}@127.0.0.1/x"), "routes[0].upstream"},
		{"upstream bad port", route("http://user:${PW}@127.0.0.1:nope/x"), "routes[0].upstream"},
		{"upstream bad scheme", route("ftp://user:${PW}@127.0.0.1/x"), "routes[0].upstream"},
		{"redis bad port", "store: {driver: redis, url: \"redis://:${PW}@127.0.0.1:nope/0\"}\n" + route("http://127.0.0.1/x"), "store.url"},
		{"postgres bad port", "audit: {sink: postgres, url: \"postgres://u:${PW}@127.0.0.1:nope/db\"}\n" + route("http://127.0.0.1/x"), "audit.url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.yaml), envOf("PW", pw), clients)
			if err == nil {
				t.Fatal("Parse accepted the file")
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name %s", err, tt.field)
			}
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

// TestConfigWrongTypeOneError: a required field of the wrong type (a list
// or a mapping where a single value belongs) is reported once, as a wrong
// type, and not also as missing, which would send the user looking for a
// field that is there.
func TestConfigWrongTypeOneError(t *testing.T) {
	text := `routes:
  - path: [/a]
    upstream: {url: http://127.0.0.1:3000/a}
    source: [a, b]
`
	_, err := Parse("f.yaml", []byte(text), envOf())
	if err == nil {
		t.Fatal("Parse accepted wrong types")
	}
	msg := err.Error()
	for _, want := range []string{
		"f.yaml:2: routes[0].path: expected a single value, got a list",
		"f.yaml:3: routes[0].upstream: expected a single value, got a mapping",
		"f.yaml:4: routes[0].source: expected a single value, got a list",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "missing") {
		t.Errorf("a field given with the wrong type is also reported missing:\n%s", msg)
	}
}

// parserFields returns the fields the parser knows in each section, read
// from its own refusal of an unknown field there ("known: a, b, c"), so
// that the list can't drift from the parser.
func parserFields(t *testing.T) []string {
	t.Helper()
	const route = "  - {path: /a, upstream: http://127.0.0.1:1/, source: s}\n"
	sections := []struct{ prefix, give string }{
		{"", "zz_unknown: 1\nroutes:\n" + route},
		{"store.", "store: {zz_unknown: 1}\nroutes:\n" + route},
		{"admin.", "admin: {zz_unknown: 1}\nroutes:\n" + route},
		{"audit.", "audit: {zz_unknown: 1}\nroutes:\n" + route},
		{"log.", "log: {zz_unknown: 1}\nroutes:\n" + route},
		{"tls.", "tls: {zz_unknown: 1}\nroutes:\n" + route},
		{"limits.", "limits: {zz_unknown: 1}\nroutes:\n" + route},
		{"routes[].", "routes:\n  - {path: /a, upstream: http://127.0.0.1:1/, source: s, zz_unknown: 1}\n"},
	}
	known := regexp.MustCompile(`unknown field "zz_unknown" \(known: ([^)]*)\)`)
	var out []string
	for _, s := range sections {
		_, err := Parse("x.yaml", []byte(s.give), envOf())
		m := known.FindStringSubmatch(strings.ReplaceAll(err.Error(), "\n", " "))
		if m == nil {
			t.Fatalf("section %q: no list of known fields in %v", s.prefix, err)
		}
		for _, f := range strings.Split(m[1], ", ") {
			out = append(out, s.prefix+f)
		}
	}
	slices.Sort(out)
	return out
}

// exampleFields returns the fields examples/idemhook.yaml names, set or in
// a comment ("# field: value"), by section: the example must show every
// field, and may comment out those that don't go together (a second store
// driver, tls).
func exampleFields(t *testing.T, text string) []string {
	t.Helper()
	field := regexp.MustCompile(`^( *)(- )?([a-z_]+):( |$)`)
	var out []string
	top := ""
	for _, l := range strings.Split(text, "\n") {
		indent := len(l) - len(strings.TrimLeft(l, " "))
		content := l[indent:]
		if c, ok := strings.CutPrefix(content, "#"); ok { // a commented field keeps its place
			content = strings.TrimPrefix(c, " ")
		}
		m := field.FindStringSubmatch(content)
		if m == nil {
			continue
		}
		indent += len(m[1])
		switch name := m[3]; {
		case indent == 0 && m[2] == "":
			top = name
			out = append(out, name)
		case top == "routes":
			out = append(out, "routes[]."+name)
		default:
			out = append(out, top+"."+name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// examples/idemhook.yaml lists every field the parser knows, and no other.
func TestExampleListsEveryField(t *testing.T) {
	data, err := os.ReadFile("../../examples/idemhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := parserFields(t)
	got := exampleFields(t, string(data))
	for _, f := range want {
		if !slices.Contains(got, f) {
			t.Errorf("examples/idemhook.yaml does not show %s", f)
		}
	}
	for _, f := range got {
		if !slices.Contains(want, f) {
			t.Errorf("examples/idemhook.yaml shows %s, which the parser does not know", f)
		}
	}
}

func TestConfigForwardSecret(t *testing.T) {
	tests := []struct {
		name, give string
		env        []string
		wantKey    int    // bytes of the decoded key
		wantErr    string // "" when valid
	}{
		{name: "off", give: minimal},
		{name: "whsec_ and 24 bytes", give: minimal + "    forward_secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", wantKey: 24},
		{name: "from the environment, no prefix", give: minimal + "    forward_secret: ${FWD}\n", env: []string{"FWD", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, wantKey: 24},
		{name: "not base64", give: minimal + "    forward_secret: whsec_not*base64\n",
			wantErr: `idemhook.yaml:5: routes[0].forward_secret: not "whsec_<base64>": the part after whsec_ does not decode as base64 (make one with: echo whsec_$(head -c 32 /dev/urandom | base64))`},
		{name: "too short", give: minimal + "    forward_secret: whsec_c2hvcnQ=\n",
			wantErr: `idemhook.yaml:5: routes[0].forward_secret: the key is 5 bytes: want at least 24 random bytes (make one with: echo whsec_$(head -c 32 /dev/urandom | base64))`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("idemhook.yaml", []byte(tt.give), envOf(tt.env...))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("got %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := len(cfg.Routes[0].ForwardKey); n != tt.wantKey {
				t.Fatalf("key of %d bytes, want %d", n, tt.wantKey)
			}
		})
	}
}

// An adyen secret that is not hex is reported at secret_file's line when
// the route's secrets come from a file.
func TestConfigAdyenSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "adyen.secrets")
	if err := os.WriteFile(path, []byte("# the old key, then the new one\n44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056\nnot-hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Parse("idemhook.yaml", []byte(minimal+"    provider: adyen\n    secret_file: "+path+"\n"), envOf())
	want := `idemhook.yaml:6: routes[0].secret_file: provider adyen: secret #2 is not a hex HMAC key`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse: %v, want %q", err, want)
	}
}

// docs/gateway.md's table of routes[] lists every field a route may hold,
// and no other.
func TestGatewayDocListsEveryRouteField(t *testing.T) {
	data, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### `routes[]`\n")
	if !ok {
		t.Fatal("docs/gateway.md has no ### `routes[]`")
	}
	section, _, _ = strings.Cut(section, "\n#")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	for _, f := range RouteFields() {
		if !slices.Contains(documented, f) {
			t.Errorf("docs/gateway.md's routes[] table has no row for %s", f)
		}
	}
	for _, f := range documented {
		if !slices.Contains(RouteFields(), f) {
			t.Errorf("docs/gateway.md's routes[] table has a row for %s, which a route does not hold", f)
		}
	}
}
