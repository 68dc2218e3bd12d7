package pgtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A private server keeps what was committed across a crash (Kill) and an
// immediate shutdown (Stop), refuses connections while it is down, comes
// back on the same URL, and is not the shared server.
func TestServerStopKillStart(t *testing.T) {
	s := StartServer(t)
	if !strings.HasPrefix(s.URL(), "postgres://postgres@127.0.0.1:") || s.URL() == URL(t) {
		t.Fatalf("URL() = %q: want a server of its own on 127.0.0.1 (the shared one is %q)", s.URL(), URL(t))
	}
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			return err
		}
		defer conn.Close(ctx) //nolint:errcheck
		_, err = conn.Exec(ctx, sql)
		return err
	}
	count := func() int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx) //nolint:errcheck
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := exec(`CREATE TABLE t (n int)`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		down func()
	}{
		{"Kill", s.Kill},
		{"Stop", s.Stop},
	}
	for i, tt := range tests {
		if err := exec(`INSERT INTO t VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		tt.down()
		tt.down() // a second call does nothing
		if err := exec(`SELECT 1`); err == nil {
			t.Fatalf("after %s: a statement succeeded; want the server down", tt.name)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != i+1 {
			t.Fatalf("after %s and Start: %d rows; want %d (every committed insert)", tt.name, n, i+1)
		}
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != len(tests) {
		t.Fatalf("after Restart: %d rows; want %d", n, len(tests))
	}
}
