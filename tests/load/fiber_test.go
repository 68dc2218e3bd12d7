package load

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook/internal/testutil/redistest"
)

// The peer rows of the library comparison: Fiber's idempotency middleware
// (github.com/gofiber/fiber/v3/middleware/idempotency), on its default
// in-memory storage and on gofiber/storage's Redis driver, each measured
// against Fiber's own bare handler in the same round, as the middleware's
// rows are against the bare net/http handler. Every Fiber row is a real
// Fiber app (fasthttp underneath) on a loopback port of this process, driven
// by the same senders.
//
// Fiber's middleware takes its key from a header rather than from the body,
// so these rows send one: new for each first delivery, one fixed key for
// the replays. The bare Fiber handler gets the same requests.

// fiberKeyHeader is the header Fiber's idempotency middleware reads its key
// from (its Config.KeyHeader's default).
const fiberKeyHeader = "X-Idempotency-Key"

// fiberKeys makes the keys of one run. Fiber's default KeyHeaderValidate
// refuses a key that is not 36 characters long, the length of a UUID, so the
// keys are shaped as version 4 UUIDs. Their first group is the run's, which
// keeps them apart from any other run's on a shared Redis (the Redis driver
// stores the key as it comes, with no prefix) and lets the run delete its own.
type fiberKeys struct{ run uint32 }

func newFiberKeys() fiberKeys { return fiberKeys{run: rand.Uint32()} }

// prefix is what every key of the run starts with.
func (k fiberKeys) prefix() string { return fmt.Sprintf("%08x-", k.run) }

// unique is request n's key for first deliveries: a different one for every
// n below 2^60 (the measured requests' n stay below 2^48 with fewer than 256
// rounds and rows).
func (k fiberKeys) unique(n int64) string {
	u := uint64(n)
	return fmt.Sprintf("%08x-0000-4%03x-8000-%012x", k.run, u>>48&0xfff, u&0xffffffffffff)
}

// same is the replays' one key; its second group keeps it apart from every
// unique key.
func (k fiberKeys) same(int64) string { return fmt.Sprintf("%08x-ffff-4fff-8fff-ffffffffffff", k.run) }

// fiberHandler is the bare handler's work in Fiber: read the body (fasthttp
// has read it from the connection before the handler runs, as the net/http
// handler does with io.Copy) and answer the same small JSON document. It
// counts its runs in runs.
func fiberHandler(runs *atomic.Int64) fiber.Handler {
	return func(c fiber.Ctx) error {
		runs.Add(1)
		_ = c.Body()
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.SendString(`{"ok":true}`)
	}
}

// serveFiber serves a Fiber app whose POST /hook runs fiberHandler behind
// middleware (none when nil) on a free loopback port until the test ends.
// It returns the route's URL and the handler's run count.
func serveFiber(t *testing.T, middleware fiber.Handler) (string, *atomic.Int64) {
	t.Helper()
	runs := new(atomic.Int64)
	app := fiber.New()
	if middleware != nil {
		app.Use(middleware)
	}
	app.Post("/hook", fiberHandler(runs))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) //nolint:errcheck // ends with Shutdown
	t.Cleanup(func() { app.ShutdownWithTimeout(5 * time.Second) })
	return "http://" + ln.Addr().String() + "/hook", runs
}

// checkFiberReplays fails the test unless the Fiber app at url runs its
// handler once for two deliveries of one key, both answered 200 with the
// same body: so the rows measure Fiber's middleware storing and replaying,
// not skipping (a key it refuses, a method it lets through).
func checkFiberReplays(t *testing.T, url, key string, runs *atomic.Int64) {
	t.Helper()
	before := runs.Load()
	var bodies [2]string
	for i := range bodies {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(loadBody(-2)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(fiberKeyHeader, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s, delivery %d: %d %q, %v", url, i+1, resp.StatusCode, b, err)
		}
		bodies[i] = string(b)
	}
	if n := runs.Load() - before; n != 1 || bodies[0] != bodies[1] {
		t.Fatalf("%s: two deliveries of one key ran the handler %d times, answers %q and %q; want once, the same answer", url, n, bodies[0], bodies[1])
	}
}

// addFiberRows adds the Fiber rows through pair (the load test's): the bare
// Fiber handler as their baseline, then Fiber's idempotency middleware on
// memory and, with rdb set, on Redis through gofiber/storage's driver made
// from redisURL the driver's default way (its own go-redis client, pool of
// 10 per GOMAXPROCS). The baseline runs only if a Fiber row is wanted.
func addFiberRows(t *testing.T, pair func(group, name, url string, base [2]*loadRow) [2]*loadRow,
	wanted func(string) bool, redisURL string, rdb *redis.Client) {
	t.Helper()
	const memName, redisName = "Fiber idempotency, memory", "Fiber idempotency, Redis"
	withRedis := rdb != nil && wanted(redisName)
	if !wanted(memName) && !withRedis {
		return
	}
	keys := newFiberKeys()
	keyed := func(rows [2]*loadRow) [2]*loadRow {
		rows[0].key, rows[1].key = keys.unique, keys.same
		return rows
	}

	// A key no measured request uses (their n stay below 2^48).
	check := keys.unique(1 << 59)
	bareURL, _ := serveFiber(t, nil)
	bare := keyed(pair("library", "bare Fiber handler", bareURL, [2]*loadRow{}))
	bare[0].baseline, bare[1].baseline = nil, nil
	if wanted(memName) {
		// idempotency.New's defaults: its in-memory storage and lock.
		url, runs := serveFiber(t, idempotency.New())
		checkFiberReplays(t, url, check, runs)
		keyed(pair("library", memName, url, bare))
	}
	if withRedis {
		store := fiberredis.New(fiberredis.Config{URL: redisURL})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			redistest.DeletePrefix(ctx, rdb, keys.prefix()) //nolint:errcheck // a load run's own keys, best effort
			store.Close()
		})
		url, runs := serveFiber(t, idempotency.New(idempotency.Config{Storage: store}))
		checkFiberReplays(t, url, check, runs)
		keyed(pair("library", redisName, url, bare))
	}
}
