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

// StartReplica returns a replica in sync with its master, and Sentinel
// settings reach the Sentinel's configuration.
func TestReplicaAndSentinelSettings(t *testing.T) {
	ctx := t.Context()
	master := StartServer(t)
	replica := StartReplica(t, master.Addr())
	mc := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { mc.Close() })
	if err := mc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the master = (%d, %v), want 1 replica", n, err)
	}
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rc.Close() })
	if got, err := rc.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on the replica = (%q, %v), want \"v\"", got, err)
	}

	s := StartSentinel(t, "idemhook", master.Addr(), "sentinel down-after-milliseconds idemhook 1234")
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { sc.Close() })
	m, err := sc.Master(ctx, "idemhook").Result()
	if err != nil {
		t.Fatal(err)
	}
	if m["down-after-milliseconds"] != "1234" {
		t.Errorf("SENTINEL MASTER: down-after-milliseconds = %q, want 1234", m["down-after-milliseconds"])
	}
}

// A Link delays what the master sends to the replica, so a write is not
// on the replica while the link holds it, and a cut drops what it holds.
func TestLink(t *testing.T) {
	ctx := t.Context()
	master := StartServer(t)
	link := StartLink(t, master.Addr(), 0)
	replica := StartReplica(t, link.Addr())
	mc := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { mc.Close() })
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rc.Close() })

	// Without delay, the link passes writes on.
	if err := mc.Set(ctx, "through", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 through the link = (%d, %v), want 1", n, err)
	}

	// Once the link holds the stream for a minute, a write is acknowledged
	// by no replica, and after a cut the replica never gets it.
	link.SetDelay(time.Minute)
	if err := mc.Set(ctx, "held", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Wait(ctx, 1, 50*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 through a link that holds the stream = (%d, %v), want 0", n, err)
	}
	link.Cut()
	waitLink(t, rc, "master_link_status:down")
	if n, err := rc.Exists(ctx, "held").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS held on the replica after the cut = (%d, %v), want 0: the link passed on what it held", n, err)
	}
	if n, err := rc.Exists(ctx, "through").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS through on the replica = (%d, %v), want 1", n, err)
	}
}

// waitLink polls the replica's INFO replication until it holds want.
func waitLink(t *testing.T, rc *redis.Client, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := rc.Info(t.Context(), "replication").Result()
		if err == nil && strings.Contains(info, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica's INFO replication never said %s: %v %s", want, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
