package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/idemhook/idemhook/internal/fence"
	"github.com/idemhook/idemhook/queue"
)

// The delivery queue lives in the store's own file, beside idem_keys, so
// that the key's completion and the event's append are one transaction of
// the store's writer (see queue.Engine.Accept). Every write goes through
// the writer, so queue writes share its group commits with the keys'.
// Times are Unix milliseconds of the store's clock.
const queueSchema = `
CREATE TABLE IF NOT EXISTS idem_queue ` + queueTable + `;` + queueIndexes + `
CREATE TABLE IF NOT EXISTS idem_queue_attempts (
	event_id   INTEGER NOT NULL,
	attempt    INTEGER NOT NULL,
	started_at INTEGER NOT NULL,
	latency_us INTEGER NOT NULL,
	status     INTEGER NOT NULL,
	error      TEXT    NOT NULL,
	body_head  BLOB    NOT NULL,
	worker     TEXT    NOT NULL,
	PRIMARY KEY (event_id, attempt)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idem_queue_routes (
	route  TEXT PRIMARY KEY,
	paused INTEGER NOT NULL
) WITHOUT ROWID;
`

// queueTable is idem_queue's columns. Its id is AUTOINCREMENT: a plain
// INTEGER PRIMARY KEY (a rowid) takes max(id)+1, so once the queue is
// empty the ids start over, and "event 1" would name several events over
// time (in Idempotent-Event-Id and the audit trail). migrateQueueIDs
// rebuilds a table made before.
const queueTable = `(
	id          INTEGER PRIMARY KEY AUTOINCREMENT, -- arrival order, and the order of a group; never reused
	route       TEXT    NOT NULL,
	key         TEXT    NOT NULL,    -- the store key, sent as Idempotency-Key
	order_key   TEXT,                -- NULL: unordered
	state       INTEGER NOT NULL,    -- 0 queued, 1 running, 2 dead; delivered rows are deleted
	attempt     INTEGER NOT NULL DEFAULT 0, -- attempts started; with id, the fencing token
	base        INTEGER NOT NULL DEFAULT 0, -- attempt at the last redrive
	fence       INTEGER NOT NULL DEFAULT 0, -- the last attempt's fence for the backend (at first the key's claim's)
	since       INTEGER NOT NULL,    -- received, or the last redrive: the maximum age counts from here
	next_at     INTEGER NOT NULL,    -- queued: when due; running: when the lease ends
	lease_by    TEXT,
	received_at INTEGER NOT NULL,
	reason      TEXT,                -- dead: why
	last_status INTEGER,
	last_error  TEXT,
	request     BLOB    NOT NULL     -- queue.EncodeRequest
)`

// queueIndexes are idem_queue's indexes.
const queueIndexes = `
CREATE INDEX IF NOT EXISTS idem_queue_due ON idem_queue (route, state, next_at);
CREATE INDEX IF NOT EXISTS idem_queue_group ON idem_queue (route, order_key, id) WHERE order_key IS NOT NULL;`

// fenceSQL is the condition every write of an attempt matches: the event's
// id and the attempt's number.
const fenceSQL = ` WHERE id = ?1 AND state = 1 AND attempt = ?2`

// preparedSQL are the statements the writer runs, prepared once by Queue
// (a statement parsed afresh costs about a millisecond on the writer's one
// goroutine, which every write waits behind; and the writer's transaction
// holds the database's one connection, so nothing can be prepared from
// inside it).
var preparedSQL []string

func prepared(query string) string {
	preparedSQL = append(preparedSQL, query)
	return query
}

