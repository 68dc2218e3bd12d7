// Package sqlitestore is an [idemhook.Store] kept in a SQLite database file,
// through the pure Go driver modernc.org/sqlite (no cgo).
//
// It is the gateway's default store. It runs on one machine with no server
// to run. The records survive a restart, so a duplicate sent after the
// gateway restarts is still replayed. Every process that opens the same
// file shares the records, and Claim is atomic across them. A process that
// holds the file alone ([Lock], [Config.Lock]) keeps its pending claims in
// memory instead, and writes only completed records.
//
// Records live in the table idem_keys (key, value, expires_at), a WITHOUT
// ROWID table keyed by key. value is the record's binary encoding
// ([idemhook.Record.MarshalBinary]) and expires_at the expiry in Unix
// milliseconds. A row whose expiry has passed counts as absent. A background
// sweeper deletes such rows (see [Config]). Expiry has millisecond
// precision, like Redis's PX.
//
// BenchmarkStore measured these costs on a shared 2-core machine. A first
// delivery (Claim and Complete) takes about 50-65µs with two commits, and
// about 30µs with one, when the process holds the file alone
// ([Config.Lock]). A replay (one read) takes about 5µs. Commits append to the WAL without
// fsync (synchronous=NORMAL). Their time goes mostly to the system calls of
// the WAL write and of the file locks that let other processes share the
// file. So the writes of concurrent deliveries are committed together. One
// writer goroutine runs the writes waiting at that moment in one
// transaction (see writer.go). Each caller gets its result after that
// commit. A first delivery's writes and a replay's read run as statements
// prepared on the driver's connection itself, past database/sql's per-call
// costs (see raw.go); BenchmarkStoreCPU gives the CPU each takes.
//
// The store is an [idemhook.BatchStore]. ClaimBatch, CompleteBatch,
// ReleaseBatch and ExtendBatch run the single calls' statements, one per
// op, as one write of that writer: one transaction and one commit for a
// batched delivery of 1,000 items or more. ClaimBatch reads first, as Claim
// does, so a batch whose keys are all done commits nothing. Held alone
// ([Config.Lock]), only CompleteBatch writes (one commit); the claims,
// releases and extensions stay in memory. Two ops on one key act as two
// calls in the batch's order. See batchstore.go.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/periodic"
	"github.com/idemhook/idemhook/internal/recordio"
	"github.com/idemhook/idemhook/internal/sqlschema"
)

// SchemaVersion is the version of the idem_keys table this package writes.
// It is recorded in the table idemhook_schema, so that an older idemhook
// refuses a file migrated by a newer one instead of misreading it.
//
// Version 2 keeps the rows in a WITHOUT ROWID table without an expiry index,
// so that each key is stored once (version 1 kept it in the table and in its
// unique index, next to an index on expires_at). [New] migrates a version 1
// file by copying its live rows into the new table.
const SchemaVersion = 2

const schemaComponent = "sqlitestore"

