package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
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
)

// checkpointer runs the background checkpoints of one store.
type checkpointer struct {
	db   *sql.DB // the read pool
	log  *slog.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// startCheckpointer sets the writer's connection (db, a pool of one, as
// Open makes it; in a larger pool, the connection the PRAGMA ran on, the
// others keeping SQLite's default) to checkpoint only past walBackstop
// pages, and starts the checkpoints on read.
func startCheckpointer(ctx context.Context, db, read *sql.DB, log *slog.Logger) (*checkpointer, error) {
	if err := setAutoCheckpoint(ctx, db, walBackstop); err != nil {
		return nil, err
	}
	c := &checkpointer{db: read, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c, nil
}

func setAutoCheckpoint(ctx context.Context, db *sql.DB, pages int) error {
	// A PRAGMA's argument can't be a parameter.
	if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", pages)); err != nil {
		return fmt.Errorf("sqlitestore: set wal_autocheckpoint: %w", err)
	}
	return nil
}

// wrote tells the checkpointer that checkpointWrites more writes were
// committed. It never waits: a checkpoint asked for while one runs runs
// once after it.
func (c *checkpointer) wrote() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// warnEvery bounds the WARNs of failing checkpoints (a full disk fails one
// every checkpointWrites writes).
const warnEvery = time.Minute

func (c *checkpointer) loop() {
	defer close(c.done)
	var warned time.Time
	for {
		select {
		case <-c.kick:
		case <-c.stop:
			return
		}
		// busy is 1 when another connection's checkpoint was running
		// (the writer's, past walBackstop): that one copies the log.
		var busy, logPages, copied int
		err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logPages, &copied)
		if err != nil && c.log != nil && time.Since(warned) >= warnEvery {
			warned = time.Now()
			c.log.Warn("sqlitestore: background checkpoint failed; the writer checkpoints past the bound of the log", "err", err, "bound_pages", walBackstop)
		}
	}
}

// close stops the checkpoints and gives the writer's connection back
// SQLite's automatic checkpoint.
func (c *checkpointer) close(db *sql.DB) {
	close(c.stop)
	<-c.done
	setAutoCheckpoint(context.Background(), db, sqliteAutoCheckpoint) //nolint:errcheck // the caller may have closed db already
}
