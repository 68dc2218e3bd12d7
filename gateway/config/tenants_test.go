package config

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tenantRoute is a route on path from line 2, its provider on line 5 and
// extra from line 6.
func tenantRoute(path, extra string) string {
	return "routes:\n  - path: " + path + "\n    upstream: http://127.0.0.1:3000/stripe\n    source: stripe\n    provider: stripe\n" + extra
}

func TestConfigTenants(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "globex.secrets")
	if err := os.WriteFile(file, []byte("whsec_globex_new\nwhsec_globex_old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("idemhook.yaml", []byte(tenantRoute("/webhooks/stripe/{tenant}", `    tenants:
      acme: {secret_env: STRIPE_SECRET_ACME}
      globex:
        secret_file: `+file+`
`)), envOf("STRIPE_SECRET_ACME", "whsec_acme"))
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Routes[0]
	want := []Tenant{{Name: "acme", Line: 7, SecretCount: 1}, {Name: "globex", Line: 8, SecretFile: file, SecretCount: 2}}
	if len(rc.Tenants) != 2 || rc.Tenants[0] != want[0] || rc.Tenants[1] != want[1] {
		t.Fatalf("Tenants = %+v, want %+v", rc.Tenants, want)
	}
	if rc.Route.Preset == nil || rc.Route.Preset.Name != "stripe" || rc.Route.Scope == nil || rc.Route.TTL != rc.Route.Preset.DefaultTTL() {
		t.Fatalf("route: preset %v, scope set %v, ttl %v", rc.Route.Preset, rc.Route.Scope != nil, rc.Route.TTL)
	}
	r := httptest.NewRequest("POST", "/webhooks/stripe/acme", nil)
	r.SetPathValue("tenant", "acme")
	if got := rc.Route.Scope(r); got != "acme" {
		t.Fatalf("scope %q, want acme", got)
	}
}

// A /{tenant} path without tenants: serves every tenant with the route's
// own secrets, its keys still scoped by the tenant alone.
func TestConfigTenantPathWithoutTenants(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte(tenantRoute("/webhooks/stripe/{tenant}", "    secrets: [whsec_all]\n")), envOf())
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/webhooks/stripe/acme", nil)
	r.SetPathValue("tenant", "acme")
	if s := cfg.Routes[0].Route.Scope; s == nil || s(r) != "acme" {
		t.Fatal("the keys of a /{tenant} route are not scoped by the tenant")
	}
}

// Every problem of tenants: is reported at its line and field.
func TestConfigTenantsErrors(t *testing.T) {
	env := envOf("STRIPE_SECRET_ACME", "whsec_acme")
	missing := filepath.Join(t.TempDir(), "none.secrets")
	tests := []struct {
		name, give string
		want       []string
	}{
		{"a path without {tenant}", tenantRoute("/webhooks/stripe", "    tenants: {acme: {secret_env: STRIPE_SECRET_ACME}}\n"),
			[]string{`idemhook.yaml:6: routes[0].tenants: needs a path ending in /{tenant}, whose value picks the tenant's secrets: path "/webhooks/stripe" has none (e.g. path: /webhooks/stripe/{tenant})`}},
		{"another wildcard", tenantRoute("/webhooks/{provider}/{tenant}", "    secret_env: STRIPE_SECRET_ACME\n"),
			[]string{`idemhook.yaml:2: routes[0].path: invalid path "/webhooks/{provider}/{tenant}": no spaces, braces, ? or # allowed (the one wildcard a path may have is a last segment /{tenant})`}},
		{"the route's own secret too", tenantRoute("/s/{tenant}", "    secret_env: STRIPE_SECRET_ACME\n    tenants: {acme: {secret_env: STRIPE_SECRET_ACME}}\n"),
			[]string{`idemhook.yaml:6: routes[0].secret_env: with tenants:, each tenant gives its own secrets: move secret_env into the tenants' entries`}},
		{"no provider", "routes:\n  - path: /s/{tenant}\n    upstream: http://127.0.0.1:3000/\n    source: s\n    tenants: {acme: {secret_env: STRIPE_SECRET_ACME}}\n",
			[]string{`idemhook.yaml:5: routes[0].tenants: only used with provider: (the signature check of a preset); set provider or remove tenants`}},
		{"not a mapping", tenantRoute("/s/{tenant}", "    tenants: [acme]\n"),
			[]string{`idemhook.yaml:6: routes[0].tenants: expected a mapping of tenants (acme: {secret_env: STRIPE_SECRET_ACME} lines), got a list`}},
		{"bad entries, all reported", tenantRoute("/s/{tenant}", `    tenants:
      ac/me: {secret_env: STRIPE_SECRET_ACME}
      globex: {secret_evn: STRIPE_SECRET_ACME}
      initech: {secret_env: STRIPE_SECRET_INITECH}
      umbrella: {}
      hooli: whsec_inline
      wayne: {secret_file: `+missing+`}
      stark: {secrets: [a], secret_file: `+missing+`}
`), []string{
			`idemhook.yaml:7: routes[0].tenants.ac/me: invalid tenant name "ac/me": only letters, digits, '.', '_', '-' and '~'`,
			`idemhook.yaml:8: routes[0].tenants.globex.secret_evn: unknown field "secret_evn": did you mean "secret_env"? (known: secret_env, secrets, secret_file)`,
			`idemhook.yaml:9: routes[0].tenants.initech.secret_env: environment variable STRIPE_SECRET_INITECH is not set or empty (export it, or use secrets: [${STRIPE_SECRET_INITECH}])`,
			`idemhook.yaml:10: routes[0].tenants.umbrella: tenant umbrella has no secret: give secret_env: NAME, secret_file: FILE (one secret per line, read again on every reload) or secrets: [...]`,
			`idemhook.yaml:11: routes[0].tenants.hooli: expected the tenant's secrets as a mapping: {secret_env: NAME}, {secret_file: FILE} or {secrets: [...]}, got "whsec_inline"`,
			`idemhook.yaml:12: routes[0].tenants.wayne.secret_file: secret file ` + missing + ` does not exist`,
			`idemhook.yaml:13: routes[0].tenants.stark.secret_file: give a tenant's secrets in one place: secret_file, or secret_env and secrets (the file's lines are then every secret the tenant accepts, so that removing a line and reloading removes that secret)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("idemhook.yaml", []byte(tt.give), env)
			if err == nil {
				t.Fatal("no error")
			}
			var got []string
			if es, ok := err.(Errors); ok {
				for _, e := range es {
					got = append(got, e.Error())
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tt.want, "\n     "))
			}
		})
	}
}
