// Package storeurl checks the URL of a Redis or a PostgreSQL store the way
// the store's client (go-redis, pgx) will read it, without connecting.
//
// It stands apart from package gateway/config so that reading a
// configuration links no database client: config asks these checks through
// its [config.URLChecker], and the idemhook command, which links the
// clients anyway, gives it [Checker] (config.WithURLChecker).
package storeurl

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Checker checks store URLs with the clients' own parsers. It satisfies
// config.URLChecker.
type Checker struct{}

// CheckRedisURL returns why go-redis refuses u, or nil.
func (Checker) CheckRedisURL(u string) error {
	_, err := redis.ParseURL(u)
	return err
}

// CheckPostgresURL returns why pgx refuses u, or nil. The error never holds
// the URL (nor its password): pgx's message quotes the URL (password hidden)
// before the reason, and only the reason is kept, for the caller shows the
// URL itself.
func (Checker) CheckPostgresURL(u string) error {
	if _, err := pgx.ParseConfig(u); err != nil {
		msg := err.Error()
		if _, reason, ok := strings.Cut(msg, "`: "); ok {
			msg = reason
		}
		return errors.New(msg)
	}
	return nil
}
