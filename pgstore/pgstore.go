// Package pgstore is an [idemhook.Store] kept in a PostgreSQL table, through
// pgx ([pgxpool.Pool]). It lets several instances of a service (or several
// gateways) share their idempotency records without Redis. It is also the
// store that can commit a delivery's record in the same transaction as the
// handler's own writes. See [Store.CompleteTx] and [Store.CompleteSQLTx].
//
// # Statements
//
// Every step is one SQL statement, so one round trip:
//
//   - Claim is one INSERT ... ON CONFLICT ... RETURNING, in a statement that
//     first reads the key. It stores the claim when the key is absent,
//     takes over a row whose lifetime has ended, and returns the live
//     record otherwise. A duplicate of a stored response is a plain read
//     and writes nothing. The same statement gives the claim its fence
//     ([Store.ClaimFenced]), the database's clock.
//   - Complete, Release and Extend are one UPDATE or DELETE each, a
//     compare-and-set on the claim. They act only while the row still holds
//     exactly the encoded pending record. Its owner token is unique to the
//     claim, which makes byte equality ownership.
//   - Get is one SELECT, Delete one DELETE.
//   - The store is an [idemhook.BatchStore]: ClaimBatch, CompleteBatch,
//     ReleaseBatch and ExtendBatch send the statement of the single call
//     once per op, with the same arguments, as one pgx.Batch: one round
//     trip and one commit for a batched delivery of 1,000 items or more
//     (one more round trip the first time a connection prepares the
//     statement). The statements run in key order, so that concurrent
//     batches never deadlock; two ops on one key act as two calls in the
//     batch's order. See batchstore.go, which also says why a batch of the
//     single statements and not one statement over arrays.
//
// Expiry is decided by the database's clock (statement_timestamp()), never by
// the Go process's. So gateways whose clocks disagree still agree on when a
// lease or a record ends. A row whose lifetime has ended counts as absent. A
// background sweeper deletes such rows in batches of [Config.SweepBatch].
// It skips rows other sweepers hold, so that several instances may sweep at
// once.
//
// # Schema
//
// [New] creates the table (default idemhook_keys) and its index if they are
// missing. It does so under an advisory lock, so that instances starting
// together don't race. A team that manages migrations itself sets
// [Config.SkipCreate] and creates them beforehand with this SQL.
//
//	CREATE TABLE idemhook_keys (
//		key        bytea       PRIMARY KEY,  -- the middleware's store key ("idem:<source>:<key>")
//		value      bytea       NOT NULL,     -- the record, idemhook.Record's binary encoding
//		expires_at timestamptz NOT NULL      -- the row counts as absent from then on
//	);
//	CREATE INDEX idemhook_keys_expires_at_idx ON idemhook_keys (expires_at);
//
// The key is bytea rather than text because a store key may hold any byte
// (PostgreSQL's text can't hold NUL). To read keys in psql:
// SELECT convert_from(key, 'UTF8'), expires_at FROM idemhook_keys.
//
// The role the store connects as needs SELECT, INSERT, UPDATE and DELETE on
// the table (and CREATE on its schema unless SkipCreate is set).
//
// # Cost
//
// BenchmarkStore measured these costs on a shared 2-core machine with
// PostgreSQL on loopback. A first delivery (two commits, each waiting for
// the WAL flush) takes about 470µs. A replay (one read-only statement) takes
// about 60µs. Size the pool (pool_max_conns) for the deliveries in flight,
// because a store call waiting for a connection waits inside the
// middleware's StoreTimeout. With [Config.Batch] the claims and completes of
// concurrent deliveries share a commit. With 32 concurrent deliveries that
// took 284µs instead of 1100µs per delivery, measured on a busy machine. docs/stores.md compares the stores.
package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/periodic"
	"github.com/idemhook/idemhook/internal/pgschema"
	"github.com/idemhook/idemhook/internal/recordio"
	"github.com/idemhook/idemhook/internal/sqlbatch"
	"github.com/idemhook/idemhook/internal/storeconf"
)

