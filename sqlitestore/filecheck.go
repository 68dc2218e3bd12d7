package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// ErrFileReplaced is wrapped by the error of every call to a [Store] whose
// database path no longer names the file the store has open. Either the
// file was deleted (a cleanup job), or another file now sits at the path (a
// volume re-mounted, a restore copied over it).
//
// The store then refuses every call rather than go on. Going on would keep
// acknowledging deliveries into a file that nothing will open again. At the
// next start the path would hold an empty (or another) database. Every
// delivery recorded since would then be processed a second time when its
// provider retries. Reopening the path would start from that empty database
// at once, silently. Refusing makes the loss visible where it is decided.
// Each call fails, so the middleware applies the route's store-error policy.
// That is fail open with the WARN, or 503 with on_store_error: closed, which
// loses nothing and doubles nothing. The store logs an ERROR. The gateway's
// /readyz answers 503 until the process is restarted on a good file. If the
// path names the open file again (the volume is mounted back), the store
// resumes.
var ErrFileReplaced = errors.New("sqlitestore: the database path no longer names the open file")

// DefaultFileCheckInterval is how often a [Store] checks by default that its
// path still names the file it has open.
const DefaultFileCheckInterval = time.Second

// fileCheck watches the database file of a store. It holds the path and the
// identity (device and inode) of the file it named when the store was
// created.
type fileCheck struct {
	path string
	info os.FileInfo
	log  *slog.Logger
	err  atomic.Pointer[error] // non-nil while the path names another file, or none
}

// newFileCheck returns the check of db's main database file, or nil when db
// has none (an in-memory or temporary database).
func newFileCheck(ctx context.Context, db *sql.DB, log *slog.Logger) (*fileCheck, error) {
	path, err := mainFile(ctx, db)
	if err != nil || path == "" {
		return nil, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: stat %s: %w", path, err)
	}
	return &fileCheck{path: path, info: info, log: log}, nil
}

// mainFile returns the path of db's main database file, or "" when it has
// none.
func mainFile(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return "", fmt.Errorf("sqlitestore: database_list: %w", err)
	}
	defer rows.Close()
	var path string
	for rows.Next() {
		var seq int
		var name, file string
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", fmt.Errorf("sqlitestore: database_list: %w", err)
		}
		if name == "main" {
			path = file
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("sqlitestore: database_list: %w", err)
	}
	return path, nil
}

// check compares the file at the path with the one opened, and logs the
// change when the answer changes.
func (c *fileCheck) check(context.Context) error {
	now, err := os.Stat(c.path)
	var problem error
	switch {
	case errors.Is(err, os.ErrNotExist):
		problem = fmt.Errorf("%w: %s was deleted; refusing to record keys in a file no one will open again (restart once the file is back)", ErrFileReplaced, c.path)
	case err != nil:
		problem = fmt.Errorf("%w: %s: %v", ErrFileReplaced, c.path, err)
	case !os.SameFile(c.info, now):
		problem = fmt.Errorf("%w: %s is now another file (replaced or re-mounted); refusing to go on with the old one (restart to open the new one)", ErrFileReplaced, c.path)
	}
	// Logged before the state changes, so that whoever sees the calls fail
	// (or resume) finds the line that says why already written.
	was := c.err.Load()
	switch {
	case problem != nil && was == nil:
		if c.log != nil {
			c.log.Error("sqlitestore: database file lost: every store call fails until the path names the open file again", "path", c.path, "err", problem)
		}
		c.err.Store(&problem)
	case problem == nil && was != nil:
		if c.log != nil {
			c.log.Info("sqlitestore: the database path names the open file again: store calls resume", "path", c.path)
		}
		c.err.Store(nil)
	}
	return nil
}

// failure is the error every call returns while the file is lost, or nil.
func (c *fileCheck) failure() error {
	if c == nil {
		return nil
	}
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}
