package pgstore

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// NewPool returns a pool on the database at url (pgx's connection string:
// a postgres:// URL or key=value pairs, with pgxpool's pool_* settings),
// as the gateway makes it for its store and its audit trail.
//
// It connects lazily: a server that is down fails the first statement, not
// this call. Unless url sets pool_min_conns, the pool opens all its
// connections (pool_max_conns) at once, in the background. The error of a
// url pgx can't read is pgxpool.ParseConfig's.
//
// The caller closes the pool after whatever uses it.
func NewPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(url, "pool_min_conns") {
		// Pre-opened (in the background, so a server down still fails the
		// first statement, not the start): the first burst of deliveries
		// then finds its connections open rather than each dialing within
		// the store's 250 ms deadline (docs/stores.md, "PostgreSQL pool").
		cfg.MinConns = cfg.MaxConns
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// OpenConfig configures [Open]: the store's Config and the database's URL.
type OpenConfig struct {
	// Config is the store's ([New]).
	Config

	// URL is the database's, as [NewPool] reads it. Required.
	URL string
}

// Opened is a store that [Open] opened, with the pool it made for it.
type Opened struct {
	// Store is the store.
	Store *Store

	// Pool is the store's pool, which [Opened.Close] closes. Whatever else
	// uses the same database in this process (an audit trail) may share
	// it, and stop using it before Close.
	Pool *pgxpool.Pool
}

// Open opens the store on the database at cfg.URL in one call: it makes a
// pool ([NewPool]) and the store on it ([New]), which creates (or checks)
// the table, so that a wrong URL, a server that can't be reached or
// missing rights fail here rather than at the first delivery. ctx bounds
// that start; the pool outlives it. An error of either step is theirs,
// unwrapped, and closes what the first opened. Use [New] to build the
// store on a pool of your own (a tracer, a pool shared with your
// transactions).
func Open(ctx context.Context, cfg OpenConfig) (*Opened, error) {
	pool, err := NewPool(ctx, cfg.URL)
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, pool, cfg.Config)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Opened{Store: s, Pool: pool}, nil
}

// Close closes the store, then the pool.
func (o *Opened) Close() error {
	err := o.Store.Close()
	o.Pool.Close()
	return err
}