// DefaultTable is the table a [Store] keeps its records in by default.
const DefaultTable = storeconf.PostgresTable

// DefaultSweepBatch is the default of [Config.SweepBatch].
const DefaultSweepBatch = 1000

// Config configures a [Store]. The zero value means the defaults.
type Config struct {
	// Table is the table name, optionally schema-qualified
	// ("webhooks.idemhook_keys"). It holds letters, digits and underscores
	// and starts with a letter or an underscore. Each part is at most 63
	// characters. Default: DefaultTable.
	Table string

	// SkipCreate leaves the creation of the table to the caller's own
	// migrations (see the package documentation for the SQL). New then
	// only checks that the table exists and has the expected columns.
	SkipCreate bool

	// SweepInterval is how often expired rows are deleted. They already
	// count as absent. Sweeping only reclaims their space. A negative value
	// disables the sweeper ([Store.Sweep] still works). Default: 1 minute.
	SweepInterval time.Duration

	// SweepBatch bounds the rows one sweep statement deletes, so that a
	// large backlog of expired keys never holds many row locks at once.
	// Default: DefaultSweepBatch.
	SweepBatch int

	// Logger receives a WARN when a background sweep fails. Default: none.
	Logger *slog.Logger

	// Batch commits the Claim and Complete statements of concurrent calls
	// together. Whatever waits when a batch has gone out is sent as the
	// next one, in one round trip and one transaction. So concurrent first
	// deliveries share a commit and its flush to disk (see batch.go). A
	// lone call is sent at once. The statements and what they do are the
	// same. A caller gets its result after the commit, so durability is
	// unchanged. It costs a few goroutines and [Store.Close]. A statement
	// that waits for a row lock (a claim taking over a lapsed lease held by
	// a CompleteTx transaction) delays the others of its batch. Default
	// false. The gateway turns it on.
	Batch bool
}

// Store is an [idemhook.Store] in PostgreSQL. It is safe for concurrent use.
// Create it with [New].
type Store struct {
	pool  *pgxpool.Pool
	table string // as configured, for messages
	ident string // quoted for SQL
	batch int
	log   *slog.Logger

	skipCreate bool // Config.SkipCreate, which Store.Queue honours too

	claimSQL, getSQL, completeSQL, releaseSQL, extendSQL, deleteSQL, sweepSQL string

	batcher *batcher // nil unless Config.Batch

	sweeping *periodic.Task
	stopOnce sync.Once
}

var (
	_ idemhook.NamedStore   = (*Store)(nil)
	_ idemhook.FencingStore = (*Store)(nil)
)

// ValidateTable reports whether name is accepted as [Config.Table].
func ValidateTable(name string) error { return pgschema.Check(name) }

// New returns a store keeping its records in the table cfg.Table through
// pool, creating the table if it is missing (unless cfg.SkipCreate), and
// starts the sweeper unless cfg.SweepInterval is negative. The caller owns
// pool and closes it after [Store.Close].
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: New: nil *pgxpool.Pool: pass one from pgxpool.New(ctx, \"postgres://...\")")
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	id, err := pgschema.Table(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: New: %w", err)
	}
	if cfg.SweepBatch < 0 {
		return nil, fmt.Errorf("pgstore: New: SweepBatch %d is negative", cfg.SweepBatch)
	}
	if cfg.SweepBatch == 0 {
		cfg.SweepBatch = DefaultSweepBatch
	}
	s := &Store{pool: pool, table: cfg.Table, ident: id.Sanitize(), batch: cfg.SweepBatch, log: cfg.Logger, skipCreate: cfg.SkipCreate}
	s.prepareSQL()
	if cfg.SkipCreate {
		if err := s.checkTable(ctx); err != nil {
			return nil, err
		}
	} else if err := pgschema.Create(ctx, pool, "pgstore", id, ddl(id)); err != nil {
		return nil, err
	}
	if cfg.Batch {
		s.batcher = startBatcher(pool)
	}
	interval := cfg.SweepInterval
	if interval == 0 {
		interval = time.Minute
	}
	s.sweeping = periodic.Start(interval, func(ctx context.Context) error {
		_, err := s.Sweep(ctx)
		return err
	}, s.log, "pgstore: sweeping expired keys failed")
	return s, nil
}

