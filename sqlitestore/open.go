package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// BusyTimeout is how long a connection opened by [Open] waits for a lock
// held by another connection (another process sharing the file, or a
// second *sql.DB in this one) before failing with SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// cacheKiB is the page cache of a connection opened by [Open], in KiB.
// SQLite's default (2 MiB) holds the inner pages of the key index up to
// about a million keys. Past that, every lookup reads them again from the
// operating system's cache. 32 MiB keeps them for tens of millions of keys
// (docs/benchmarks.md, the key-count curve). It is a read cache, so it
// changes nothing about durability.
const cacheKiB = 32 << 10

// Open opens, creating it if needed, the SQLite database file at path. The
// settings suit the gateway's workload:
//
//   - journal_mode=WAL: Readers never block the writer, nor the writer
//     them. A commit appends to the log instead of rewriting pages.
//   - synchronous=NORMAL: With WAL, a commit is durable against a crash of
//     the process. Only a power loss may lose the last commits, and it
//     never corrupts the file.
//   - cache_size of 32 MiB: The inner pages of the key index stay in memory
//     as the keys grow to tens of millions.
//   - busy_timeout (see [BusyTimeout]) and foreign_keys=ON.
//   - Transactions begin IMMEDIATE: A transaction that will write takes the
//     write lock up front, so it can't fail with SQLITE_BUSY halfway.
//
// The pool holds a single connection that is never recycled. SQLite admits
// one writer at a time, and nearly every store operation writes. So more
// connections would only queue on SQLite's file lock, where a waiter sleeps
// and retries. One connection makes them queue in database/sql instead, in
// order, with no SQLITE_BUSY and no sleeping. Each operation is a single
// short statement, so the queue drains fast. This has a consequence for
// callers sharing the *sql.DB. Don't hold a transaction or an open
// *sql.Rows while calling something else that uses the same *sql.DB,
// because it would wait forever.
//
// The caller owns the returned *sql.DB and closes it after the stores and
// sinks built on it.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlitestore: open: empty path")
	}
	db, mode, err := openPool(dsn(path), 1)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w (does the directory exist and is it writable?)", path, err)
	}
	if !strings.EqualFold(mode, "wal") && !strings.EqualFold(mode, "memory") {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: journal_mode is %q, want wal (is the file on a network filesystem?)", path, mode)
	}
	return db, nil
}

// openPool opens a pool of at most conns connections that are never
// recycled, and returns the journal mode its first connection reports: the
// query that makes the driver open the file and apply the settings of dsn.
func openPool(dsn string, conns int) (*sql.DB, string, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, "", err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	ctx, cancel := context.WithTimeout(context.Background(), BusyTimeout+5*time.Second)
	defer cancel()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, "", err
	}
	registerPool(db) // its connections are never recycled: it may take raw statements
	return db, mode, nil
}

// maxReaders bounds the connections of a pool opened by [OpenReader]. Each
// has its own page cache (up to cacheKiB), so more would cost memory for
// reads that are short and CPU-bound anyway.
var maxReaders = min(4, max(2, runtime.GOMAXPROCS(0)))

// OpenReader opens a pool of read-only connections to the database file at
// path, for [Config.Reader], after [Open] has opened the file (and so set
// it to WAL mode, which OpenReader checks). In WAL mode a read runs beside
// the writer's transaction, on the state of the last commit. So the reads
// of a store (a Claim's first look, a replay's Get) need not wait for the
// one connection of Open's pool while the writer commits.
//
// The pool holds up to min(4, max(2, GOMAXPROCS)) connections that are
// never recycled, each with the page cache and busy timeout of Open's, and
// query_only set: a write through it fails. The caller closes it after the
// stores built on it.
func OpenReader(path string) (*sql.DB, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("sqlitestore: open reader: want the path of a database file, got %q", path)
	}
	db, mode, err := openPool(readerDSN(path), maxReaders)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open reader %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open reader %s: journal_mode is %q, want wal (open the file with Open first)", path, mode)
	}
	return db, nil
}

// dsn builds the modernc.org/sqlite data source name for path. It is a
// file: URI with the connection settings as query parameters. SQLite
// decodes %XX escapes in it.
func dsn(path string) string {
	q := fileSettings()
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	return fileURI(path, q)
}

// readerDSN is dsn for the connections of [OpenReader]: the same file, no
// journal mode set (the file's own, WAL, applies), and query_only.
func readerDSN(path string) string {
	q := fileSettings()
	q.Add("_pragma", "query_only(1)")
	return fileURI(path, q)
}

// fileSettings are the settings of every connection: the busy timeout and
// the page cache.
func fileSettings() url.Values {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", fmt.Sprintf("cache_size(%d)", -cacheKiB))
	return q
}

// fileURI is the file: URI of path with the settings q.
func fileURI(path string, q url.Values) string {
	if path != ":memory:" {
		path = filepath.Clean(path)
	}
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return "file:" + esc + "?" + q.Encode()
}
