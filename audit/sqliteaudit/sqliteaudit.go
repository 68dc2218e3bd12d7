// Package sqliteaudit is the audit sink on SQLite. The trail is kept in a
// SQLite database, typically the gateway's store file opened with
// sqlitestore.Open (the gateway's default), in the table audit_segments.
//
// A row of audit_segments is a segment: entries written together (a
// Write's batch, up to 1024; the small batches of a quiet trail join the
// last segment up to 256), encoded in a blob with a dictionary of their
// strings, beside a small summary counting them per source, route and
// outcome, the sets of their sources and outcomes, and the times of the
// oldest and newest (indexed). Recording a delivery thus costs its share
// of one row insert per batch, not a row and three index entries of its
// own.
//
// Query reads the segments that can hold the window it asks for, newest
// last entry first, skips in SQLite those without the filter's source or
// outcome, and in Go those whose summary has no entry matching the whole
// filter, and merges the entries of the others, newest first (segments
// overlap in time: entries from concurrent requests arrive out of order).
// Counts adds the summaries of the segments wholly inside its window and
// decodes only those on its edges.
//
// Entries older than the retention (7 days by default) are deleted in the
// background: a segment wholly older at once, one straddling the limit by
// rewriting it without its old entries.
//
// The sink is an [audit.Sink], [audit.Querier] and [audit.Counter]. It is
// a package of its own so that package audit compiles no driver.
package sqliteaudit

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/auditpage"
	"github.com/idemhook/idemhook/internal/auditsql"
	"github.com/idemhook/idemhook/internal/periodic"
	"github.com/idemhook/idemhook/internal/sqlschema"
)

// SchemaVersion is the version of the trail's tables, recorded in the
// table idemhook_schema (shared with package sqlitestore). Versions 1 to 3
// kept one row per entry in the table audit_deliveries (version 2 added
// the columns reason and instance, version 3 the column scope). Version 4
// keeps segments in audit_segments. Older files are upgraded: [New] moves
// the rows of audit_deliveries into segments, 1024 per transaction, then
// drops the table.
const SchemaVersion = 4

// Config configures a [Sink]. The zero value means the defaults.
type Config struct {
	// Retention is how long entries are kept. Older ones are deleted
	// every PruneInterval. Default: audit.DefaultRetention (7 days).
	Retention time.Duration

	// PruneInterval is how often old entries are deleted. A negative value
	// disables the background pruning ([Sink.Prune] still works).
	// Default: 10 minutes.
	PruneInterval time.Duration

	// Now is the clock deciding what is older than Retention. Default:
	// time.Now.
	Now func() time.Time

	// Logger receives a WARN when a background prune fails, and an INFO
	// line before and after New moves the rows of an older file's trail
	// into segments. Default: none.
	Logger *slog.Logger

	// ReadDB, when set, is the database Query and Counts read from: a
	// second sqlitestore.Open of the same file. The file's main *sql.DB
	// has a single connection, shared with the store, and a long read
	// (Counts over a day of deliveries) would hold it. In WAL mode a
	// reader on its own connection neither waits for the writer nor
	// blocks it. Default: the db given to New.
	ReadDB *sql.DB
}

// Sink is an [audit.Sink], [audit.Querier] and [audit.Counter] keeping the
// trail in the table audit_segments of a SQLite database, typically the
// gateway's store file (open it with sqlitestore.Open). Create it with
// [New].
type Sink struct {
	db        *sql.DB
	rdb       *sql.DB // Query and Counts
	retention time.Duration
	now       func() time.Time
	log       *slog.Logger
	insert    *sql.Stmt // on db
	load      *sql.Stmt // on rdb: a segment's data
	segments  *sql.Stmt // on rdb: the segments Query reads
	encoders  sync.Pool // *encoder, for Prune
	pruning   *periodic.Task

	// Write's state, under mu: the last segment Write inserted, while it
	// is small, recent and this sink's, so that small batches (a quiet
	// gateway's Recorder hands over every 200 ms what came) fill it up
	// instead of making a segment each.
	mu      sync.Mutex
	enc     *encoder  // for a new segment
	tail    tail      // the segment appended to, if any
	tailEnc *encoder  // the tail's encoding, to add entries to
	tailMax int       // the most entries a segment grows to by appending; 0: none
	append  *sql.Stmt // on db: the tail's update

	stopOnce sync.Once
}