// Config configures a [Store]. The zero value means the defaults.
type Config struct {
	// Now is the clock deciding expiry. Default: time.Now.
	Now func() time.Time

	// SweepInterval is how often the sweeper deletes expired rows. Expired
	// rows already count as absent. Sweeping only reclaims their space. The
	// table has no expiry index, so the sweeper reads rows in key order
	// (about 0.35s per million measured on a shared 2-core machine). Each
	// run reads at most 100,000 rows and the next run goes on from there, so
	// a table of N rows is swept whole every N/100,000 intervals.
	// A negative value disables the sweeper ([Store.Sweep] still works).
	// Default: 1 minute.
	SweepInterval time.Duration

	// FileCheckInterval is how often the store checks that the database's
	// path still names the file it has open. When it doesn't, every call
	// fails with ErrFileReplaced (see there why) and an ERROR is logged.
	// A negative value disables the check. Default:
	// DefaultFileCheckInterval (1s).
	FileCheckInterval time.Duration

	// Logger receives a WARN when a background sweep fails and an ERROR
	// when the database file is lost. Default: none.
	Logger *slog.Logger

	// Reader is a pool of read-only connections to the same file
	// ([OpenReader]). When set, the store's reads outside a write (a
	// Claim's first look, Get) go there, and run beside the writer's
	// transactions instead of waiting for db's connection. The caller owns
	// it and closes it after [Store.Close]. Default: nil, every read goes
	// to db.
	Reader *sql.DB

	// Lock is this process's exclusive hold on the database file, taken
	// with [Lock] on the file db has open. It tells the store that no other
	// process uses the file, so the store keeps pending claims in this
	// process's memory instead of writing them to the file. A first
	// delivery then commits once (its completed record) instead of twice
	// (its claim, then the record). Nothing durable is lost: a pending
	// claim's owner is a handler of this process, so the claim is worthless
	// once the process is gone, and the claims a dead process left in a file
	// are freed at start by [Store.FreePendingClaims]. What changes is that
	// another process opening the file would not see the claims, which is
	// why the lock is required. Completed records are written and read as
	// without it.
	//
	// New fails when Lock is not held, is the lock of another file, or is
	// already given to another open Store (the two would not see each
	// other's claims: use one Store per file). Leave it nil when several processes share the file. The gateway sets
	// it whenever it holds the lock. Default: nil.
	Lock *FileLock

	// CacheBytes, with Lock, is how many bytes of completed records the
	// store also keeps in memory after writing them, so that a duplicate of
	// a recent delivery is answered without reading the file. The file
	// stays the truth: a record enters the cache only once committed, and
	// leaves it when it expires or is deleted, or at random when the cache
	// is full. Only the lock makes this exact (no other process changes the
	// file), so New refuses CacheBytes without it. Records larger than 1/256
	// of CacheBytes are not kept. The gateway uses 32 MiB. Default 0: no
	// cache.
	CacheBytes int

	// noKeyFilter, with Lock, keeps the store from building the key filter
	// (filter.go): every Claim of a key not in memory then reads the file.
	// Only the tests set it (export_test.go), to run the conformance suite
	// on the held mode's parts one at a time.
	noKeyFilter bool
}

// Store is an [idemhook.Store] backed by SQLite. It is safe for concurrent
// use. Create it with [New].
type Store struct {
	file *fileStore // the database file, its statements and its writer
	// mode keeps the pending claims: file itself when several processes
	// may share the file, or a *heldStore over it that holds them in
	// memory (Config.Lock). New chooses it once; the methods of Store check
	// their arguments, encode the records and hand over to it.
	mode     claimer
	stopOnce sync.Once

	closeMu sync.Mutex
	closers []func() // run by Close after the writer stopped (the queue's statements)
}

// onClose makes Close run f once the writer has stopped.
func (s *Store) onClose(f func()) {
	s.closeMu.Lock()
	s.closers = append(s.closers, f)
	s.closeMu.Unlock()
}

// claimer is the part of a store that depends on where its pending claims
// are kept: in the file (*fileStore) or in this process's memory
// (*heldStore, see held.go). Values are records in their binary encoding.
type claimer interface {
	claim(ctx context.Context, key string, value []byte, lease time.Duration) (*idemhook.Record, error)
	// complete replaces the claim; also, when not nil, runs in the same
	// transaction once the claim is known to be held (the queue's append).
	complete(ctx context.Context, key string, old, value []byte, ttl time.Duration, also func(ctx context.Context, tx *sql.Tx) error) error
	release(ctx context.Context, key string, old []byte) error
	extend(ctx context.Context, key string, old []byte, lease time.Duration) error
	get(ctx context.Context, key string) (*idemhook.Record, error)
	delete(ctx context.Context, key string) (bool, error)
	// sweepRun is one run of the background sweeper.
	sweepRun(ctx context.Context) error
	// close stops the background work and releases the statements.
	close()
}

var (
	_ claimer = (*fileStore)(nil)
	_ claimer = (*heldStore)(nil)
)

