package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/redisstore"
)

// claimAndGet checks that st stores a claim and reads it back.
func claimAndGet(t *testing.T, st idemhook.Store) {
	t.Helper()
	ctx := t.Context()
	rec := &idemhook.Record{State: idemhook.StatePending, Token: "tok", CreatedAt: time.Now()}
	if existing, err := st.Claim(ctx, "k", rec, time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim = %v, %v", existing, err)
	}
	if got, err := st.Get(ctx, "k"); err != nil || got == nil || got.Token != "tok" {
		t.Fatalf("Get = %v, %v; want the claim", got, err)
	}
}

// Open on a URL makes a client of that server that fails fast, and the
// store on it; Close closes both.
func TestOpen(t *testing.T) {
	u := redistest.URL(t)
	prefix := "test:" + rand.Text() + ":"
	t.Cleanup(func() {
		if _, err := redistest.DeletePrefix(context.Background(), redistest.Client(t), prefix); err != nil {
			t.Errorf("deleting the keys of prefix %q: %v", prefix, err)
		}
	})
	o, err := redisstore.Open(redisstore.OpenConfig{Config: redisstore.Config{Prefix: prefix}, URL: u})
	if err != nil {
		t.Fatal(err)
	}
	claimAndGet(t, o.Store)
	c, ok := o.Client.(*redis.Client)
	if !ok {
		t.Fatalf("client %T, want a *redis.Client", o.Client)
	}
	// go-redis reads MaxRetries -1 as no retries, which it keeps as 0 (its
	// default, 3, is what 0 asks for).
	if opts := c.Options(); opts.MaxRetries != 0 || opts.DialerRetries != 1 {
		t.Errorf("MaxRetries, DialerRetries = %d, %d; want 0 (no retries), 1", opts.MaxRetries, opts.DialerRetries)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Client.Ping(t.Context()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("Ping after Close = %v, want redis.ErrClosed", err)
	}
}

// Open on a Sentinel's address with MasterName finds the master through it.
func TestOpenSentinel(t *testing.T) {
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, "idemhook", master.Addr())
	o, err := redisstore.Open(redisstore.OpenConfig{Addrs: []string{sentinel.Addr()}, MasterName: "idemhook"})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	claimAndGet(t, o.Store)
	mc := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer mc.Close()
	if n, err := mc.Exists(t.Context(), "k").Result(); err != nil || n != 1 {
		t.Errorf("EXISTS k on the master = %d, %v; want 1", n, err)
	}
}

// The URL's database, user and password are the client's, and its user
// and password take the place of Username and Password; several Addrs
// without MasterName make a Cluster client. The client connects at the
// first command: no server needed.
func TestOpenOptions(t *testing.T) {
	o, err := redisstore.Open(redisstore.OpenConfig{URL: "redis://u:pw@127.0.0.1:1/3", Username: "x", Password: "y", Addrs: []string{"a:1", "b:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	c, ok := o.Client.(*redis.Client)
	if !ok {
		t.Fatalf("client %T, want a *redis.Client", o.Client)
	}
	if opts := c.Options(); opts.Addr != "127.0.0.1:1" || opts.DB != 3 || opts.Username != "u" || opts.Password != "pw" {
		t.Errorf("Addr, DB, Username, Password = %q, %d, %q, %q; want the URL's", opts.Addr, opts.DB, opts.Username, opts.Password)
	}
	o2, err := redisstore.Open(redisstore.OpenConfig{URL: "redis://127.0.0.1:1/0", Username: "x", Password: "y"})
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	if opts := o2.Client.(*redis.Client).Options(); opts.Username != "x" || opts.Password != "y" {
		t.Errorf("Username, Password = %q, %q; want the config's", opts.Username, opts.Password)
	}
	o3, err := redisstore.Open(redisstore.OpenConfig{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer o3.Close()
	if _, ok := o3.Client.(*redis.ClusterClient); !ok {
		t.Errorf("client %T, want a *redis.ClusterClient", o3.Client)
	}
}

// A URL go-redis can't read fails Open with go-redis's own error, and a
// config New refuses with New's, after closing the client.
func TestOpenBadConfig(t *testing.T) {
	const bad = "http://127.0.0.1:6379/0"
	_, want := redis.ParseURL(bad)
	if want == nil {
		t.Fatal("go-redis accepts the bad URL")
	}
	if _, err := redisstore.Open(redisstore.OpenConfig{URL: bad}); err == nil || err.Error() != want.Error() {
		t.Errorf("Open = %v, want go-redis's %v", err, want)
	}
	cfg := redisstore.Config{WaitTimeout: time.Second} // without WaitReplicas
	_, want = redisstore.New(redis.NewClient(&redis.Options{}), cfg)
	if want == nil {
		t.Fatal("New accepts WaitTimeout alone")
	}
	if _, err := redisstore.Open(redisstore.OpenConfig{Config: cfg, URL: "redis://127.0.0.1:1/0"}); err == nil || err.Error() != want.Error() {
		t.Errorf("Open = %v, want New's %v", err, want)
	}
}