var (
	_ audit.Sink    = (*Sink)(nil)
	_ audit.Querier = (*Sink)(nil)
	_ audit.Counter = (*Sink)(nil)
)

var sqliteSchema = []string{
	// AUTOINCREMENT: an id is never reused, even once every segment is
	// pruned, so that entry IDs (id << 16 | place) only grow.
	`CREATE TABLE IF NOT EXISTS audit_segments (
		id          INTEGER PRIMARY KEY AUTOINCREMENT,
		min_time_us INTEGER NOT NULL, -- the oldest entry's time, Unix microseconds
		max_time_us INTEGER NOT NULL, -- the newest entry's
		entries     INTEGER NOT NULL,
		sources     BLOB NOT NULL,    -- the distinct sources, each between NUL bytes, for Query to skip
		outcomes    BLOB NOT NULL,    -- the segments without the filter's in SQLite; likewise the outcomes
		summary     BLOB NOT NULL,    -- counts per source, route, outcome (see segment.go)
		data        BLOB NOT NULL     -- the entries (see segment.go); last, so that reading the rest skips it
	)`,
	// Query walks this index newest first; Counts and Prune seek their
	// window in it. min_time_us in it spares a lookup of the row for a
	// segment outside the window.
	`CREATE INDEX IF NOT EXISTS audit_segments_max_time ON audit_segments (max_time_us, min_time_us)`,
	// Prune finds the segments straddling the retention's limit.
	`CREATE INDEX IF NOT EXISTS audit_segments_min_time ON audit_segments (min_time_us)`,
}

// insertSegment inserts a segment; its arguments are an encoder's row.
const insertSegment = `INSERT INTO audit_segments (min_time_us, max_time_us, entries, sources, outcomes, summary, data)
	VALUES (?, ?, ?, ?, ?, ?, ?)`

// pruneSegments bounds the segments one prune statement deletes (up to
// 1024 entries each), so that a large backlog doesn't hold SQLite's write
// lock for long.
const pruneSegments = 64

// querySegments is how many segments' index rows Query reads per
// statement. A page is usually complete within the first few.
const querySegments = 32