var (
	writeSQL1 = prepared(`SELECT paused FROM idem_queue_routes WHERE route = ?1`)
	// The due events, earliest due first, each state's from its own range
	// of idem_queue_due in that index's order, so that a claim reads about
	// as many rows as it takes however many are due: the running ones whose
	// lease has ended, then the queued ones. An ordered event is due only
	// as its group's head.
	writeSQL2 = prepared(`UPDATE idem_queue SET state = 1, attempt = attempt + 1, next_at = ?3, lease_by = ?4, fence = max(fence + 1, ?6)
			WHERE id IN (
				SELECT id FROM (SELECT q.id FROM idem_queue q
					WHERE q.route = ?1 AND q.state = 1 AND q.next_at <= ?2 AND (q.order_key IS NULL OR NOT EXISTS (
						SELECT 1 FROM idem_queue h WHERE h.route = ?1 AND h.order_key = q.order_key AND h.id < q.id))
					ORDER BY q.next_at LIMIT ?5)
				UNION ALL
				SELECT id FROM (SELECT q.id FROM idem_queue q
					WHERE q.route = ?1 AND q.state = 0 AND q.next_at <= ?2 AND (q.order_key IS NULL OR NOT EXISTS (
						SELECT 1 FROM idem_queue h WHERE h.route = ?1 AND h.order_key = q.order_key AND h.id < q.id))
					ORDER BY q.next_at LIMIT ?5)
				LIMIT ?5)
			RETURNING id, key, order_key, attempt, base, since, received_at, request, fence`)
	writeSQL3 = prepared(`UPDATE idem_queue SET next_at = ?3 WHERE id = ?1 AND state = 1 AND attempt = ?2`)
	writeSQL4 = prepared(`DELETE FROM idem_queue` + fenceSQL)
	writeSQL5 = prepared(`UPDATE idem_queue SET state = 0, next_at = ?3, lease_by = NULL, last_status = ?4, last_error = ?5` + fenceSQL)
	writeSQL6 = prepared(`UPDATE idem_queue SET state = 2, next_at = 0, lease_by = NULL, reason = ?3, last_status = ?4, last_error = ?5` + fenceSQL)
	writeSQL7 = prepared(`DELETE FROM idem_queue_attempts WHERE event_id = ?1`)
	writeSQL8 = prepared(`INSERT OR REPLACE INTO idem_queue_attempts
			(event_id, attempt, started_at, latency_us, status, error, body_head, worker)
			SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE EXISTS (SELECT 1 FROM idem_queue WHERE id = ?1)`)
	writeSQL9 = prepared(`DELETE FROM idem_queue_attempts WHERE event_id = ?1
			AND attempt > (SELECT min(attempt) FROM idem_queue_attempts WHERE event_id = ?1)
			AND attempt <= (SELECT attempt FROM idem_queue_attempts WHERE event_id = ?1 ORDER BY attempt DESC LIMIT 1 OFFSET ?2)`)
	writeSQL10 = prepared(`UPDATE idem_queue SET next_at = ?2 WHERE route = ?1 AND state = 0 AND attempt > 0 AND next_at > ?2`)
)

// Queue is the store's delivery queue, a [queue.Engine]. Get it with
// [Store.Queue].
type Queue struct {
	s      *Store
	f      *fileStore
	read   *sql.DB
	insert *sql.Stmt // Accept's append, prepared once: it runs on the writer's one goroutine

	// stmts are the statements of preparedSQL, by their text; set once by
	// Store.Queue, then only read.
	stmts map[string]*sql.Stmt
}

// stmt returns query prepared on the store's database, in tx.
func (q *Queue) stmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	st := q.stmts[query]
	if st == nil {
		return nil, fmt.Errorf("sqlitestore: queue: statement not prepared: %.40s", query)
	}
	return tx.StmtContext(ctx, st), nil
}