// fileStore is the store on the database file: the records and, when it is
// the Store's mode, the pending claims are rows of idem_keys.
type fileStore struct {
	db  *sql.DB
	now func() time.Time
	log *slog.Logger

	claimStmt, getStmt, completeStmt, releaseStmt, extendStmt, deleteStmt, putStmt *sql.Stmt
	read                                                                           *sql.Stmt // get, on Config.Reader when set
	scanFirstKeys, scanKeys                                                        *sql.Stmt // the key filter's scan, on Config.Reader when set
	readDB                                                                         *sql.DB   // Config.Reader, or db
	rawRead                                                                        *rawPool  // readDB's raw statements (raw.go); nil when it can't take them
	sweepFirst, sweepNext, sweep                                                   *sql.Stmt

	w *writer // every write goes through it (see writer.go)

	sweeping  *periodic.Task
	sweptUpTo string     // the key the sweeper's last step ended at; "" from the start
	watch     *fileCheck // nil for a database without a file
	checking  *periodic.Task
}

var (
	_ idemhook.NamedStore   = (*Store)(nil)
	_ idemhook.TimeoutStore = (*Store)(nil)
)

// sweepBatch bounds the rows one sweep step reads and deletes, so that a
// large table or a large backlog of expired keys doesn't hold the
// connection or the write lock for long.
const sweepBatch = 1000

// sweepStepsPerRun bounds the steps of one run of the sweeper: 100,000 rows,
// about 35ms on a shared 2-core machine. The next run goes on from there, so
// a table of 10M keys is swept once every 100 runs rather than read whole
// every minute.
const sweepStepsPerRun = 100

const createTable = `CREATE TABLE IF NOT EXISTS idem_keys (
		key        TEXT PRIMARY KEY NOT NULL,
		value      BLOB NOT NULL,
		expires_at INTEGER NOT NULL -- Unix milliseconds; the row counts as absent from then on
	) WITHOUT ROWID`

var schema = []string{createTable}

// The statements of the first deliveries and replays, prepared for
// database/sql and as raw statements (raw.go).
const (
	// claimSQL inserts the claim, or takes over a row that has expired.
	// RETURNING yields a row only when the claim was stored (and the
	// statement changes a row only then).
	claimSQL = `INSERT INTO idem_keys (key, value, expires_at) VALUES (?1, ?2, ?3)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
			WHERE idem_keys.expires_at <= ?4
			RETURNING 1`
	getSQL      = `SELECT value FROM idem_keys WHERE key = ?1 AND expires_at > ?2`
	completeSQL = `UPDATE idem_keys SET value = ?3, expires_at = ?4
			WHERE key = ?1 AND value = ?2 AND expires_at > ?5`
	// putSQL is Complete's write when the pending claims are held in
	// memory (see held.go): the file holds no live row for the key.
	putSQL = `INSERT INTO idem_keys (key, value, expires_at) VALUES (?1, ?2, ?3)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`
)

// upgrade migrates a file written by an older version of this package (a
// version 1 file, or a file from before versions were recorded) to version
// 2. It copies the rows that haven't expired into a WITHOUT ROWID table, in
// key order, and drops the old table with its indexes. The pages the old
// table held stay in the file as free pages, which SQLite reuses for new
// rows (VACUUM returns them to the file system).
func upgrade(log *slog.Logger, now int64) func(ctx context.Context, tx *sql.Tx, from int) error {
	return func(ctx context.Context, tx *sql.Tx, from int) error {
		if from >= 2 {
			return nil
		}
		var ddl string
		err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idem_keys'`).Scan(&ddl)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // a new file: the schema creates the table
		}
		if err != nil {
			return err
		}
		if strings.Contains(strings.ToUpper(ddl), "WITHOUT ROWID") {
			return nil
		}
		if log != nil {
			log.Info("sqlitestore: migrating idem_keys to schema version 2 (WITHOUT ROWID); this copies every live record once")
		}
		start := time.Now()
		for _, q := range []string{
			`ALTER TABLE idem_keys RENAME TO idem_keys_v1`,
			createTable,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO idem_keys (key, value, expires_at)
			SELECT key, value, expires_at FROM idem_keys_v1 WHERE expires_at > ?1 ORDER BY key`, now)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DROP TABLE idem_keys_v1`); err != nil {
			return err
		}
		if log != nil {
			n, _ := res.RowsAffected()
			log.Info("sqlitestore: migrated idem_keys to schema version 2", "records", n, "took", time.Since(start).Round(time.Millisecond))
		}
		return nil
	}
}

