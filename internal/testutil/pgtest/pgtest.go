// Package pgtest connects the tests of the PostgreSQL parts (pgstore, the
// exactly-once example, the gateway's postgres driver) to the server named by
// IDEMHOOK_POSTGRES_URL, and hands out table names unique to one test so that
// runs sharing a database never collide. A test that stops or crashes
// PostgreSQL starts a private server instead (StartServer).
package pgtest

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvVar names the server the tests use.
const EnvVar = "IDEMHOOK_POSTGRES_URL"

// URL returns IDEMHOOK_POSTGRES_URL, skipping the test when it is unset and
// failing it when the server can't be reached.
func URL(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv(EnvVar)
	if url == "" {
		tb.Skip(EnvVar + " is unset; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("%s is set but PostgreSQL is unreachable: %v", EnvVar, err)
	}
	conn.Close(ctx) //nolint:errcheck
	return url
}

// Pool returns a pool on the test server, closed when tb ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return PoolConfig(tb, nil)
}

// PoolConfig is Pool with a chance to adjust the pool's configuration
// (a tracer, the pool size) before it connects.
func PoolConfig(tb testing.TB, adjust func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("%s: %v", EnvVar, err)
	}
	if adjust != nil {
		adjust(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("%s: %v", EnvVar, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Table returns a fresh table name starting with prefix and drops the table
// when tb ends.
func Table(tb testing.TB, pool *pgxpool.Pool, prefix string) string {
	tb.Helper()
	name := prefix + "_" + strings.ToLower(rand.Text()[:12])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
			tb.Errorf("dropping test table %s: %v", name, err)
		}
	})
	return name
}
