package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook/internal/periodic"
)

// Checkpoints. In WAL mode a commit appends the pages it changed to the
// log; a checkpoint copies them into the database file and syncs both, so
// that the log can start over. SQLite runs it on the connection
// whose commit took the log past 1,000 pages, inside that commit. For this
// store that is the writer's connection: every delivery waiting for the
// group commit waited for the copy and its two fsyncs as well. The keys are
// hashes, so each write lands on a page of its own and the log takes about
// a page per write: under load, a checkpoint every thousand deliveries.
//
// So a store with a read pool (Config.Reader) checkpoints from a goroutine
// of its own, on a connection of that pool, while the writer goes on
// committing: the writer tells it after every checkpointWrites writes, and
// it runs a PASSIVE checkpoint, which takes no lock a writer or a reader
// waits for. The writer's own connection keeps SQLite's automatic
// checkpoint as a bound, at walBackstop pages instead of 1,000: the log
// starts over only after a checkpoint that copied all of it, and with
// commits arriving while the background one runs, that is the writer's own
// checkpoint, which then has little left to copy. The log so stays near
// walBackstop pages (40 MiB with SQLite's 4 KiB pages; a little more when
// commits land while that last copy runs) and is reused from its start
// after that, whatever the load. The writer counts writes, not pages: a
// batched write (CompleteBatch, a sweep's deletes) counts once for many
// pages, and the bound is what holds the log then.
//
// With the writer no longer waiting for the copies, a first delivery
// takes about a third less of its time (BenchmarkStoreCPU/locked/first,
// 32 goroutines) for the same CPU; docs/benchmarks.md has the figures, and
// benchmarks-history.md why an earlier background checkpointer, without
// the bound, was not kept.
const (
	checkpointWrites = 1000
	walBackstop      = 10000
	// sqliteAutoCheckpoint is SQLite's default, which Close restores on
	// the writer's connection for whatever else uses it (an audit sink).
	sqliteAutoCheckpoint = 1000
	// warnEvery bounds the WARNs of failing checkpoints (a full disk
	// fails one every checkpointWrites writes).
	warnEvery = time.Minute
)

// checkpointer runs the background checkpoints of one store.
type checkpointer struct {
	writer *sql.DB // the writer's pool, whose automatic checkpoint it set
	task   *periodic.Task
	since  int // writes since the last kick; the writer's goroutine only
	// held, set by a test, makes the background checkpoints do nothing,
	// so that the writer's own checkpoint alone bounds the log.
	held atomic.Bool
}

// startCheckpointer sets the writer's connection (db, a pool of one, as
// Open makes it; in a larger pool, the connection the PRAGMA ran on, the
// others keeping SQLite's default) to checkpoint only past walBackstop
// pages, and starts the checkpoints on read.
func startCheckpointer(ctx context.Context, db, read *sql.DB, log *slog.Logger) (*checkpointer, error) {
	if err := setAutoCheckpoint(ctx, db, walBackstop); err != nil {
		return nil, err
	}
	c := &checkpointer{writer: db}
	// A checkpoint that finds another connection's running (the writer's,
	// past walBackstop) leaves the log to it and succeeds.
	c.task = periodic.OnDemand(func(ctx context.Context) error {
		if c.held.Load() {
			return nil
		}
		_, err := read.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
		return err
	}, log, fmt.Sprintf("sqlitestore: background checkpoint failed; the writer checkpoints once the log holds %d pages", walBackstop), warnEvery)
	return c, nil
}

func setAutoCheckpoint(ctx context.Context, db *sql.DB, pages int) error {
	// A PRAGMA's argument can't be a parameter.
	if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", pages)); err != nil {
		return fmt.Errorf("sqlitestore: set wal_autocheckpoint: %w", err)
	}
	return nil
}

// wrote tells the checkpointer that the writer committed n more writes;
// after every checkpointWrites of them it asks for a checkpoint. It never
// waits: one asked for while one runs runs once after it.
func (c *checkpointer) wrote(n int) {
	if c.since += n; c.since >= checkpointWrites {
		c.since = 0
		c.task.Kick()
	}
}

// close stops the checkpoints (one running is interrupted) and gives the
// writer's connection back SQLite's automatic checkpoint.
func (c *checkpointer) close() {
	c.task.Stop()
	setAutoCheckpoint(context.Background(), c.writer, sqliteAutoCheckpoint) //nolint:errcheck // the caller may have closed the pool already
}
