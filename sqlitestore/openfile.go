package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// FileConfig configures [OpenFile]: the [Store]'s Config, and what OpenFile
// needs beside it.
type FileConfig struct {
	// Config is the store's. OpenFile sets its Lock and Reader, so they
	// must be nil. CacheBytes is used only when OpenFile holds the lock
	// (New refuses it without).
	Config

	// Lease is the longest lease the process that used the file before
	// used, by which [Store.FreePendingClaims] tells its pending claims.
	// Required.
	Lease time.Duration
}

// File is a store that [OpenFile] opened on a database file, with what it
// opened for it.
type File struct {
	// Store is the store on the file.
	Store *Store

	// DB is the writer's pool ([Open]). SQLite admits one writer, so
	// whatever else writes to the file in this process (an audit trail in
	// the same file) shares it, and is closed before the File.
	DB *sql.DB

	// Lock is this process's hold on the file, or nil when file locks are
	// not supported here (OpenFile then logged a WARN).
	Lock *FileLock

	// Freed is how many pending claims of a dead process OpenFile freed.
	Freed int64

	closers []func() error // last opened last
}

// OpenFile opens the store on the database file at path in one call, as
// the gateway does at start, and so there is one process per file:
//
//  1. It takes the file's [Lock]. Where file locks are not supported it
//     logs a WARN (Config.Logger) and goes on without.
//  2. It opens the writer's pool ([Open]) and a pool of readers
//     ([OpenReader], Config.Reader). [OpenWriter] is steps 1 and 2
//     without the readers.
//  3. It makes the store ([New]), with the lock as Config.Lock when held.
//  4. Holding the lock, it frees the pending claims a process that died
//     left in the file ([Store.FreePendingClaims], with cfg.Lease): no
//     other process uses the file, so their owners are gone, and the
//     providers' retries are processed now rather than refused until the
//     dead claims' leases lapse. It logs how many at INFO.
//
// An error of any step closes what the steps before opened. [File.Close]
// closes everything, in the reverse order.
func OpenFile(ctx context.Context, path string, cfg FileConfig) (_ *File, err error) {
	if cfg.Lock != nil || cfg.Reader != nil {
		return nil, errors.New("sqlitestore: OpenFile: Config.Lock and Config.Reader are OpenFile's to set")
	}
	f, err := OpenWriter(path, cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close() //nolint:errcheck // the step's error is the one to report
		}
	}()
	// Reads (a claim's first look, a replay) run beside the writer's
	// commits on a pool of their own.
	reader, err := OpenReader(path)
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, reader.Close)
	sc := cfg.Config
	sc.Lock, sc.Reader = f.Lock, reader
	if f.Lock == nil {
		sc.CacheBytes = 0
	}
	if f.Store, err = New(f.DB, sc); err != nil {
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	f.closers = append(f.closers, f.Store.Close)
	if f.Lock == nil {
		return f, nil
	}
	if f.Freed, err = f.Store.FreePendingClaims(ctx, cfg.Lease); err != nil {
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	if cfg.Logger != nil {
		cfg.Logger.Info("idemhook sqlite store: this process holds the file alone",
			"path", path, "lock", path+".lock", "freed_pending_claims", f.Freed)
	}
	return f, nil
}

// OpenWriter does the first two steps of [OpenFile], for a process that
// writes to a file of its own beside its store's (an audit trail): it
// takes the file's [Lock], or logs a WARN (to logger, when not nil) where
// file locks are not supported, and opens the writer's pool ([Open]). The
// File it returns has no Store and no readers; its Close closes the pool,
// then releases the lock. An error closes what the first step opened.
func OpenWriter(path string, logger *slog.Logger) (_ *File, err error) {
	f := &File{}
	defer func() {
		if err != nil {
			f.Close() //nolint:errcheck // the step's error is the one to report
		}
	}()
	lock, err := Lock(path)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		if logger != nil {
			logger.Warn("idemhook sqlite: file locks are not supported here; make sure one gateway process uses the file", "path", path)
		}
	case err != nil:
		return nil, fmt.Errorf("%w; one gateway process per SQLite file: stop the other one, or give this one another path", err)
	default:
		f.Lock = lock
		f.closers = append(f.closers, lock.Unlock)
	}
	if f.DB, err = Open(path); err != nil {
		return nil, err
	}
	f.closers = append(f.closers, f.DB.Close)
	return f, nil
}

// Close closes the store, then the readers and the writer's pool, and
// releases the lock, and returns the first error.
func (f *File) Close() error {
	var first error
	for i := len(f.closers) - 1; i >= 0; i-- {
		if err := f.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	f.closers = nil
	return first
}