// New returns a store keeping its records in db, creating the table
// idem_keys if it is missing, and starts the sweeper unless
// cfg.SweepInterval is negative. The caller owns db (see [Open] for the
// recommended settings) and closes it after [Store.Close].
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlitestore: New: nil *sql.DB")
	}
	s := &fileStore{db: db, now: cfg.Now, log: cfg.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	ctx := context.Background()
	if err := sqlschema.Upgrade(ctx, db, schemaComponent, SchemaVersion, schema, upgrade(s.log, s.nowMillis())); err != nil {
		return nil, err
	}
	stmts := []struct {
		p *(*sql.Stmt)
		q string
	}{
		{&s.claimStmt, claimSQL},
		{&s.getStmt, getSQL},
		{&s.read, getSQL}, // on Config.Reader
		{&s.scanFirstKeys, `SELECT key FROM idem_keys ORDER BY key LIMIT ?2`},           // on Config.Reader
		{&s.scanKeys, `SELECT key FROM idem_keys WHERE key > ?1 ORDER BY key LIMIT ?2`}, // on Config.Reader
		{&s.completeStmt, completeSQL},
		{&s.releaseStmt, `DELETE FROM idem_keys WHERE key = ?1 AND value = ?2 AND expires_at > ?3`},
		{&s.extendStmt, `UPDATE idem_keys SET expires_at = ?3
			WHERE key = ?1 AND value = ?2 AND expires_at > ?4`},
		{&s.deleteStmt, `DELETE FROM idem_keys WHERE key = ?1 RETURNING expires_at`},
		{&s.putStmt, putSQL},
		// The sweep walks the table in key order, sweepBatch rows at a
		// time. It reads the first and last key of the next rows and how
		// many of them have expired. When any has, it deletes the expired
		// rows between those two keys.
		{&s.sweepFirst, `SELECT min(key), max(key), count(*), coalesce(sum(expires_at <= ?1), 0)
			FROM (SELECT key, expires_at FROM idem_keys ORDER BY key LIMIT ?2)`},
		{&s.sweepNext, `SELECT min(key), max(key), count(*), coalesce(sum(expires_at <= ?1), 0)
			FROM (SELECT key, expires_at FROM idem_keys WHERE key > ?3 ORDER BY key LIMIT ?2)`},
		{&s.sweep, `DELETE FROM idem_keys WHERE key >= ?1 AND key <= ?2 AND expires_at <= ?3`},
	}
	read := db
	if cfg.Reader != nil {
		if err := sameFile(ctx, db, cfg.Reader); err != nil {
			return nil, err
		}
		read = cfg.Reader
	}
	s.readDB = read
	for _, st := range stmts {
		on := db
		if st.p == &s.read || st.p == &s.scanKeys || st.p == &s.scanFirstKeys {
			on = read
		}
		p, err := on.PrepareContext(ctx, st.q)
		if err != nil {
			s.closeStmts()
			return nil, fmt.Errorf("sqlitestore: prepare: %w", err)
		}
		*st.p = p
	}
	interval := cfg.SweepInterval
	if interval == 0 {
		interval = time.Minute
	}
	if cfg.FileCheckInterval >= 0 {
		fc, err := newFileCheck(ctx, db, s.log)
		if err != nil {
			s.closeStmts()
			return nil, err
		}
		s.watch = fc
	}
	if cfg.CacheBytes < 0 || cfg.CacheBytes > 0 && cfg.Lock == nil {
		s.closeStmts()
		return nil, fmt.Errorf("sqlitestore: CacheBytes is %d; want 0, or a positive size together with Lock (without the lock another process may change the file under the cache)", cfg.CacheBytes)
	}
	rawWrite := newRawPool(db)
	s.rawRead = rawWrite
	var ckpt *checkpointer
	if read != db {
		s.rawRead = newRawPool(read)
		// Checkpoints off the writer's connection (checkpoint.go).
		c, err := startCheckpointer(ctx, db, read, s.log)
		if err != nil {
			s.closeStmts()
			return nil, err
		}
		ckpt = c
	}
	// The one choice of the mode.
	var mode claimer = s
	if cfg.Lock == nil {
		s.w = startWriter(db, rawWrite, ckpt, nil, cfg.Logger)
	} else {
		// The last check that can fail: it takes the lock's one Store.
		if err := cfg.Lock.covers(ctx, db); err != nil {
			if ckpt != nil {
				ckpt.close()
			}
			s.closeStmts()
			return nil, err
		}
		h := newHeldStore(s, cfg.CacheBytes, cfg.Lock)
		s.w = startWriter(db, rawWrite, ckpt, h.writeHealth, cfg.Logger)
		if !cfg.noKeyFilter {
			h.startFilter()
		}
		mode = h
	}
	s.sweeping = periodic.Start(interval, mode.sweepRun, s.log, "sqlitestore: sweeping expired keys failed")
	every := cfg.FileCheckInterval
	switch {
	case s.watch == nil:
		every = -1
	case every == 0:
		every = DefaultFileCheckInterval
	}
	s.checking = periodic.Start(every, s.watch.check, s.log, "")
	return &Store{file: s, mode: mode}, nil
}

