package audit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoDriver: package audit compiles no database driver, so that a
// program using only its types, Recorder, Ring or Log compiles none. The
// sinks on a database are packages of their own (sqliteaudit, pgaudit,
// redisaudit). It runs go list, which takes well under a second.
func TestNoDriver(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps .: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, driver := range []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "modernc.org/"} {
			if strings.HasPrefix(dep, driver) {
				t.Errorf("package audit depends on %s", dep)
			}
		}
	}
}
