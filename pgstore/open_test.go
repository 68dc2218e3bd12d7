package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/pgtest"
	"github.com/idemhook/idemhook/pgstore"
)

// Open makes the pool and the store, which creates its table; the store
// works, and Close closes it and the pool.
func TestOpen(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table(t, pool, "idemhook_open")
	ctx := t.Context()
	o, err := pgstore.Open(ctx, pgstore.OpenConfig{Config: pgstore.Config{Table: table, Batch: true}, URL: pgtest.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	rec := &idemhook.Record{State: idemhook.StatePending, Token: "tok", CreatedAt: time.Now()}
	if existing, err := o.Store.Claim(ctx, "k", rec, time.Minute); err != nil || existing != nil {
		t.Fatalf("Claim = %v, %v", existing, err)
	}
	if got, err := o.Store.Get(ctx, "k"); err != nil || got == nil || got.Token != "tok" {
		t.Fatalf("Get = %v, %v; want the claim", got, err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Pool.Ping(ctx); err == nil {
		t.Error("the pool answers after Close")
	}
}

// NewPool opens all the pool's connections at start unless the URL sets
// pool_min_conns. It connects lazily, so no server is needed.
func TestOpenNewPool(t *testing.T) {
	for _, tt := range []struct {
		query    string
		min, max int32
	}{
		{"pool_max_conns=7", 7, 7},
		{"pool_max_conns=7&pool_min_conns=2", 2, 7},
		{"pool_min_conns=0", 0, 0}, // max: pgx's default, checked below
	} {
		p, err := pgstore.NewPool(t.Context(), "postgres://u:pw@127.0.0.1:1/none?"+tt.query)
		if err != nil {
			t.Fatalf("%s: %v", tt.query, err)
		}
		cfg := p.Config()
		p.Close()
		want := tt.max
		if want == 0 {
			want = cfg.MaxConns
		}
		if cfg.MinConns != tt.min || cfg.MaxConns != want {
			t.Errorf("%s: MinConns, MaxConns = %d, %d; want %d, %d", tt.query, cfg.MinConns, cfg.MaxConns, tt.min, want)
		}
	}
}

// A URL pgx can't read fails Open with pgx's own error, before anything
// connects, and an unreachable server fails it within ctx.
func TestOpenBadURL(t *testing.T) {
	const bad = "postgres://u:pw@127.0.0.1:1/none?pool_max_conns=many"
	_, want := pgxpool.ParseConfig(bad)
	if want == nil {
		t.Fatal("pgx accepts the bad URL")
	}
	if _, err := pgstore.Open(t.Context(), pgstore.OpenConfig{URL: bad}); err == nil || err.Error() != want.Error() {
		t.Errorf("Open = %v, want pgx's %v", err, want)
	}
	if _, err := pgstore.NewPool(t.Context(), bad); err == nil || err.Error() != want.Error() {
		t.Errorf("NewPool = %v, want pgx's %v", err, want)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := pgstore.Open(ctx, pgstore.OpenConfig{URL: "postgres://u:pw@127.0.0.1:1/none?connect_timeout=2"}); err == nil {
		t.Error("Open on a server that isn't there succeeded")
	}
}