// Name is how the middleware's WARN messages name this store
// ("WebhookIdempotencyGuard SQLite error for key=...").
func (s *Store) Name() string { return "SQLite" }

// StoreTimeout is the bound the middleware gives this store's calls when
// its Options.StoreTimeout is not set: [BusyTimeout], past which SQLite
// gives up on a lock by itself. A call waits for the writer's group commit
// and the file's lock; on a loaded machine a commit takes longer than the
// middleware's 250ms for networked stores, and a call that gives up there
// fails its delivery open for a store that was about to answer.
func (s *Store) StoreTimeout() time.Duration { return BusyTimeout }

// Close stops the sweeper and releases the prepared statements. It does not
// close the *sql.DB, which belongs to the caller. The store must not be used
// after Close. Close is safe to call more than once.
func (s *Store) Close() error {
	s.stopOnce.Do(func() {
		s.mode.close()
		s.closeMu.Lock()
		defer s.closeMu.Unlock()
		for _, f := range s.closers {
			f()
		}
	})
	return nil
}

// close stops the sweeper, the file check and the writer, and releases the
// prepared statements.
func (s *fileStore) close() {
	s.sweeping.Stop()
	s.checking.Stop()
	s.w.close()
	if s.w.ckpt != nil {
		s.w.ckpt.close()
	}
	s.closeStmts()
	if s.rawRead != s.w.raw {
		s.rawRead.close()
	}
	s.w.raw.close()
}

func (s *fileStore) closeStmts() {
	for _, st := range []*sql.Stmt{s.claimStmt, s.getStmt, s.read, s.scanFirstKeys, s.scanKeys, s.completeStmt, s.releaseStmt, s.extendStmt, s.deleteStmt, s.putStmt, s.sweepFirst, s.sweepNext, s.sweep} {
		if st != nil {
			st.Close()
		}
	}
}

// Sweep deletes the rows that have expired and returns how many it deleted.
// The table has no expiry index (each key is stored once), so Sweep reads
// every row, in key order and in batches of sweepBatch rows. It takes the
// write lock only for a batch holding expired rows, and releases the
// connection between batches.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	n, _, err := s.file.sweepFrom(ctx, "", -1)
	return n, err
}

// sweepRun is one run of the sweeper: sweepStepsPerRun steps from where the
// last run ended.
func (s *fileStore) sweepRun(ctx context.Context) error {
	// Only the sweeper's goroutine reads and writes sweptUpTo.
	_, next, err := s.sweepFrom(ctx, s.sweptUpTo, sweepStepsPerRun)
	if err == nil {
		s.sweptUpTo = next
	}
	return err
}

