package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/internal/testutil/redistest"
	"github.com/idemhook/idemhook/sqlitestore"
)

// TestStoreCallTimeout: the bound of the gateway's store calls (the
// middleware's, which /readyz probes with) is store.timeout when set, and
// otherwise the store's own: SQLite's busy timeout, since a call that gives
// up early on a loaded machine fails its delivery open; the library's 250ms
// for the others.
func TestStoreCallTimeout(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		store string
		want  time.Duration
	}{
		{fmt.Sprintf("store: {driver: sqlite, path: %q}", filepath.Join(dir, "a.db")), sqlitestore.BusyTimeout},
		{fmt.Sprintf("store: {driver: sqlite, path: %q, timeout: 2s}", filepath.Join(dir, "b.db")), 2 * time.Second},
		{"store: {driver: memory}", idemhook.DefaultStoreTimeout},
		// go-redis connects at the first command: no server needed.
		{"store: {driver: redis, url: \"redis://127.0.0.1:1/0\"}", idemhook.DefaultStoreTimeout},
		{"store: {driver: redis, url: \"redis://127.0.0.1:1/0\", timeout: 1s}", time.Second},
	} {
		cfg, err := config.Parse("f.yaml", []byte(strings.Replace(gatewaytest.RouteConfig("http://127.0.0.1:1"), "store: {driver: memory}", tt.store, 1)), gatewaytest.EnvOf())
		if err != nil {
			t.Fatalf("%s: %v", tt.store, err)
		}
		g, err := New(t.Context(), cfg, Options{Now: time.Now})
		if err != nil {
			t.Fatalf("%s: %v", tt.store, err)
		}
		if got := g.mw.StoreTimeout(); got != tt.want {
			t.Errorf("%s: store call timeout %v, want %v", tt.store, got, tt.want)
		}
		if err := g.res.close(); err != nil {
			t.Errorf("%s: close: %v", tt.store, err)
		}
	}
}

