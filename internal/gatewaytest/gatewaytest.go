// Package gatewaytest holds the helpers that the tests of the gateway
// (package gateway, its config, command idemhook and the browser test
// module) share: configuration texts, a getenv over pairs, and the
// comparison of the admin API's statistics. It is for tests only.
package gatewaytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/gateway/adminapi"
)

// Minimal is the smallest valid configuration.
const Minimal = `routes:
  - path: /webhooks/stone
    upstream: http://127.0.0.1:3000/webhook
    source: stone
`

// EnvOf is a getenv over the pairs kv (name, value, ...).
func EnvOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// WriteConfig writes text to a file in dir and returns its path.
func WriteConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "idemhook.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// RouteConfig is a one-route configuration over the memory store with the
// admin listener on a free port. The extra lines are appended to the route.
func RouteConfig(upstreamURL string, extra ...string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: memory}
admin: {listen: 127.0.0.1:0}
audit: {sink: none}
log: {level: debug}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
%s`, upstreamURL, indent(extra))
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// SQLiteConfig is a one-route configuration on SQLite (store and audit
// trail in one file in dir), admin on a free port.
func SQLiteConfig(dir, upstreamURL string, adminExtra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0%s}
log: {level: debug}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
  - path: /webhooks/other
    upstream: %s/other
    source: other
`, filepath.Join(dir, "idemhook.db"), adminExtra, upstreamURL, upstreamURL)
}

// SourceStats returns the statistics of source in s; the test fails
// without them.
func SourceStats(t *testing.T, s adminapi.Stats, source string) adminapi.SourceStats {
	t.Helper()
	for _, x := range s.Sources {
		if x.Source == source {
			return x
		}
	}
	t.Fatalf("source %q not in %+v", source, s.Sources)
	return adminapi.SourceStats{}
}

// Rate returns a pointer to f, a duplicate rate.
func Rate(f float64) *float64 { return &f }

// SameWindow fails the test when got is not want.
func SameWindow(t *testing.T, what string, got adminapi.Window, want adminapi.Window) {
	t.Helper()
	rateOf := func(p *float64) string {
		if p == nil {
			return "null"
		}
		return fmt.Sprintf("%.6f", *p)
	}
	if got.Total != want.Total || got.Processed != want.Processed || got.Replayed != want.Replayed ||
		got.Refused != want.Refused || got.Failed != want.Failed || got.Unprotected != want.Unprotected ||
		got.Other != want.Other || got.Duplicates != want.Duplicates ||
		rateOf(got.DuplicateRate) != rateOf(want.DuplicateRate) || fmt.Sprint(got.Outcomes) != fmt.Sprint(want.Outcomes) {
		t.Errorf("%s:\n got %+v Rate %s\nwant %+v Rate %s", what, got, rateOf(got.DuplicateRate), want, rateOf(want.DuplicateRate))
	}
}