// sweepFrom sweeps the rows after the key after ("" for the start of the
// table), in at most steps steps of sweepBatch rows (no bound when steps is
// negative). It returns the rows deleted and the key to go on from, which is
// "" once it reached the end of the table.
func (s *fileStore) sweepFrom(ctx context.Context, after string, steps int) (int64, string, error) {
	now := s.now().UnixMilli()
	var total int64
	for step, first := 0, after == ""; ; step, first = step+1, false {
		if steps >= 0 && step == steps {
			return total, after, nil
		}
		if err := ctx.Err(); err != nil {
			return total, after, fmt.Errorf("sqlitestore: sweep: %w", err)
		}
		var lo, hi sql.NullString
		var rows, expired int64
		var err error
		if first {
			err = s.sweepFirst.QueryRowContext(ctx, now, sweepBatch).Scan(&lo, &hi, &rows, &expired)
		} else {
			err = s.sweepNext.QueryRowContext(ctx, now, sweepBatch, after).Scan(&lo, &hi, &rows, &expired)
		}
		if err != nil {
			return total, after, fmt.Errorf("sqlitestore: sweep: %w", err)
		}
		if expired > 0 {
			n, err := s.exec(ctx, "sweep", s.sweep, func() []any { return []any{lo.String, hi.String, now} })
			total += n
			if err != nil {
				return total, after, fmt.Errorf("sqlitestore: sweep: %w", err)
			}
		}
		if rows < sweepBatch {
			return total, "", nil
		}
		after = hi.String
	}
}

// Expiry is kept at millisecond precision, like Redis's PX. Both the expiry
// and the current time are truncated to the millisecond. A row has expired
// when expires_at <= now. At the exact end of a lifetime the row is gone.
// Within the last millisecond it may already be.

// nowMillis is the current time in Unix milliseconds.
func (s *fileStore) nowMillis() int64 { return s.now().UnixMilli() }

// expiry returns the end of a lifetime d starting now, in Unix milliseconds.
func (s *fileStore) expiry(d time.Duration) int64 { return s.now().Add(d).UnixMilli() }

func encode(op string, r *idemhook.Record) ([]byte, error) {
	return recordio.Encode("sqlitestore", op, r)
}

func decode(key string, value []byte) (*idemhook.Record, error) {
	return recordio.Decode("sqlitestore", key, value)
}

// sameFile reports nil when reader's main database is db's file.
func sameFile(ctx context.Context, db, reader *sql.DB) error {
	path, err := mainFile(ctx, reader)
	if err != nil {
		return err
	}
	if path == "" {
		return errors.New("sqlitestore: Config.Reader: want a pool on the database's file (OpenReader), and the reader has none")
	}
	return dbIsFile(ctx, db, path, "Config.Reader")
}

// dbIsFile reports nil when db's main database is the file at path, and
// otherwise an error naming field, the setting that gave path.
func dbIsFile(ctx context.Context, db *sql.DB, path, field string) error {
	main, err := mainFile(ctx, db)
	if err != nil {
		return err
	}
	if main == "" {
		return fmt.Errorf("sqlitestore: %s is on %s, but the database has no file (in memory or temporary)", field, path)
	}
	want, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("sqlitestore: %s: %w", field, err)
	}
	got, err := os.Stat(main)
	if err != nil {
		return fmt.Errorf("sqlitestore: %s: %w", field, err)
	}
	if !os.SameFile(want, got) {
		return fmt.Errorf("sqlitestore: %s is on %s, but the database is %s", field, path, main)
	}
	return nil
}

func checkLifetime(op string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("sqlitestore: %s: lifetime must be positive, got %v", op, d)
	}
	return nil
}

// Claim stores claim under key for lease unless key holds a record that
// hasn't expired, which it returns instead. The insert is one statement, so
// exactly one of many concurrent claims of an absent key succeeds, in this
// process or any other sharing the file.
func (s *Store) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	if err := s.file.watch.failure(); err != nil {
		return nil, err
	}
	if err := checkLifetime("claim", lease); err != nil {
		return nil, err
	}
	value, err := encode("claim", claim)
	if err != nil {
		return nil, err
	}
	return s.mode.claim(ctx, key, value, lease)
}