// New returns a sink writing to db, creating the table audit_segments and
// its indexes if they are missing, and starts the pruning of entries older
// than cfg.Retention. A file of an older version is upgraded first: the
// rows of its table audit_deliveries move into segments, in transactions
// of 1024 (about 60,000 rows a second on a 2-core machine), before New
// returns. The caller
// owns db (and cfg.ReadDB) and closes it after [Sink.Close].
func New(db *sql.DB, cfg Config) (*Sink, error) {
	if db == nil {
		return nil, errors.New("audit: sqliteaudit.New: nil *sql.DB")
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("audit: sqliteaudit.New: negative retention %v", cfg.Retention)
	}
	s := &Sink{
		db:        db,
		rdb:       cfg.ReadDB,
		retention: cfg.Retention,
		now:       cfg.Now,
		log:       cfg.Logger,
	}
	s.encoders.New = func() any { return newEncoder() }
	s.enc, s.tailEnc, s.tailMax = newEncoder(), newEncoder(), tailMax
	if s.retention == 0 {
		s.retention = audit.DefaultRetention
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rdb == nil {
		s.rdb = db
	}
	ctx := context.Background()
	if err := sqlschema.Upgrade(ctx, db, "audit", SchemaVersion, sqliteSchema, upgradeSQLite); err != nil {
		return nil, err
	}
	if err := s.migrateLegacy(ctx); err != nil {
		return nil, err
	}
	var err error
	if s.insert, err = db.Prepare(insertSegment); err != nil {
		return nil, fmt.Errorf("audit: prepare insert: %w", err)
	}
	// The tail is rewritten only if it still holds what Write left in it
	// (Prune may have rewritten or deleted it) and is the newest segment
	// (another sink on the file may have written since), so that entries
	// written later keep having larger IDs.
	if s.append, err = db.Prepare(`UPDATE audit_segments
		SET min_time_us = ?, max_time_us = ?, entries = ?, sources = ?, outcomes = ?, summary = ?, data = ?
		WHERE id = ? AND entries = ? AND id = (SELECT max(id) FROM audit_segments)`); err != nil {
		s.insert.Close()
		return nil, fmt.Errorf("audit: prepare append: %w", err)
	}
	if s.load, err = s.rdb.Prepare(`SELECT data FROM audit_segments WHERE id = ?`); err != nil {
		s.insert.Close()
		s.append.Close()
		return nil, fmt.Errorf("audit: prepare load: %w", err)
	}
	if s.segments, err = s.rdb.Prepare(`SELECT id, min_time_us, max_time_us, summary FROM audit_segments
		WHERE (max_time_us, min_time_us, id) < (?, ?, ?) AND max_time_us >= ? AND min_time_us <= ?
		AND instr(sources, ifnull(?, X'')) > 0 AND instr(outcomes, ifnull(?, X'')) > 0
		ORDER BY max_time_us DESC, min_time_us DESC, id DESC LIMIT ?`); err != nil {
		s.insert.Close()
		s.append.Close()
		s.load.Close()
		return nil, fmt.Errorf("audit: prepare query: %w", err)
	}
	s.pruning = auditsql.StartPruning(cfg.PruneInterval, s.Prune, s.log)
	return s, nil
}

// Close stops the background pruning and releases the prepared statements.
// It does not close the *sql.DB. The sink must not be used after Close
// (close the Recorder writing to it first). It is safe to call more than
// once.
func (s *Sink) Close() error {
	s.stopOnce.Do(func() {
		s.pruning.Stop()
		s.insert.Close()
		s.append.Close()
		s.load.Close()
		s.segments.Close()
	})
	return nil
}

// upgradeSQLite brings the table audit_deliveries of versions 1 to 3 to
// the columns of version 3 and drops its indexes, so that migrateLegacy
// can read it in id order and delete what it moved cheaply. It runs in the
// schema's transaction, before the CREATE statements of audit_segments.
func upgradeSQLite(ctx context.Context, tx *sql.Tx, from int) error {
	var qs []string
	switch from {
	case 0:
		return nil // new: no older table
	case 1:
		qs = append(qs,
			`ALTER TABLE audit_deliveries ADD COLUMN reason TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE audit_deliveries ADD COLUMN instance TEXT NOT NULL DEFAULT ''`)
		fallthrough
	case 2:
		qs = append(qs, `ALTER TABLE audit_deliveries ADD COLUMN scope TEXT NOT NULL DEFAULT ''`)
		fallthrough
	case 3:
		qs = append(qs,
			`DROP INDEX IF EXISTS audit_deliveries_time`,
			`DROP INDEX IF EXISTS audit_deliveries_source_time`,
			`DROP INDEX IF EXISTS audit_deliveries_outcome_time`)
	}
	for _, q := range qs {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// migrateLegacy moves the rows of the table audit_deliveries of a file of
// versions 1 to 3 into segments of up to segMaxEntries, oldest row first,
// each segment in a transaction with the deletion of its rows (so that a
// migration interrupted resumes where it stopped at the next New), then
// drops the table. Rows keep their order: they were written in id order,
// and their segments come before any new one.
func (s *Sink) migrateLegacy(ctx context.Context) error {
	var name string
	err := s.db.QueryRowContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'audit_deliveries'`).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit: upgrade: %w", err)
	}
	if s.log != nil {
		s.log.Info("audit: moving the rows of audit_deliveries (schema version 3 or older) into audit_segments")
	}
	start := time.Now()
	enc := newEncoder()
	moved := 0
	for {
		n, err := s.migrateSegment(ctx, enc)
		if err != nil {
			return fmt.Errorf("audit: upgrade: move the rows of audit_deliveries to audit_segments (%d moved): %w", moved, err)
		}
		if n == 0 {
			break
		}
		moved += n
	}
	if _, err := s.db.ExecContext(ctx, `DROP TABLE audit_deliveries`); err != nil {
		return fmt.Errorf("audit: upgrade: drop audit_deliveries: %w", err)
	}
	if s.log != nil {
		s.log.Info("audit: moved the rows of audit_deliveries into audit_segments", "rows", moved, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// migrateSegment moves the oldest segMaxEntries rows of audit_deliveries
// into a segment and returns how many it moved.
func (s *Sink) migrateSegment(ctx context.Context, enc *encoder) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, time_us, route, source, key, outcome, status, duration_ns,
		request_bytes, response_bytes, reason, instance, scope FROM audit_deliveries ORDER BY id LIMIT ?`, segMaxEntries)
	if err != nil {
		return 0, err
	}
	var entries []audit.Entry
	var last int64
	for rows.Next() {
		var e audit.Entry
		var us, dur int64
		if err := rows.Scan(&last, &us, &e.Route, &e.Source, &e.Key, &e.Outcome, &e.Status, &dur,
			&e.RequestBytes, &e.ResponseBytes, &e.Reason, &e.Instance, &e.Scope); err != nil {
			rows.Close()
			return 0, err
		}
		e.Time, e.Duration = time.UnixMicro(us), time.Duration(dur)
		entries = append(entries, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(entries) == 0 {
		return 0, err
	}
	enc.encode(entries, nil)
	if _, err := tx.ExecContext(ctx, insertSegment, enc.row()...); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM audit_deliveries WHERE id <= ?`, last); err != nil {
		return 0, err
	}
	return len(entries), tx.Commit()
}

// Write stores entries, in segments of up to 1024 entries, each written
// by one statement: a batch of the Recorder (256 at most) is written all
// or nothing. If a later segment of a larger batch fails, the ones before
// it stay written, and the error is a *audit.PartialWriteError saying how
// many entries. The encoding happens before the statement, so that the
// file's connection, shared with the store, is held only for the insert.
//
// A batch joins the last segment Write inserted if that one was small,
// holds it within 256 entries and is less than a minute old: the segment
// is rewritten with it (its entries keep their IDs; only the batch is
// encoded). A quiet trail thus doesn't turn into a segment per Recorder
// flush.
func (s *Sink) Write(ctx context.Context, entries []audit.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	written := 0
	for written < len(entries) {
		n, err := s.writeSegment(ctx, entries[written:])
		if err != nil {
			err = fmt.Errorf("audit: write %d entries: %w", len(entries)-written, err)
			if written > 0 {
				return &audit.PartialWriteError{Written: written, Err: err}
			}
			return err
		}
		written += n
	}
	return nil
}

// tail is the last segment Write inserted while it can grow.
type tail struct {
	id int64
	at time.Time // when it was inserted
}

// tailMax is the most entries Write lets the last segment grow to, and
// tailAge how long after its insert.
const (
	tailMax = 256
	tailAge = time.Minute
)

// writeSegment writes entries to the tail if they all fit, or their first
// segment's worth to a new segment, and returns how many it wrote.
func (s *Sink) writeSegment(ctx context.Context, entries []audit.Entry) (int, error) {
	if t, enc := s.tail, s.tailEnc; t.id != 0 && enc.n+len(entries) <= s.tailMax && time.Since(t.at) < tailAge {
		had := enc.n
		enc.add(entries, nil)
		enc.finish()
		res, err := s.append.ExecContext(ctx, append(enc.row(), t.id, had)...)
		if err != nil {
			s.tail = tail{} // enc holds entries the file doesn't
			return 0, err
		}
		if changed, err := res.RowsAffected(); err == nil && changed == 1 {
			return len(entries), nil
		}
		// Prune rewrote or deleted it, or another sink wrote: start another.
	}
	s.tail = tail{}
	chunk := entries[:min(len(entries), segMaxEntries)]
	s.enc.encode(chunk, nil)
	res, err := s.insert.ExecContext(ctx, s.enc.row()...)
	if err != nil {
		return 0, err
	}
	if len(chunk) < s.tailMax {
		if id, err := res.LastInsertId(); err == nil {
			s.tail = tail{id: id, at: time.Now()}
			s.enc, s.tailEnc = s.tailEnc, s.enc // the tail's encoding stays
		}
	}
	return len(chunk), nil
}

// newWindow returns the window of f: its time bounds and, when asked,
// its cursor. ok is false when no time is in it.
func newWindow(f *audit.Filter, cursor bool) (w window, ok bool, err error) {
	w = window{f: f, lo: math.MinInt64, hi: math.MaxInt64}
	since, until := auditpage.Window(f.Since, f.Until)
	if !f.Since.IsZero() {
		w.lo = since
	}
	if !f.Until.IsZero() {
		w.hi = until - 1
	}
	if cursor && f.Cursor != "" {
		p, err := auditpage.Decode(f.Cursor)
		if err != nil {
			return w, false, err
		}
		w.after = &position{us: p.Micros, id: p.ID}
	}
	return w, w.lo <= w.hi, nil
}

// segmentMeta is a row of audit_segments without its data.
type segmentMeta struct {
	id, min, max int64
	match        bool // the summary has entries matching the filter's fields
}

// Query returns a page of the entries matching f, newest first.
//
// It reads the segments that can hold entries of the window, by their
// newest entry's time descending, and keeps the newest limit+1 matching
// entries decoded so far. It stops at a segment whose newest entry is
// older than the last of those: every entry of that segment and the
// following ones comes after the page.
func (s *Sink) Query(ctx context.Context, f audit.Filter) (audit.Page, error) {
	limit := f.PageSize()
	w, ok, err := newWindow(&f, true)
	if err != nil {
		return audit.Page{}, err
	}
	out := make([]audit.Entry, 0, min(limit+1, 64))
	if !ok {
		return audit.Page{Entries: out}, nil
	}
	hi := w.hi
	if w.after != nil {
		hi = min(hi, w.after.us)
	}
	// One read transaction: the segments Prune rewrites or deletes
	// meanwhile are seen as they were.
	tx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return audit.Page{}, fmt.Errorf("audit: query: %w", err)
	}
	defer tx.Rollback()
	load := tx.StmtContext(ctx, s.load)
	defer load.Close()
	segments := tx.StmtContext(ctx, s.segments)
	defer segments.Close()
	next := [3]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64} // (max, min, id) of the next segment to read
scan:
	for {
		metas, err := segmentsBefore(ctx, segments, &f, w.lo, hi, next)
		if err != nil {
			return audit.Page{}, fmt.Errorf("audit: query: %w", err)
		}
		for _, m := range metas {
			if len(out) > limit && out[limit].Time.UnixMicro() > m.max {
				break scan
			}
			if !m.match {
				continue
			}
			if err := loadSegment(ctx, load, m.id, w, func(_ uint64, e audit.Entry) bool {
				out = append(out, e)
				return true
			}); err != nil {
				return audit.Page{}, fmt.Errorf("audit: query: %w", err)
			}
			slices.SortFunc(out, newestFirst)
			out = out[:min(len(out), limit+1)]
		}
		if len(metas) < querySegments {
			break
		}
		last := metas[len(metas)-1]
		next = [3]int64{last.max, last.min, last.id}
	}
	entries, cursor := auditpage.Cut(out, limit, func(e *audit.Entry) auditpage.Position {
		return auditpage.Position{Micros: e.Time.UnixMicro(), ID: e.ID}
	})
	return audit.Page{Entries: entries, Next: cursor}, nil
}

// loadSegment decodes the entries of segment id in w with load (the
// statement s.load) and calls keep for each. A segment deleted since is
// empty.
func loadSegment(ctx context.Context, load *sql.Stmt, id int64, w window, keep func(idx uint64, e audit.Entry) bool) error {
	rows, err := load.QueryContext(ctx, id)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return rows.Err()
	}
	var data sql.RawBytes
	if err := rows.Scan(&data); err != nil {
		return err
	}
	return decodeSegment(id, data, w, keep)
}

// newestFirst orders entries by time, then ID, descending.
func newestFirst(a, b audit.Entry) int {
	return cmp.Or(cmp.Compare(b.Time.UnixMicro(), a.Time.UnixMicro()), cmp.Compare(b.ID, a.ID))
}

// segmentsBefore returns up to querySegments segments that can hold
// entries in [lo, hi] and come after next in the order of the index
// audit_segments_max_time, descending.
func segmentsBefore(ctx context.Context, stmt *sql.Stmt, f *audit.Filter, lo, hi int64, next [3]int64) ([]segmentMeta, error) {
	rows, err := stmt.QueryContext(ctx, next[0], next[1], next[2], lo, hi, among(f.Source), among(f.Outcome), querySegments)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []segmentMeta
	var summary sql.RawBytes
	for rows.Next() {
		var m segmentMeta
		if err := rows.Scan(&m.id, &m.min, &m.max, &summary); err != nil {
			return nil, err
		}
		if m.match, err = matchesSummary(summary, f); err != nil {
			return nil, fmt.Errorf("%w %d", err, m.id)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// Prune deletes the entries older than the retention and returns how many
// it deleted: the segments wholly older, up to 64 segments per statement,
// then the segments straddling the limit, each rewritten without its old
// entries in a transaction of its own.
func (s *Sink) Prune(ctx context.Context) (int64, error) {
	cutoff := auditpage.CeilMicros(s.now().Add(-s.retention))
	var total int64
	for {
		n, segs, err := s.pruneWhole(ctx, cutoff)
		total += n
		if err != nil {
			return total, fmt.Errorf("audit: prune: %w", err)
		}
		if segs < pruneSegments {
			break
		}
	}
	for {
		ids, err := s.straddling(ctx, cutoff)
		if err != nil {
			return total, fmt.Errorf("audit: prune: %w", err)
		}
		for _, id := range ids {
			n, err := s.rewrite(ctx, id, cutoff)
			total += n
			if err != nil {
				return total, fmt.Errorf("audit: prune: segment %d: %w", id, err)
			}
		}
		if len(ids) < pruneSegments {
			break
		}
	}
	return total, nil
}

// pruneWhole deletes up to pruneSegments segments whose entries are all
// older than cutoff and returns the entries and segments it deleted.
func (s *Sink) pruneWhole(ctx context.Context, cutoff int64) (entries int64, segments int, err error) {
	rows, err := s.db.QueryContext(ctx, `DELETE FROM audit_segments WHERE id IN
		(SELECT id FROM audit_segments WHERE max_time_us < ? LIMIT ?) RETURNING entries`, cutoff, pruneSegments)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return entries, segments, err
		}
		entries += n
		segments++
	}
	return entries, segments, rows.Err()
}

// straddling returns up to pruneSegments segments holding entries older
// than cutoff.
func (s *Sink) straddling(ctx context.Context, cutoff int64) ([]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM audit_segments WHERE min_time_us < ? LIMIT ?`, cutoff, pruneSegments)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// rewrite rewrites segment id without its entries older than cutoff (the
// others keep their IDs), or deletes it when none is left, and returns
// how many entries it dropped.
func (s *Sink) rewrite(ctx context.Context, id, cutoff int64) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var n int64
	var data []byte
	err = tx.QueryRowContext(ctx, `SELECT entries, data FROM audit_segments WHERE id = ? AND min_time_us < ?`, id, cutoff).Scan(&n, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // rewritten or deleted since
	}
	if err != nil {
		return 0, err
	}
	var kept []audit.Entry
	var idx []uint64
	if err := decodeSegment(id, data, window{f: &audit.Filter{}, lo: cutoff, hi: math.MaxInt64}, func(i uint64, e audit.Entry) bool {
		kept, idx = append(kept, e), append(idx, i)
		return true
	}); err != nil {
		return 0, err
	}
	if len(kept) == 0 {
		_, err = tx.ExecContext(ctx, `DELETE FROM audit_segments WHERE id = ?`, id)
	} else {
		enc := s.encoders.Get().(*encoder)
		defer s.encoders.Put(enc)
		enc.encode(kept, idx)
		_, err = tx.ExecContext(ctx, `UPDATE audit_segments
			SET min_time_us = ?, max_time_us = ?, entries = ?, sources = ?, outcomes = ?, summary = ?, data = ?
			WHERE id = ?`, append(enc.row(), id)...)
	}
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return n - int64(len(kept)), nil
}

// Counts returns the number of entries matching f per source and outcome.
// A segment wholly inside f's time window counts from its summary; only
// the segments on the window's edges are decoded.
func (s *Sink) Counts(ctx context.Context, f audit.Filter) ([]audit.Count, error) {
	w, ok, _ := newWindow(&f, false)
	if !ok {
		return nil, nil
	}
	tx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("audit: counts: %w", err)
	}
	defer tx.Rollback()
	t := tally{}
	edges, err := t.addSummaries(ctx, tx, &f, w.lo, w.hi)
	if err != nil {
		return nil, fmt.Errorf("audit: counts: %w", err)
	}
	if len(edges) > 0 {
		load := tx.StmtContext(ctx, s.load)
		defer load.Close()
		for _, id := range edges {
			if err := loadSegment(ctx, load, id, w, func(_ uint64, e audit.Entry) bool {
				t.add([]byte(e.Source), []byte(e.Outcome), 1)
				return true
			}); err != nil {
				return nil, fmt.Errorf("audit: counts: %w", err)
			}
		}
	}
	return t.counts(), nil
}

// tally counts entries per source and outcome. Its key is the source's
// length as a uvarint, the source, then the outcome.
type tally struct {
	n   map[string]*int64
	key []byte
}

func (t *tally) add(source, outcome []byte, n int64) {
	if t.n == nil {
		t.n = map[string]*int64{}
	}
	t.key = binary.AppendUvarint(t.key[:0], uint64(len(source)))
	t.key = append(append(t.key, source...), outcome...)
	p := t.n[string(t.key)]
	if p == nil {
		p = new(int64)
		t.n[string(t.key)] = p
	}
	*p += n
}

// addSummaries adds the summaries of the segments wholly inside [lo, hi]
// and returns the ids of those that hold entries in it and outside.
func (t *tally) addSummaries(ctx context.Context, tx *sql.Tx, f *audit.Filter, lo, hi int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, min_time_us, max_time_us, summary FROM audit_segments
		WHERE max_time_us >= ? AND min_time_us <= ? AND instr(sources, ifnull(?, X'')) > 0 AND instr(outcomes, ifnull(?, X'')) > 0`,
		lo, hi, among(f.Source), among(f.Outcome))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var edges []int64
	var summary sql.RawBytes
	for rows.Next() {
		var id, mn, mx int64
		if err := rows.Scan(&id, &mn, &mx, &summary); err != nil {
			return nil, err
		}
		if mn < lo || mx > hi {
			if ok, err := matchesSummary(summary, f); err != nil {
				return nil, fmt.Errorf("%w %d", err, id)
			} else if ok {
				edges = append(edges, id)
			}
			continue
		}
		if err := eachTriple(summary, func(tr summaryTriple) {
			if tripleMatches(tr, f) {
				t.add(tr.source, tr.outcome, tr.n)
			}
		}); err != nil {
			return nil, fmt.Errorf("%w %d", err, id)
		}
	}
	return edges, rows.Err()
}

// counts returns the tally ordered by source then outcome, nil when empty.
func (t *tally) counts() []audit.Count {
	var out []audit.Count
	for k, n := range t.n {
		l, w := binary.Uvarint([]byte(k))
		out = append(out, audit.Count{Source: k[w : w+int(l)], Outcome: k[w+int(l):], N: *n})
	}
	slices.SortFunc(out, func(a, b audit.Count) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Outcome, b.Outcome))
	})
	return out
}
