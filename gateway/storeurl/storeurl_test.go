package storeurl_test

import (
	"strings"
	"testing"

	"github.com/idemhook/idemhook/gateway/storeurl"
)

// The checks refuse what the clients refuse, and a PostgreSQL error gives
// the reason alone, never the URL or its password.
func TestChecker(t *testing.T) {
	var c storeurl.Checker
	if err := c.CheckRedisURL("redis://:pw@127.0.0.1:6379/0"); err != nil {
		t.Errorf("a good Redis URL: %v", err)
	}
	if err := c.CheckRedisURL("http://x:1"); err == nil || err.Error() != "redis: invalid URL scheme: http" {
		t.Errorf("a Redis URL of another scheme: %v", err)
	}
	if err := c.CheckPostgresURL("postgres://u:pw@127.0.0.1:5432/db?sslmode=disable"); err != nil {
		t.Errorf("a good PostgreSQL URL: %v", err)
	}
	err := c.CheckPostgresURL("postgres://u:s3cret@h:99999/db")
	if err == nil || err.Error() != "invalid port" {
		t.Errorf("a PostgreSQL URL with a bad port: %v, want \"invalid port\"", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error holds the password: %v", err)
	}
}