// claim is Claim with the claims in the file.
func (s *fileStore) claim(ctx context.Context, key string, value []byte, lease time.Duration) (*idemhook.Record, error) {
	for {
		// Read first: a duplicate, the common case under retries, then
		// costs one read and takes no write lock.
		if rec, found, err := s.readLive(ctx, "claim", key); err != nil || found {
			return rec, err
		}
		// The key is absent or expired. Insert the claim, or take over the
		// expired row. If another claim got in between, read what it
		// stored, in the same transaction.
		c := &claimWrite{s: s, key: key, value: value, lease: lease}
		n, err := s.w.doRaw(ctx, "claim", c.run, c, nil)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: claim %q: %w", key, err)
		}
		if n == 1 {
			return nil, nil
		}
		if c.existing != nil {
			return decode(key, c.existing)
		}
	}
}

// claimWrite is the write of a Claim in the file: the insert of the claim
// and, when a live record is in the way, its read.
type claimWrite struct {
	s        *fileStore
	key      string
	value    []byte
	lease    time.Duration
	existing []byte // the record in the way
}

// run returns 1 when it stored the claim, 0 when it read a record in the
// way (existing) or found the key expired in between (existing nil).
func (c *claimWrite) run(ctx context.Context, tx *sql.Tx) (int64, error) {
	s := c.s
	c.existing = nil
	var one int
	err := tx.StmtContext(ctx, s.claimStmt).QueryRowContext(ctx, c.key, c.value, s.expiry(c.lease), s.nowMillis()).Scan(&one)
	if err == nil {
		return 1, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	err = tx.StmtContext(ctx, s.getStmt).QueryRowContext(ctx, c.key, s.nowMillis()).Scan(&c.existing)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // expired in between: try again
	}
	return 0, err
}

// runRaw is run on the raw connection. The insert changes a row exactly
// when its RETURNING yields one.
func (c *claimWrite) runRaw(rc *rawConn) (int64, error) {
	s := c.s
	c.existing = nil
	n, err := rc.exec(rawClaim, c.key, c.value, s.expiry(c.lease), s.nowMillis())
	if err != nil || n == 1 {
		return n, err
	}
	c.existing, _, err = rc.blob(rawGet, c.key, s.nowMillis())
	return 0, err
}

