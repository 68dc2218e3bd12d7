package gateway

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/redisstore"
	"github.com/idemhook/idemhook/sqlitestore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// resources are what the gateway opens and must close, in reverse order.
type resources struct {
	closers []func() error
}

func (rs *resources) add(f func() error) { rs.closers = append(rs.closers, f) }

// close closes everything, last opened first, and returns the first error.
func (rs *resources) close() error {
	var first error
	for i := len(rs.closers) - 1; i >= 0; i-- {
		if err := rs.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	rs.closers = nil
	return first
}

// connections are the gateway's connections to its store and audit sink,
// shared between the two: one *sql.DB per SQLite file, one PostgreSQL pool
// per URL and the Redis store's client. A SQLite file is used by
// one gateway process at a time. open (sqlitestore.OpenWriter), and
// sqlitestore.OpenFile for the store's file, take its lock
// (sqlitestore.Lock), so that claims found pending at start belong to a
// process that died and can be freed at once.
type connections struct {
	rs     *resources
	logger *slog.Logger
	dbs    map[string]*sql.DB
	pools  map[string]*pgxpool.Pool
	// redis is the redis store's client, which the audit sink redis
	// shares. It is nil with another store.
	redis redis.UniversalClient
}

// pgPool returns the pool for url, made on first use (pgstore.NewPool: it
// connects lazily and, unless the URL sets pool_min_conns, opens all its
// connections at once, in the background).
func (f *connections) pgPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if p, ok := f.pools[url]; ok {
		return p, nil
	}
	p, err := pgstore.NewPool(ctx, url)
	if err != nil {
		return nil, err
	}
	f.sharePool(url, p)
	f.rs.add(func() error { p.Close(); return nil })
	return p, nil
}

// sharePool records p, the pool for url, for the audit sink when it writes
// to the same database.
func (f *connections) sharePool(url string, p *pgxpool.Pool) {
	if f.pools == nil {
		f.pools = map[string]*pgxpool.Pool{}
	}
	f.pools[url] = p
}

// share records db, the writer of the SQLite file at path, for the audit
// sink when it writes to the same file.
func (f *connections) share(path string, db *sql.DB) {
	if f.dbs == nil {
		f.dbs = map[string]*sql.DB{}
	}
	f.dbs[path] = db
}

// open returns the writer of the SQLite file at path: the store's when it
// is the same file, else opened here under the file's lock
// (sqlitestore.OpenWriter).
func (f *connections) open(path string) (*sql.DB, error) {
	if db, ok := f.dbs[path]; ok {
		return db, nil
	}
	w, err := sqlitestore.OpenWriter(path, f.logger)
	if err != nil {
		return nil, err
	}
	f.rs.add(w.Close) // the writer, then the lock
	f.share(path, w.DB)
	return w.DB, nil
}

// sqliteCacheBytes is how many bytes of recent completed records the SQLite
// store keeps in memory, holding the file alone, so that the providers'
// retries of recent deliveries are answered without reading the file.
const sqliteCacheBytes = 32 << 20

// postgresStartTimeout bounds the creation of the PostgreSQL store's table at
// start.
const postgresStartTimeout = 10 * time.Second

// openStore opens the configured store.
// lease is the longest lease of any route. A pending claim in a SQLite file
// this process holds alone expires at most that long after its last write.
func openStore(ctx context.Context, sc config.Store, files *connections, now func() time.Time, lease time.Duration) (idemhook.Store, error) {
	switch sc.Driver {
	case "memory":
		s, err := memstore.New(memstore.Config{Now: now})
		if err != nil {
			return nil, fmt.Errorf("memory store: %w", err)
		}
		files.rs.add(s.Close)
		return s, nil
	case "sqlite":
		// Holding the file alone, the store keeps pending claims in memory
		// and recent records in a cache, and frees the claims a dead
		// process left (sqlitestore.OpenFile says how).
		f, err := sqlitestore.OpenFile(ctx, sc.Path, sqlitestore.FileConfig{
			Config: sqlitestore.Config{Now: now, Logger: files.logger, CacheBytes: sqliteCacheBytes},
			Lease:  lease,
		})
		if err != nil {
			return nil, err
		}
		files.rs.add(f.Close)
		files.share(sc.Path, f.DB)
		return f.Store, nil
	case "redis":
		// Batch (the default): the commands of concurrent deliveries share
		// pipelines (docs/benchmarks.md measures what that saves).
		// wait_replicas: each claim and completion waits for replicas
		// (docs/stores.md, "Redis failover and replicas"). Open's client
		// fails fast, as redisstore advises for a webhook path.
		o, err := redisstore.Open(redisstore.OpenConfig{
			Config: redisstore.Config{
				Prefix: sc.Prefix, CompactKeys: sc.Compact,
				WaitReplicas: sc.WaitReplicas, WaitTimeout: sc.WaitTimeout, WaitAOF: sc.WaitAOF,
			},
			URL: sc.URL, Addrs: sc.Addrs, MasterName: sc.MasterName,
			Username: sc.Username, Password: sc.Password,
		})
		if err != nil {
			return nil, fmt.Errorf("redis store: %w", err)
		}
		files.rs.add(o.Close) // the store, then the client
		files.redis = o.Client
		return o.Store, nil
	case "postgres":
		// The table is created (or checked) at start, so that a wrong URL
		// or missing rights fail here rather than at the first delivery.
		// The start is bounded, so that an unreachable host doesn't hang it.
		start, cancel := context.WithTimeout(ctx, postgresStartTimeout)
		defer cancel()
		// Batch: the writes of concurrent deliveries share a commit
		// (docs/benchmarks.md measures what that saves).
		o, err := pgstore.Open(start, pgstore.OpenConfig{Config: pgstore.Config{Table: sc.Table, Batch: true}, URL: sc.URL})
		if err != nil {
			return nil, fmt.Errorf("postgres store %s: %w", config.RedactURL(sc.URL), err)
		}
		files.rs.add(o.Close) // the store, then the pool
		files.sharePool(sc.URL, o.Pool)
		return o.Store, nil
	}
	return nil, fmt.Errorf("unknown store driver %q", sc.Driver)
}