func (q *Queue) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	st, err := q.stmt(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (q *Queue) query(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	st, err := q.stmt(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// scanner is a row to scan, or the error that kept it from being read.
type scanner struct {
	row *sql.Row
	err error
}

func (s scanner) Scan(dest ...any) error {
	if s.err != nil {
		return s.err
	}
	return s.row.Scan(dest...)
}

func (q *Queue) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) scanner {
	st, err := q.stmt(ctx, tx, query)
	if err != nil {
		return scanner{err: err}
	}
	return scanner{row: st.QueryRowContext(ctx, args...)}
}

var _ queue.Engine = (*Queue)(nil)

var _ queue.EngineStore = (*Store)(nil)

// QueueEngine is [Store.Queue] as a [queue.Engine], for [queue.EngineStore].
func (s *Store) QueueEngine(ctx context.Context) (queue.Engine, error) {
	q, err := s.Queue(ctx)
	if err != nil {
		return nil, err
	}
	return q, nil
}

// Queue returns the store's delivery queue, creating its tables in the
// file if they are missing. When the store holds its file alone
// (Config.Lock), the attempts that were running when the last process
// holding the file stopped are queued again at once: they are sent again
// with the next attempt number.
func (s *Store) Queue(ctx context.Context) (*Queue, error) {
	f := s.file
	if _, err := f.w.do(ctx, "queue schema", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		if _, err := tx.ExecContext(ctx, queueSchema); err != nil {
			return 0, err
		}
		if err := addFenceColumn(ctx, tx); err != nil {
			return 0, err
		}
		if err := migrateQueueIDs(ctx, tx, f.log); err != nil {
			return 0, err
		}
		if _, held := s.mode.(*heldStore); held {
			if _, err := tx.ExecContext(ctx, `UPDATE idem_queue SET state = 0, next_at = ?1, lease_by = NULL WHERE state = 1`, f.nowMillis()); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}); err != nil {
		return nil, fmt.Errorf("sqlitestore: Queue: %w", err)
	}
	insert, err := f.db.PrepareContext(ctx, `INSERT INTO idem_queue (route, key, order_key, state, attempt, lease_by, since, next_at, received_at, request, fence)
		VALUES (?1, ?2, ?3, ?7, ?7, ?8, ?4, ?9, ?5, ?6, ?10)`)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: Queue: %w", err)
	}
	q := &Queue{s: s, f: f, read: f.readDB, insert: insert, stmts: map[string]*sql.Stmt{}}
	closeAll := func() {
		insert.Close()
		for _, st := range q.stmts {
			st.Close()
		}
	}
	for _, query := range preparedSQL {
		st, err := f.db.PrepareContext(ctx, query)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("sqlitestore: Queue: prepare: %w", err)
		}
		q.stmts[query] = st
	}
	s.onClose(closeAll)
	return q, nil
}

// addFenceColumn adds the fence column to an idem_queue made before it
// existed.
func addFenceColumn(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('idem_queue') WHERE name = 'fence'`).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE idem_queue ADD COLUMN fence INTEGER NOT NULL DEFAULT 0`)
	return err
}

// migrateQueueIDs rebuilds an idem_queue made before its id was
// AUTOINCREMENT (see queueTable), keeping every event and its id: the
// next id then follows the largest one kept.
func migrateQueueIDs(ctx context.Context, tx *sql.Tx, log *slog.Logger) error {
	var ddl string
	if err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idem_queue'`).Scan(&ddl); err != nil {
		return fmt.Errorf("read idem_queue's schema: %w", err)
	}
	if strings.Contains(strings.ToUpper(ddl), "AUTOINCREMENT") {
		return nil
	}
	const columns = `id, route, key, order_key, state, attempt, base, fence, since, next_at, lease_by, received_at, reason, last_status, last_error, request`
	var n int64
	for _, stmt := range []string{
		`DROP TABLE IF EXISTS idem_queue_rebuilt`,
		`CREATE TABLE idem_queue_rebuilt ` + queueTable,
		`INSERT INTO idem_queue_rebuilt (` + columns + `) SELECT ` + columns + ` FROM idem_queue ORDER BY id`,
		`DROP TABLE idem_queue`,
		`ALTER TABLE idem_queue_rebuilt RENAME TO idem_queue`,
		queueIndexes,
	} {
		res, err := tx.ExecContext(ctx, stmt)
		if err != nil {
			return fmt.Errorf("migrate idem_queue to ids never reused: %w", err)
		}
		if strings.HasPrefix(stmt, "INSERT") {
			n, _ = res.RowsAffected()
		}
	}
	if log != nil {
		log.Info("sqlitestore: migrated idem_queue: event ids are never reused from now on", "events", n)
	}
	return nil
}