// The statements. statement_timestamp() is the database's time at the start
// of the statement. It is one instant for the whole statement, so the two
// reads of the clock in Claim agree. Unlike now(), it is fresh for each
// statement of a long transaction (CompleteTx). Lifetimes are passed in
// microseconds.
func (s *Store) prepareSQL() {
	t := s.ident
	// cur reads the live row, if any, in the statement's snapshot. A
	// duplicate stops there: the INSERT's SELECT yields no row, and nothing
	// is written. Otherwise the INSERT stores the claim. It may conflict
	// with a row the snapshot didn't show as live (expired, or inserted by a
	// concurrent claim since). Then DO UPDATE locks that row's latest
	// version and takes it over only if it has expired. Otherwise it keeps
	// the row as it is. RETURNING gives that latest value either way. So the
	// statement always yields exactly one value. It is the claim itself when
	// it was stored, and the record in the way otherwise.
	//
	// Its second column is the claim's fence, read by ClaimFenced when the
	// value is the claim: statement_timestamp() in microseconds, the
	// instant the statement judges expiry by. A claim takes a row over only
	// once expires_at <= statement_timestamp(), and expires_at was set a
	// lease (at least 1ms) after the previous claim's own
	// statement_timestamp() or later (Extend), so a take-over's fence is
	// larger than the lapsed claim's on any clock that didn't step back by
	// more than the lease while that claim ran.
	s.claimSQL = `WITH cur AS (
		SELECT value FROM ` + t + ` WHERE key = $1::bytea AND expires_at > statement_timestamp()
	), ins AS (
		INSERT INTO ` + t + ` AS k (key, value, expires_at)
		SELECT $1::bytea, $2::bytea, statement_timestamp() + $3::bigint * interval '1 microsecond'
		WHERE NOT EXISTS (SELECT 1 FROM cur)
		ON CONFLICT (key) DO UPDATE SET
			value = CASE WHEN k.expires_at <= statement_timestamp() THEN excluded.value ELSE k.value END,
			expires_at = CASE WHEN k.expires_at <= statement_timestamp() THEN excluded.expires_at ELSE k.expires_at END
		RETURNING k.value
	)
	SELECT value, 0::bigint FROM cur
	UNION ALL SELECT value, (extract(epoch FROM statement_timestamp()) * 1000000)::bigint FROM ins`
	s.getSQL = `SELECT value FROM ` + t + ` WHERE key = $1::bytea AND expires_at > statement_timestamp()`
	s.completeSQL = `UPDATE ` + t + ` SET value = $3::bytea, expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
		WHERE key = $1::bytea AND value = $2::bytea AND expires_at > statement_timestamp()`
	s.releaseSQL = `DELETE FROM ` + t + ` WHERE key = $1::bytea AND value = $2::bytea AND expires_at > statement_timestamp()`
	s.extendSQL = `UPDATE ` + t + ` SET expires_at = statement_timestamp() + $3::bigint * interval '1 microsecond'
		WHERE key = $1::bytea AND value = $2::bytea AND expires_at > statement_timestamp()`
	s.deleteSQL = `DELETE FROM ` + t + ` WHERE key = $1::bytea RETURNING expires_at > statement_timestamp()`
	s.sweepSQL = `DELETE FROM ` + t + ` WHERE key IN (
		SELECT key FROM ` + t + ` WHERE expires_at <= statement_timestamp()
		LIMIT $1 FOR UPDATE SKIP LOCKED
	) AND expires_at <= statement_timestamp()`
}

