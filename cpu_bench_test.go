//go:build unix

package idemhook_test

import (
	"context"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/proccpu"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/redisstore"
)

// BenchmarkCPUPerDelivery reports the CPU time this process spends per
// delivery ("cpu-µs/op", user plus system, from getrusage). It calls
// ServeHTTP from 32 goroutines, for first deliveries and replays. The rows
// are the bare handler and the middleware on the memory store and on Redis
// (IDEMHOOK_REDIS_URL) through go-redis, by default (batched) and with
// Unbatched, and through rueidis. Redis's own CPU is not counted. The middleware's
// cost per delivery is its row's figure minus the bare handler's.
func BenchmarkCPUPerDelivery(b *testing.B) {
	var seq atomic.Int64
	fresh := func() []byte { return eventBody(seq.Add(1)) }
	same := eventBody(-1)
	one := func() []byte { return same }
	run := func(b *testing.B, h http.Handler, next func() []byte) {
		b.SetParallelism(16)
		start := proccpu.Used()
		serveInProcess(b, h, next)
		b.ReportMetric(float64((proccpu.Used()-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	protect := func(b *testing.B, st idemhook.Store) http.Handler {
		mw, err := idemhook.New(st, idemhook.Options{})
		if err != nil {
			b.Fatal(err)
		}
		route, err := mw.Route(idemhook.Route{Source: "cpu" + time.Now().Format("150405.000000000")})
		if err != nil {
			b.Fatal(err)
		}
		return route(webhookHandler)
	}
	b.Run("bare/first", func(b *testing.B) { run(b, webhookHandler, fresh) })
	b.Run("bare/replay", func(b *testing.B) { run(b, webhookHandler, one) })
	for _, replay := range []bool{false, true} {
		name, next := "first", fresh
		if replay {
			name, next = "replay", one
		}
		b.Run("memory/"+name, func(b *testing.B) {
			st, err := memstore.New(memstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			run(b, protect(b, st), next)
		})
	}
	url := os.Getenv("IDEMHOOK_REDIS_URL")
	if url == "" {
		b.Log("IDEMHOOK_REDIS_URL is not set: no Redis rows")
		return
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	opts.MaxRetries, opts.DialerRetries = -1, 1
	client := redis.NewClient(opts)
	defer client.Close()
	ropt, err := rueidis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	ropt.DisableCache, ropt.DisableRetry = true, true
	rclient, err := rueidis.NewClient(ropt)
	if err != nil {
		b.Fatal(err)
	}
	defer rclient.Close()
	clients := []struct {
		name string
		open func(redisstore.Config) (*redisstore.Store, error)
	}{
		{"redis", func(cfg redisstore.Config) (*redisstore.Store, error) { return redisstore.New(client, cfg) }},
		{"redis-unbatched", func(cfg redisstore.Config) (*redisstore.Store, error) {
			cfg.Unbatched = true
			return redisstore.New(client, cfg)
		}},
		{"rueidis", func(cfg redisstore.Config) (*redisstore.Store, error) { return redisstore.NewRueidis(rclient, cfg) }},
	}
	for _, c := range clients {
		for _, traffic := range []struct {
			name string
			next func() []byte
		}{{"first", fresh}, {"replay", one}} {
			b.Run(c.name+"/"+traffic.name, func(b *testing.B) {
				prefix := "idemhook-cpu-bench-" + time.Now().Format("150405.000000000") + ":"
				st, err := c.open(redisstore.Config{Prefix: prefix})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				defer redistest.DeletePrefix(context.Background(), client, prefix) //nolint:errcheck // best effort
				run(b, protect(b, st), traffic.next)
			})
		}
	}
}