// fenceArg is a fence as the INTEGER column holds it. Fences are
// microseconds since 1970: they fit.
func fenceArg(f uint64) int64 { return int64(min(f, 1<<63-1)) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMs(v sql.NullInt64) time.Time {
	if !v.Valid || v.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Accept implements [queue.Engine]: the claim's completion and the event's
// insert are one transaction of the store's writer.
func (q *Queue) Accept(ctx context.Context, c queue.Completion, ev *queue.Event) error {
	if err := queue.ValidateAccept(ev); err != nil {
		return err
	}
	if err := q.f.watch.failure(); err != nil {
		return err
	}
	if err := checkLifetime("complete", c.TTL); err != nil {
		return err
	}
	old, err := encode("complete", c.Claim)
	if err != nil {
		return err
	}
	value, err := encode("complete", c.Done)
	if err != nil {
		return err
	}
	req := queue.EncodeRequest(nil, ev)
	since := ev.Since
	if since.IsZero() {
		since = ev.ReceivedAt
	}
	var id int64
	running, nextAt := 0, ms(ev.ReceivedAt) // queued, due at once
	err = q.s.mode.complete(ctx, c.Key, old, value, c.TTL, func(ctx context.Context, tx *sql.Tx) error {
		if ev.Lease > 0 { // running its first attempt (see queue.Event.Lease)
			running, nextAt = 1, q.f.nowMillis()+ev.Lease.Milliseconds()
		}
		res, err := tx.StmtContext(ctx, q.insert).ExecContext(ctx,
			ev.Route, ev.Key, nullString(ev.OrderKey), ms(since), ms(ev.ReceivedAt), req, running, nullString(ev.Worker), nextAt, fenceArg(ev.Fence))
		if err != nil {
			return err
		}
		id, err = res.LastInsertId() // the rowid: the id column is its alias
		return err
	})
	if err != nil {
		return err
	}
	ev.ID = id
	if running == 1 {
		ev.Attempt = 1
	}
	return nil
}

// AcceptAll implements [queue.Engine]: the claim's completion and every
// event's insert are one transaction of the store's writer.
func (q *Queue) AcceptAll(ctx context.Context, c queue.Completion, evs []*queue.Event) error {
	if err := queue.ValidateAcceptAll(evs); err != nil {
		return err
	}
	if err := q.f.watch.failure(); err != nil {
		return err
	}
	if err := checkLifetime("complete", c.TTL); err != nil {
		return err
	}
	old, err := encode("complete", c.Claim)
	if err != nil {
		return err
	}
	value, err := encode("complete", c.Done)
	if err != nil {
		return err
	}
	reqs := make([][]byte, len(evs))
	for i, ev := range evs {
		if i > 0 && queue.SameRequest(evs[0], ev) {
			reqs[i] = reqs[0] // a route's destinations share their request: encoded once
			continue
		}
		reqs[i] = queue.EncodeRequest(nil, ev)
	}
	ids := make([]int64, len(evs))
	err = q.s.mode.complete(ctx, c.Key, old, value, c.TTL, func(ctx context.Context, tx *sql.Tx) error {
		insert := tx.StmtContext(ctx, q.insert)
		for i, ev := range evs {
			since := ev.Since
			if since.IsZero() {
				since = ev.ReceivedAt
			}
			// Queued, due at once (AcceptAll accepts no event running).
			res, err := insert.ExecContext(ctx,
				ev.Route, ev.Key, nullString(ev.OrderKey), ms(since), ms(ev.ReceivedAt), reqs[i], 0, nil, ms(ev.ReceivedAt), fenceArg(ev.Fence))
			if err != nil {
				return err
			}
			if ids[i], err = res.LastInsertId(); err != nil { // the rowid: the id column is its alias
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, ev := range evs {
		ev.ID = ids[i]
	}
	return nil
}

// Claim implements [queue.Engine]. An attempt's fence is this process's
// clock, as the fences the middleware gives claims of this store (one
// process holds the file, or processes of one machine share it: one
// clock), or one more than the event's last fence (at first the claim's,
// stored by Accept) when the clock has not passed it.
func (q *Queue) Claim(ctx context.Context, route string, max int, lease time.Duration, worker string) ([]*queue.Event, error) {
	if max <= 0 {
		return nil, nil
	}
	var out []*queue.Event
	_, err := q.f.w.do(ctx, "queue claim", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		out = out[:0]
		var paused int
		err := q.queryRow(ctx, tx, writeSQL1, route).Scan(&paused)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, err
		}
		if paused != 0 {
			return 0, nil
		}
		now := q.f.nowMillis()
		// The due events: queued ones whose time has come and running ones
		// whose lease has ended, each in its own index range, then the
		// first max of them by id. An ordered event is due only as its
		// group's head.
		rows, err := q.query(ctx, tx, writeSQL2,
			route, now, now+lease.Milliseconds(), worker, max, fenceArg(fence.Next()))
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		for rows.Next() {
			ev := &queue.Event{Route: route}
			var order sql.NullString
			var since, received sql.NullInt64
			var req []byte
			var f int64
			if err := rows.Scan(&ev.ID, &ev.Key, &order, &ev.Attempt, &ev.Base, &since, &received, &req, &f); err != nil {
				return 0, err
			}
			ev.OrderKey, ev.Since, ev.ReceivedAt, ev.Fence = order.String, fromMs(since), fromMs(received), uint64(f)
			if err := queue.DecodeRequest(req, ev); err != nil {
				return 0, fmt.Errorf("event %d: %w", ev.ID, err)
			}
			out = append(out, ev)
		}
		return int64(len(out)), rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: queue claim: %w", err)
	}
	slices.SortFunc(out, func(a, b *queue.Event) int { return int(a.ID - b.ID) })
	return out, nil
}

// Extend implements [queue.Engine].
func (q *Queue) Extend(ctx context.Context, t queue.Token, lease time.Duration) error {
	n, err := q.f.w.do(ctx, "queue extend", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		res, err := q.exec(ctx, tx, writeSQL3,
			t.ID, t.Attempt, q.f.nowMillis()+lease.Milliseconds())
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: queue extend: %w", err)
	}
	if n == 0 {
		return queue.ErrSuperseded
	}
	return nil
}

// Settle implements [queue.Engine].
func (q *Queue) Settle(ctx context.Context, s queue.Settlement) error {
	a := s.Attempt
	if a.Attempt == 0 {
		a.Attempt = s.Token.Attempt
	}
	if a.Started.IsZero() {
		a.Started = time.Now()
	}
	// An attempt with no answer (refused, reset, timed out) has no body:
	// its head is empty, not NULL (the column is NOT NULL).
	head := a.BodyHead[:min(len(a.BodyHead), queue.MaxBodyHead)]
	if head == nil {
		head = []byte{}
	}
	n, err := q.f.w.do(ctx, "queue settle", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		var res sql.Result
		var err error
		switch s.Verdict {
		case queue.Delivered:
			res, err = q.exec(ctx, tx, writeSQL4, s.Token.ID, s.Token.Attempt)
		case queue.Retry:
			res, err = q.exec(ctx, tx, writeSQL5,
				s.Token.ID, s.Token.Attempt, ms(s.NextAt), a.Status, a.Error)
		case queue.Kill:
			res, err = q.exec(ctx, tx, writeSQL6,
				s.Token.ID, s.Token.Attempt, s.Reason, a.Status, a.Error)
		default:
			return 0, fmt.Errorf("unknown verdict %d", s.Verdict)
		}
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		if n == 1 && s.Verdict == queue.Delivered {
			_, err = q.exec(ctx, tx, writeSQL7, s.Token.ID)
			return n, err
		}
		// The attempt is kept while its event is (a superseded one too, for
		// the operator), with the first and the latest ones.
		if _, err := q.exec(ctx, tx, writeSQL8,
			s.Token.ID, a.Attempt, ms(a.Started), a.Latency.Microseconds(), a.Status, a.Error, head, a.Worker); err != nil {
			return 0, err
		}
		_, err = q.exec(ctx, tx, writeSQL9,
			s.Token.ID, queue.KeptAttempts-1)
		return n, err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: queue settle: %w", err)
	}
	if n == 0 {
		return queue.ErrSuperseded
	}
	return nil
}

// Hasten implements [queue.Engine].
func (q *Queue) Hasten(ctx context.Context, route string) (int64, error) {
	return q.f.w.do(ctx, "queue hasten", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		now := q.f.nowMillis()
		res, err := q.exec(ctx, tx, writeSQL10, route, now)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// Stats implements [queue.Engine].
func (q *Queue) Stats(ctx context.Context, route string) (queue.Stats, error) {
	var st queue.Stats
	rows, err := q.read.QueryContext(ctx, `SELECT state, attempt > 0, count(*), min(received_at), min(next_at)
		FROM idem_queue WHERE route = ?1 GROUP BY state, attempt > 0`, route)
	if err != nil {
		return st, fmt.Errorf("sqlitestore: queue stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var state int
		var retried bool
		var n int64
		var oldest, next sql.NullInt64
		if err := rows.Scan(&state, &retried, &n, &oldest, &next); err != nil {
			return st, err
		}
		switch {
		case state == int(queue.Dead):
			st.Dead += n
			continue
		case state == int(queue.Running):
			st.Running += n
		case retried:
			st.Retrying += n
		default:
			st.Queued += n
		}
		if o := fromMs(oldest); !o.IsZero() && (st.Oldest.IsZero() || o.Before(st.Oldest)) {
			st.Oldest = o
		}
		if nx := fromMs(next); state == int(queue.Queued) && !nx.IsZero() && (st.NextAt.IsZero() || nx.Before(st.NextAt)) {
			st.NextAt = nx
		}
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	var paused int
	err = q.read.QueryRowContext(ctx, `SELECT paused FROM idem_queue_routes WHERE route = ?1`, route).Scan(&paused)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return st, err
	}
	st.Paused = paused != 0
	return st, nil
}

// where translates f into a WHERE clause and its arguments.
func where(f queue.Filter) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, vals ...any) {
		conds = append(conds, cond)
		args = append(args, vals...)
	}
	if f.Route != "" {
		add("route = ?", f.Route)
	}
	if len(f.IDs) > 0 {
		add("id IN (" + strings.TrimSuffix(strings.Repeat("?,", len(f.IDs)), ",") + ")")
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	if len(f.States) > 0 {
		add("state IN (" + strings.TrimSuffix(strings.Repeat("?,", len(f.States)), ",") + ")")
		for _, s := range f.States {
			args = append(args, int(s))
		}
	}
	if f.Reason != "" {
		add("state = 2 AND instr(reason, ?) > 0", f.Reason)
	}
	if !f.ReceivedFrom.IsZero() {
		add("received_at >= ?", ms(f.ReceivedFrom))
	}
	if !f.ReceivedTo.IsZero() {
		add("received_at < ?", ms(f.ReceivedTo))
	}
	if f.AfterID > 0 {
		add("id > ?", f.AfterID)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

const summaryColumns = `id, route, key, order_key, state, attempt, received_at, next_at, reason, last_status, last_error`

func scanSummary(sc interface{ Scan(...any) error }) (queue.Summary, error) {
	var s queue.Summary
	var order, reason, lastErr sql.NullString
	var received, next, lastStatus sql.NullInt64
	var state int
	err := sc.Scan(&s.ID, &s.Route, &s.Key, &order, &state, &s.Attempt, &received, &next, &reason, &lastStatus, &lastErr)
	s.OrderKey, s.State, s.Reason, s.LastError = order.String, queue.State(state), reason.String, lastErr.String
	s.ReceivedAt, s.NextAt, s.LastStatus = fromMs(received), fromMs(next), int(lastStatus.Int64)
	return s, err
}

// List implements [queue.Engine].
func (q *Queue) List(ctx context.Context, f queue.Filter) ([]queue.Summary, error) {
	w, args := where(f)
	rows, err := q.read.QueryContext(ctx, `SELECT `+summaryColumns+` FROM idem_queue`+w+` ORDER BY id LIMIT ?`, append(args, f.PageSize())...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: queue list: %w", err)
	}
	defer rows.Close()
	var out []queue.Summary
	for rows.Next() {
		s, err := scanSummary(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Get implements [queue.Engine].
func (q *Queue) Get(ctx context.Context, id int64) (*queue.Summary, []queue.Attempt, error) {
	s, err := scanSummary(q.read.QueryRowContext(ctx, `SELECT `+summaryColumns+` FROM idem_queue WHERE id = ?1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sqlitestore: queue get: %w", err)
	}
	rows, err := q.read.QueryContext(ctx, `SELECT attempt, started_at, latency_us, status, error, body_head, worker
		FROM idem_queue_attempts WHERE event_id = ?1 ORDER BY attempt`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlitestore: queue get: %w", err)
	}
	defer rows.Close()
	var attempts []queue.Attempt
	for rows.Next() {
		var a queue.Attempt
		var started sql.NullInt64
		var latency int64
		if err := rows.Scan(&a.Attempt, &started, &latency, &a.Status, &a.Error, &a.BodyHead, &a.Worker); err != nil {
			return nil, nil, err
		}
		a.Started, a.Latency = fromMs(started), time.Duration(latency)*time.Microsecond
		attempts = append(attempts, a)
	}
	return &s, attempts, rows.Err()
}

// Redrive implements [queue.Engine].
func (q *Queue) Redrive(ctx context.Context, f queue.Filter) (int64, error) {
	if err := queue.ValidateFilter("Redrive", f); err != nil {
		return 0, err
	}
	w, args := where(f)
	return q.f.w.do(ctx, "queue redrive", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		now := q.f.nowMillis()
		res, err := tx.ExecContext(ctx, `UPDATE idem_queue SET state = 0, next_at = ?, since = ?, base = attempt, reason = NULL`+
			w+` AND state <> 1`, append([]any{now, now}, args...)...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// Purge implements [queue.Engine].
func (q *Queue) Purge(ctx context.Context, f queue.Filter) ([]string, error) {
	if err := queue.ValidateFilter("Purge", f); err != nil {
		return nil, err
	}
	w, args := where(f)
	var keys []string
	_, err := q.f.w.do(ctx, "queue purge", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		keys = keys[:0]
		rows, err := tx.QueryContext(ctx, `DELETE FROM idem_queue`+w+` AND state <> 1 RETURNING id, key`, args...)
		if err != nil {
			return 0, err
		}
		var gone []int64
		for rows.Next() {
			var id int64
			var key string
			if err := rows.Scan(&id, &key); err != nil {
				rows.Close()
				return 0, err
			}
			gone, keys = append(gone, id), append(keys, key)
		}
		if err := rows.Close(); err != nil {
			return 0, err
		}
		for _, id := range gone {
			if _, err := tx.ExecContext(ctx, `DELETE FROM idem_queue_attempts WHERE event_id = ?1`, id); err != nil {
				return 0, err
			}
		}
		return int64(len(keys)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: queue purge: %w", err)
	}
	return keys, nil
}

// SetPaused implements [queue.Engine].
func (q *Queue) SetPaused(ctx context.Context, route string, paused bool) error {
	p := 0
	if paused {
		p = 1
	}
	_, err := q.f.w.do(ctx, "queue pause", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO idem_queue_routes (route, paused) VALUES (?1, ?2)
			ON CONFLICT (route) DO UPDATE SET paused = excluded.paused`, route, p)
		return 0, err
	})
	return err
}
