package config

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/gateway/storeurl"
)

// The YAML reader must not link a database client: idemhook check, the
// editors' schema and anything else that reads a configuration would carry
// every driver otherwise. The stores and the audit sinks are where the
// drivers are, so they are refused too.
func TestConfigLinksNoDriver(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	refused := []string{
		"github.com/redis/", "github.com/jackc/", "modernc.org/sqlite", "database/sql",
		"github.com/idemhook/idemhook/pgstore", "github.com/idemhook/idemhook/redisstore",
		"github.com/idemhook/idemhook/sqlitestore", "github.com/idemhook/idemhook/memstore",
		"github.com/idemhook/idemhook/audit/",
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, r := range refused {
			if strings.HasPrefix(dep, r) {
				t.Errorf("gateway/config links %s", dep)
				break
			}
		}
	}
}

// clients checks store.url with the clients' parsers, as the idemhook
// command does.
var clients = WithURLChecker(storeurl.Checker{})
