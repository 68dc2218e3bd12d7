package redisaudit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/redisaudit"
	"github.com/redis/go-redis/v9"
)

// ExampleNew needs a Redis server, so it is compiled but not run. The
// conformance tests write and query a sink made the same way when
// IDEMHOOK_REDIS_URL is set.
func ExampleNew() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	trail, err := redisaudit.New(client, redisaudit.Config{MaxLen: 50000}) // stream idemhook:audit
	if err != nil {
		log.Fatal(err)
	}
	recorder := audit.NewRecorder(trail, audit.RecorderConfig{})
	recorder.Record(audit.Entry{Time: time.Now(), Source: "stone", Outcome: "processed", Status: 200})
	if err := recorder.Close(ctx); err != nil {
		log.Fatal(err)
	}
	page, err := trail.Query(ctx, audit.Filter{Source: "stone", Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(page.Entries), "entries")
}
