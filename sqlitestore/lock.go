package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// FileLock is the exclusive hold of one process on a database file, taken
// with [Lock].
type FileLock struct {
	f      *os.File
	path   string // the lock file's
	dbPath string // the database file's, as given to Lock
	// store is set while a Store holds its pending claims under this lock
	// (Config.Lock): two such stores would not see each other's claims.
	store atomic.Bool
}

// ErrLocked is wrapped by the error of [Lock] when another process holds
// the file.
var ErrLocked = errors.New("sqlitestore: database file in use by another process")

// Lock takes an exclusive, advisory lock on the database file at path. The
// lock is held on a file beside it (path + ".lock", which records the
// holder's process id) until [FileLock.Unlock] or the process's end. The
// kernel releases it when the process dies, however it dies.
//
// A process holding the lock knows that no other process uses the file.
// So the pending claims it finds there belong to a process that died, and
// they can be freed at once with [Store.FreePendingClaims]. Given to the
// store as [Config.Lock], the lock also lets the store keep its own pending
// claims in memory. The gateway does all three at start, so there is one
// gateway process per SQLite file. Lock fails, wrapping [ErrLocked], while
// another process holds the lock.
func Lock(path string) (*FileLock, error) {
	lp := path + ".lock"
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: lock %s: %w", path, err)
	}
	if err := lockFile(f); err != nil {
		holder, _ := os.ReadFile(lp)
		f.Close()
		if pid := strings.TrimSpace(string(holder)); pid != "" {
			return nil, fmt.Errorf("%w: %s is held by process %s (lock file %s)", ErrLocked, path, pid, lp)
		}
		return nil, fmt.Errorf("%w: %s (lock file %s): %v", ErrLocked, path, lp, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0) //nolint:errcheck // informational only
	}
	return &FileLock{f: f, path: lp, dbPath: path}, nil
}

// Path is the lock file's path.
func (l *FileLock) Path() string { return l.path }

// Unlock releases the lock. The lock file stays: removing it could let two
// processes each lock a different file of the same name.
func (l *FileLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the lock
	l.f = nil
	return err
}

// covers reports nil when l is held and is the lock of db's main database
// file, and otherwise an error saying which is not so.
func (l *FileLock) covers(ctx context.Context, db *sql.DB) error {
	if l.f == nil {
		return fmt.Errorf("sqlitestore: Config.Lock: the lock of %s was released", l.dbPath)
	}
	if err := dbIsFile(ctx, db, l.dbPath, "Config.Lock"); err != nil {
		return err
	}
	if !l.store.CompareAndSwap(false, true) {
		return fmt.Errorf("sqlitestore: Config.Lock: another Store holds its pending claims under the lock of %s; use one Store per file", l.dbPath)
	}
	return nil
}

// FreePendingClaims deletes every pending claim in the store, and returns
// how many it deleted. Call it only while holding the file's [Lock], before
// serving. The claims then belong to a process that died while its handlers
// ran. Freeing them lets the providers' retries be processed at once
// instead of waiting for the dead claims' leases to lapse. lease is the
// longest lease the dead process used. A claim lives at most that long
// after its last renewal. Completed records are never touched.
func (s *Store) FreePendingClaims(ctx context.Context, lease time.Duration) (int64, error) {
	if lease <= 0 {
		return 0, fmt.Errorf("sqlitestore: FreePendingClaims: lease %v must be positive", lease)
	}
	now := s.file.nowMillis()
	// The second byte of an encoded record is its state, and 1 is pending. A
	// claim's expiry is at most one lease after its last write, so the
	// range (twice that, for a clock that stepped back since) leaves alone
	// any row that is not such a claim. The table has no expiry index, so
	// this reads every row once, at start, about as long as a sweep.
	res, err := s.file.db.ExecContext(ctx, `DELETE FROM idem_keys
		WHERE expires_at > ?1 AND expires_at <= ?2 AND substr(value, 2, 1) = x'01'`,
		now, now+2*lease.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: freeing pending claims: %w", err)
	}
	return res.RowsAffected()
}