// TestRedisWaitReplicas: store.wait_replicas reaches the Redis store. On a
// master with one replica, waiting for 1, a delivery is stored and the
// replica holds its record when the answer goes out; waiting for 2, the
// claim is short, which the route's on_store_error: closed answers 503, and
// /readyz's probe reports.
func TestRedisWaitReplicas(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master.Addr())
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rc.Close() })
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true}`)) //nolint:errcheck // a test upstream
	}))
	t.Cleanup(upstream.Close)
	for _, tt := range []struct {
		replicas   int
		wantStatus int
		wantReady  string // "" for ready
	}{
		{1, http.StatusOK, ""},
		{2, http.StatusServiceUnavailable, "fewer replicas acknowledged the write than Config.WaitReplicas asks: 1 of 2 within 1s (WAIT); the claim was released"},
	} {
		t.Run(fmt.Sprintf("replicas=%d", tt.replicas), func(t *testing.T) {
			// wait_timeout 1s: a replica's acknowledgement took more than
			// 50ms in a fresh-clone run that tested every package at once.
			store := fmt.Sprintf("store: {driver: redis, url: %q, wait_replicas: %d, wait_timeout: 1s, timeout: 3s}", master.URL(), tt.replicas)
			text := strings.Replace(gatewaytest.RouteConfig(upstream.URL, "on_store_error: closed"), "store: {driver: memory}", store, 1)
			cfg, err := config.Parse("f.yaml", []byte(text), gatewaytest.EnvOf())
			if err != nil {
				t.Fatal(err)
			}
			g, err := New(t.Context(), cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close(context.Background()) })
			err = g.Ready(t.Context())
			if (tt.wantReady == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.wantReady) {
				t.Errorf("Ready = %v, want an error saying %q (none if empty)", err, tt.wantReady)
			}
			key := fmt.Sprintf("evt-%d", tt.replicas)
			req := httptest.NewRequest(http.MethodPost, "/webhooks/test", strings.NewReader(`{}`))
			req.Header.Set("Idempotency-Key", key)
			rec := httptest.NewRecorder()
			g.Handler().ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("delivery answered %d, want %d: %s", rec.Code, tt.wantStatus, rec.Body)
			}
			n, err := rc.Exists(t.Context(), idemhook.StoreKey("test", key)).Result()
			if want := map[bool]int64{true: 1, false: 0}[tt.wantStatus == http.StatusOK]; err != nil || n != want {
				t.Fatalf("EXISTS of the record on the replica = (%d, %v), want %d", n, err, want)
			}
		})
	}
}

// TestStoreConnectionsShared: the store's PostgreSQL pool is the one an
// audit trail on the same URL gets, and a trail on another URL gets one of
// its own; the Redis store's client is the one the audit stream gets.
// Closing the gateway's resources closes them.
func TestStoreConnectionsShared(t *testing.T) {
	ctx := t.Context()
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.URL(t)
		var rs resources
		files := &connections{rs: &rs, logger: slog.New(slog.DiscardHandler)}
		sc := config.Store{Driver: "postgres", URL: url, Table: pgtest.Table(t, pgtest.Pool(t), "idemhook_gw")}
		if _, err := openStore(ctx, sc, files, time.Now, time.Minute); err != nil {
			t.Fatal(err)
		}
		store, n := files.pools[url], len(rs.closers)
		if p, err := files.pgPool(ctx, url); err != nil || p != store || len(rs.closers) != n {
			t.Errorf("the audit's pool on the store's URL: %p, %v, %d closers; want the store's %p, %d", p, err, len(rs.closers), store, n)
		}
		other, err := files.pgPool(ctx, url+"&application_name=audit")
		if err != nil || other == store || len(rs.closers) != n+1 {
			t.Errorf("the audit's pool on another URL: %v, %d closers; want a pool of its own, %d", err, len(rs.closers), n+1)
		}
		if err := rs.close(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*pgxpool.Pool{store, other} {
			if err := p.Ping(ctx); err == nil {
				t.Error("a pool answers after the resources closed")
			}
		}
	})
	t.Run("redis", func(t *testing.T) {
		var rs resources
		files := &connections{rs: &rs, logger: slog.New(slog.DiscardHandler)}
		sc := config.Store{Driver: "redis", URL: redistest.URL(t), Prefix: "test:" + rand.Text() + ":"}
		st, err := openStore(ctx, sc, files, time.Now, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if files.redis == nil {
			t.Fatal("no client for the audit stream")
		}
		if _, err := st.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if err := files.redis.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rs.close(); err != nil {
			t.Fatal(err)
		}
		if err := files.redis.Ping(ctx).Err(); !errors.Is(err, redis.ErrClosed) {
			t.Errorf("Ping after the resources closed = %v, want redis.ErrClosed", err)
		}
	})
}

// TestStoreOpenBadURL: a URL the client can't read fails the start with
// the store's prefix (the URL's password hidden) and the client's own
// error, before anything connects.
func TestStoreOpenBadURL(t *testing.T) {
	const pgURL = "postgres://u:secret@127.0.0.1:1/none?pool_max_conns=many"
	_, pgErr := pgxpool.ParseConfig(pgURL)
	const redisURL = "http://u:secret@127.0.0.1:1/0"
	_, redisErr := redis.ParseURL(redisURL)
	for _, tt := range []struct {
		sc   config.Store
		want string
	}{
		{config.Store{Driver: "postgres", URL: pgURL}, "postgres store postgres://u:xxxxx@127.0.0.1:1/none?pool_max_conns=many: " + pgErr.Error()},
		{config.Store{Driver: "redis", URL: redisURL}, "redis store: " + redisErr.Error()},
	} {
		var rs resources
		files := &connections{rs: &rs, logger: slog.New(slog.DiscardHandler)}
		_, err := openStore(t.Context(), tt.sc, files, time.Now, time.Minute)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %s", tt.sc.Driver, err, tt.want)
		}
		if strings.Contains(fmt.Sprint(err), "secret") {
			t.Errorf("%s: the error shows the password: %v", tt.sc.Driver, err)
		}
		if len(rs.closers) != 0 {
			t.Errorf("%s: %d resources left to close after a failed open", tt.sc.Driver, len(rs.closers))
		}
	}
}
