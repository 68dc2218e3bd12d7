package redisaudit_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit/audittest"
	"github.com/idemhook/idemhook/audit/redisaudit"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
)

// newSink returns a sink on the Redis of IDEMHOOK_REDIS_URL (the test skips
// when it is unset, fails when it is unreachable), on a key of its own
// deleted at the end.
func newSink(t *testing.T, _ func() time.Time) audittest.Trail {
	t.Helper()
	client := redistest.Client(t)
	s, err := redisaudit.New(client, redisaudit.Config{Key: "idemhook:audit:test:" + rand.Text()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Del(context.Background(), s.Key()) })
	return s
}

func TestConformance(t *testing.T) {
	audittest.Run(t, audittest.Harness{New: newSink, AppendOrder: true})
}