// Schema returns the SQL that creates table (default DefaultTable) and its
// index. It is what New runs unless Config.SkipCreate is set, for a team to
// put in its own migrations.
func Schema(table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	id, err := pgschema.Table(table)
	if err != nil {
		return "", fmt.Errorf("pgstore: Schema: %w", err)
	}
	return strings.Join(ddl(id), ";\n") + ";\n", nil
}

// ddl is the SQL that creates the table id and its index.
func ddl(id pgx.Identifier) []string {
	index := pgschema.IndexName(id[len(id)-1], "expires_at")
	t := id.Sanitize()
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
	key        bytea       PRIMARY KEY,
	value      bytea       NOT NULL,
	expires_at timestamptz NOT NULL
)`,
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{index}.Sanitize() + ` ON ` + t + ` (expires_at)`,
	}
}

// checkTable checks that the table exists with the columns the statements
// use, so that a missing migration fails at start rather than at the first
// delivery.
func (s *Store) checkTable(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `SELECT key, value, expires_at FROM `+s.ident+` WHERE false`)
	if err != nil {
		return fmt.Errorf("pgstore: table %s (SkipCreate is set, so it must exist; see the package documentation for its schema): %w", s.table, err)
	}
	return nil
}

// Name is how the middleware's WARN messages name this store.
func (s *Store) Name() string { return "PostgreSQL" }

// Table returns the table the store keeps its records in, as configured.
func (s *Store) Table() string { return s.table }

// Close stops the sweeper and the goroutines of [Config.Batch]. It does not
// close the pool, which belongs to the caller. Close is safe to call more
// than once.
func (s *Store) Close() error {
	s.stopOnce.Do(func() {
		s.sweeping.Stop()
		if s.batcher != nil {
			s.batcher.close()
		}
	})
	return nil
}

// Ping checks that the database answers and the table is readable: the
// gateway's /readyz.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `SELECT 1 FROM `+s.ident+` WHERE false`); err != nil {
		return fmt.Errorf("pgstore: ping %s: %w", s.table, err)
	}
	return nil
}

// Sweep deletes the rows whose lifetime has ended and returns how many it
// deleted. It works in batches of Config.SweepBatch rows, each its own
// statement, skipping rows that another sweeper or a delivery holds locked.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	n, err := sqlbatch.DeleteCount(ctx, s.batch, func(ctx context.Context, limit int) (int64, error) {
		tag, err := s.pool.Exec(ctx, s.sweepSQL, limit)
		return tag.RowsAffected(), err
	})
	if err != nil {
		return n, fmt.Errorf("pgstore: sweep: %w", err)
	}
	return n, nil
}

// micros converts a lifetime to whole microseconds, rounding up so that a
// positive duration never becomes 0.
func micros(op string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("pgstore: %s: lifetime must be positive, got %v", op, d)
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond), nil
}

func encode(op string, r *idemhook.Record) ([]byte, error) { return recordio.Encode("pgstore", op, r) }

func decode(key string, value []byte) (*idemhook.Record, error) {
	return recordio.Decode("pgstore", key, value)
}

func opError(op, key string, err error) error {
	return fmt.Errorf("pgstore: %s %q: %w", op, key, err)
}

// Claim stores claim under key for lease unless key holds a live record,
// which it returns instead. It does so in one statement. Exactly one of many
// concurrent claims of an absent (or expired) key succeeds, in this process
// or any other sharing the table.
func (s *Store) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	existing, _, err := s.ClaimFenced(ctx, key, claim, lease)
	return existing, err
}

// ClaimFenced is [Store.Claim], the same statement, and when the claim was
// stored it also returns its fence ([idemhook.FencingStore]): the
// database's clock at the statement (statement_timestamp()) in Unix
// microseconds, the clock expiry is judged by. Every instance sharing the
// table reads that one clock, so the fences of a key's claims increase
// whichever instance made them. A claim that takes over a lapsed lease
// gets a larger fence than the lapsed claim's even when the database's
// clock stepped back, unless it stepped back by more than the lease while
// that claim ran: it takes the row over only once the clock has passed the
// lease's end. A claim of a key with no row (new, released, deleted or
// swept) reads the clock as it is: after the clock stepped back, its fence
// may be smaller than that of a claim made before the step. It is 0 when
// key holds a live record.
func (s *Store) ClaimFenced(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, uint64, error) {
	us, err := micros("claim", lease)
	if err != nil {
		return nil, 0, err
	}
	value, err := encode("claim", claim)
	if err != nil {
		return nil, 0, err
	}
	var (
		got   []byte
		fence int64
	)
	if s.batcher != nil {
		o := &op{ctx: ctx, key: []byte(key), sql: s.claimSQL, query: true, fenced: true}
		o.args = []any{o.key, value, us}
		s.batcher.do(o)
		got, fence, err = o.value, o.fence, o.err
	} else {
		err = s.pool.QueryRow(ctx, s.claimSQL, []byte(key), value, us).Scan(&got, &fence)
	}
	if err != nil {
		return nil, 0, opError("claim", key, err)
	}
	if bytes.Equal(got, value) {
		return nil, uint64(max(fence, 1)), nil // the claim itself: stored
	}
	existing, err := decode(key, got)
	return existing, 0, err
}

// Complete replaces the pending claim under key with done, kept for ttl. It
// returns [idemhook.ErrNotOwner] unless key still holds exactly claim and it
// hasn't expired.
func (s *Store) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	if s.batcher != nil {
		return s.complete(ctx, batchExec{s.batcher}, key, claim, done, ttl)
	}
	return s.complete(ctx, poolExec{s.pool}, key, claim, done, ttl)
}

func (s *Store) complete(ctx context.Context, db execer, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	us, err := micros("complete", ttl)
	if err != nil {
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
	n, err := db.exec(ctx, s.completeSQL, []byte(key), old, value, us)
	return casResult("complete", key, n, err)
}

// Release deletes the pending claim under key. It returns
// [idemhook.ErrNotOwner] unless key still holds exactly claim and it hasn't
// expired.
func (s *Store) Release(ctx context.Context, key string, claim *idemhook.Record) error {
	old, err := encode("release", claim)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.releaseSQL, []byte(key), old)
	return casResult("release", key, tag.RowsAffected(), err)
}

// Extend renews the lease of the pending claim under key to lease from now
// (the database's now). It returns [idemhook.ErrNotOwner] unless key still
// holds exactly claim and it hasn't expired.
func (s *Store) Extend(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) error {
	us, err := micros("extend", lease)
	if err != nil {
		return err
	}
	old, err := encode("extend", claim)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.extendSQL, []byte(key), old, us)
	return casResult("extend", key, tag.RowsAffected(), err)
}

func casResult(op, key string, n int64, err error) error {
	if err != nil {
		return opError(op, key, err)
	}
	if n == 0 {
		return idemhook.ErrNotOwner
	}
	return nil
}

// Get returns the record under key, or nil when there is none or it has
// expired.
func (s *Store) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	var value []byte
	err := s.pool.QueryRow(ctx, s.getSQL, []byte(key)).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, opError("get", key, err)
	}
	return decode(key, value)
}

// Delete removes key whatever it holds and reports whether it held a record
// that hadn't expired.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	var live bool
	err := s.pool.QueryRow(ctx, s.deleteSQL, []byte(key)).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, opError("delete", key, err)
	}
	return live, nil
}

// execer runs one statement and reports the rows it affected: the pool, a
// pgx.Tx or a *sql.Tx.
type execer interface {
	exec(ctx context.Context, sql string, args ...any) (int64, error)
}

type poolExec struct{ p *pgxpool.Pool }

// batchExec runs the statement in one of the batcher's batches. Its first
// argument is the key.
type batchExec struct{ b *batcher }

func (e batchExec) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	o := &op{ctx: ctx, key: args[0].([]byte), sql: sql, args: args}
	e.b.do(o)
	return o.n, o.err
}

func (e poolExec) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := e.p.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}
