package redistest

import (
	"crypto/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestServerKillRestart(t *testing.T) {
	s := StartServer(t, "--maxmemory", "10mb")
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	opts, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	// The extra arguments reach the server.
	got, err := c.ConfigGet(ctx, "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["maxmemory"] != "10485760" {
		t.Errorf("maxmemory = %q, want 10485760 (from --maxmemory 10mb)", got["maxmemory"])
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Kill() // a second Kill does nothing

	s.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after Restart = (%d, %v), want an empty server", n, err)
	}
}

func TestSentinel(t *testing.T) {
	master := StartServer(t)
	s := StartSentinel(t, "idemhook", master.Addr())
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	addr, err := c.GetMasterAddrByName(t.Context(), "idemhook").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(addr, ":"); got != master.Addr() {
		t.Errorf("master address from Sentinel = %q, want %q", got, master.Addr())
	}
}

// DeletePrefix deletes exactly the keys under the prefix, over more than
// one batch, and leaves the others.
func TestDeletePrefix(t *testing.T) {
	ctx := t.Context()
	client := Client(t)
	prefix := "redistest:" + rand.Text() + ":"
	pipe := client.Pipeline()
	for i := range 2500 {
		pipe.Set(ctx, prefix+strconv.Itoa(i), "x", time.Minute)
	}
	other := prefix[:len(prefix)-1] + "-other"
	pipe.Set(ctx, other, "x", time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Del(ctx, other)
	n, err := DeletePrefix(ctx, client, prefix)
	if err != nil || n != 2500 {
		t.Fatalf("DeletePrefix: %d, %v; want 2500, nil", n, err)
	}
	if left, _ := client.Keys(ctx, prefix+"*").Result(); len(left) != 0 {
		t.Fatalf("%d keys left under the prefix", len(left))
	}
	if client.Exists(ctx, other).Val() != 1 {
		t.Fatal("a key outside the prefix was deleted")
	}
}