// exec runs stmt with args through the writer and returns the rows it
// affected. The arguments computed from the clock are computed by args, at
// the time the statement runs.
func (s *fileStore) exec(ctx context.Context, name string, stmt *sql.Stmt, args func() []any) (int64, error) {
	return s.w.do(ctx, name, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		res, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args()...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// Complete replaces the pending claim under key with done, kept for ttl.
// It returns [idemhook.ErrNotOwner] unless key still holds exactly claim
// and it hasn't expired.
func (s *Store) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	if err := s.file.watch.failure(); err != nil {
		return err
	}
	if err := checkLifetime("complete", ttl); err != nil {
		return err
	}
	old, err := encode("complete", claim)
	if err != nil {
		return err
	}
	value, err := encode("complete", done)
	if err != nil {
		return err
	}
	return s.mode.complete(ctx, key, old, value, ttl, nil)
}

// complete is Complete with the claims in the file.
func (s *fileStore) complete(ctx context.Context, key string, old, value []byte, ttl time.Duration, also func(ctx context.Context, tx *sql.Tx) error) error {
	c := &completeWrite{s: s, key: key, old: old, value: value, ttl: ttl, also: also}
	var raw rawWrite
	if also == nil { // also runs in a database/sql transaction
		raw = c
	}
	n, err := s.w.doRaw(ctx, "complete", c.run, raw, nil)
	return casResult("complete", key, n, err)
}

// completeWrite is the write of a Complete in the file.
type completeWrite struct {
	s          *fileStore
	key        string
	old, value []byte
	ttl        time.Duration
	also       func(ctx context.Context, tx *sql.Tx) error
}

func (c *completeWrite) run(ctx context.Context, tx *sql.Tx) (int64, error) {
	s := c.s
	res, err := tx.StmtContext(ctx, s.completeStmt).ExecContext(ctx, c.key, c.old, c.value, s.expiry(c.ttl), s.nowMillis())
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 || c.also == nil {
		return n, err
	}
	return n, c.also(ctx, tx)
}

// runRaw is run on the raw connection, for a Complete without also.
func (c *completeWrite) runRaw(rc *rawConn) (int64, error) {
	s := c.s
	return rc.exec(rawComplete, c.key, c.old, c.value, s.expiry(c.ttl), s.nowMillis())
}

// Release deletes the pending claim under key. It returns
// [idemhook.ErrNotOwner] unless key still holds exactly claim and it hasn't
// expired.
func (s *Store) Release(ctx context.Context, key string, claim *idemhook.Record) error {
	if err := s.file.watch.failure(); err != nil {
		return err
	}
	old, err := encode("release", claim)
	if err != nil {
		return err
	}
	return s.mode.release(ctx, key, old)
}

// release is Release with the claims in the file.
func (s *fileStore) release(ctx context.Context, key string, old []byte) error {
	n, err := s.exec(ctx, "release", s.releaseStmt, func() []any { return []any{key, old, s.nowMillis()} })
	return casResult("release", key, n, err)
}

// Extend renews the lease of the pending claim under key to lease from now.
// It returns [idemhook.ErrNotOwner] unless key still holds exactly claim and
// it hasn't expired.
func (s *Store) Extend(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) error {
	if err := s.file.watch.failure(); err != nil {
		return err
	}
	if err := checkLifetime("extend", lease); err != nil {
		return err
	}
	old, err := encode("extend", claim)
	if err != nil {
		return err
	}
	return s.mode.extend(ctx, key, old, lease)
}

// extend is Extend with the claims in the file.
func (s *fileStore) extend(ctx context.Context, key string, old []byte, lease time.Duration) error {
	n, err := s.exec(ctx, "extend", s.extendStmt, func() []any { return []any{key, old, s.expiry(lease), s.nowMillis()} })
	return casResult("extend", key, n, err)
}

func casResult(op, key string, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("sqlitestore: %s %q: %w", op, key, err)
	}
	if n == 0 {
		return idemhook.ErrNotOwner
	}
	return nil
}

// Get returns the record under key, or nil when there is none or it has
// expired.
func (s *Store) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	if err := s.file.watch.failure(); err != nil {
		return nil, err
	}
	return s.mode.get(ctx, key)
}

// get is Get with the claims in the file: a read of the file.
func (s *fileStore) get(ctx context.Context, key string) (*idemhook.Record, error) {
	rec, _, err := s.readLive(ctx, "get", key)
	return rec, err
}

// readLive reads the live record under key from the file, through the
// read pool; found is false when the file holds none (or only an expired
// one). op names the call in the error.
func (s *fileStore) readLive(ctx context.Context, op, key string) (rec *idemhook.Record, found bool, err error) {
	value, found, err := s.readValue(ctx, key)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("sqlitestore: %s %q: %w", op, key, err)
	case !found:
		return nil, false, nil
	}
	rec, err = decode(key, value)
	return rec, true, err
}

// Delete removes key whatever it holds and reports whether it held a record
// that hadn't expired.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := s.file.watch.failure(); err != nil {
		return false, err
	}
	return s.mode.delete(ctx, key)
}

// delete is Delete with the claims in the file.
func (s *fileStore) delete(ctx context.Context, key string) (bool, error) {
	var expiresAt int64
	n, err := s.w.do(ctx, "delete", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		return s.deleteRow(ctx, tx, key, &expiresAt)
	})
	if err != nil {
		return false, fmt.Errorf("sqlitestore: delete %q: %w", key, err)
	}
	return n == 1 && expiresAt > s.nowMillis(), nil
}

// deleteRow deletes the row of key in tx, and returns 1 and sets expiresAt
// to the row's expiry when there was one.
func (s *fileStore) deleteRow(ctx context.Context, tx *sql.Tx, key string, expiresAt *int64) (int64, error) {
	err := tx.StmtContext(ctx, s.deleteStmt).QueryRowContext(ctx, key).Scan(expiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return 1, nil
}
