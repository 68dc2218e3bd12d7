package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhook/idemhook"
)

// The batched calls ([idemhook.BatchStore]). Every write of the store goes
// through its writer (writer.go), and a batch is one write of the writer:
// the statements of its single calls, one per op, in one transaction, with
// one commit. The writer may commit it together with the single calls
// waiting beside it, as it does any write. So a batch of 1,000 costs one
// commit (the WAL write and the file locks, most of a write's time)
// instead of 1,000. Its transaction holds SQLite's write lock for the
// batch's statements, a few microseconds each.
//
// The ops run in the batch's order, in one transaction, so two ops on one
// key act as two sequential calls. A ClaimBatch reads first, as Claim
// does: the ops whose keys hold a live record (the common case when a
// provider retries a batch) are answered by reads, and only the others go
// to the writer; a batch whose keys are all done writes nothing.
//
// With the claims held in memory (Config.Lock), ClaimBatch, ReleaseBatch
// and ExtendBatch are Claim, Release and Extend per op, which write
// nothing to the file; CompleteBatch is one write of the writer, each op
// as Complete does it (held.go's rules hold for each).
//
// Errors: an op's error is what its single call would have returned
// (ErrNotOwner, ErrCorruptRecord). A statement's error fails the batch's
// transaction as a whole, so it is the call's own error, as is a context
// that ended before the writer took the batch: then nothing of the batch
// was committed.

var _ idemhook.BatchStore = (*Store)(nil)

// item is one op of a batch, encoded, and its outcome.
type item struct {
	key        string
	old, value []byte           // the claim held (Complete, Release, Extend) and the record offered (Claim, Complete)
	found      []byte           // claimMany: the encoding of the live record found; nil when the claim was stored
	existing   *idemhook.Record // claimMany: the live record found, already decoded (claims held in memory)
	n          int64            // completeMany, releaseMany, extendMany: rows changed (0: not the owner)
	err        error
}

// batcher is the part of a claimer that runs many calls of one kind.
type batcher interface {
	// claimMany runs claim for each item, setting found and err.
	claimMany(ctx context.Context, items []*item, lease time.Duration) error
	// completeMany, releaseMany and extendMany set n and err.
	completeMany(ctx context.Context, items []*item, ttl time.Duration) error
	releaseMany(ctx context.Context, items []*item) error
	extendMany(ctx context.Context, items []*item, lease time.Duration) error
}

var (
	_ batcher = (*fileStore)(nil)
	_ batcher = (*heldStore)(nil)
)

func batchError(name string, n int, err error) error {
	return fmt.Errorf("sqlitestore: %s batch of %d: %w", name, n, err)
}

// prepare checks what every op of a batch shares and encodes each op with
// enc, setting the error of those that don't encode. It returns the items
// of the others and, parallel to them, their ops.
func (s *Store) prepare(ctx context.Context, name string, ops []idemhook.BatchOp, lifetime time.Duration, enc func(op *idemhook.BatchOp, it *item) error) ([]*item, []*idemhook.BatchOp, error) {
	if err := s.file.watch.failure(); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, batchError(name, len(ops), err)
	}
	if lifetime != 0 {
		if err := checkLifetime(name, lifetime); err != nil {
			return nil, nil, err
		}
	}
	items := make([]*item, 0, len(ops))
	live := make([]*idemhook.BatchOp, 0, len(ops))
	all := make([]item, len(ops))
	for i := range ops {
		op := &ops[i]
		op.Existing, op.Fence, op.Err = nil, 0, nil
		it := &all[i]
		it.key = op.Key
		if err := enc(op, it); err != nil {
			op.Err = err
			continue
		}
		items, live = append(items, it), append(live, op)
	}
	return items, live, nil
}

// ClaimBatch is [Store.Claim] for each op: reads first, then one write of
// the writer for the ops whose keys hold no live record.
func (s *Store) ClaimBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	if len(ops) == 0 {
		return nil
	}
	items, live, err := s.prepare(ctx, "claim", ops, lease, func(op *idemhook.BatchOp, it *item) (err error) {
		it.value, err = encode("claim", op.Claim)
		return err
	})
	if err != nil {
		return err
	}
	if err := s.mode.(batcher).claimMany(ctx, items, lease); err != nil {
		return batchError("claim", len(ops), err)
	}
	for i, it := range items {
		switch {
		case it.err != nil:
			live[i].Err = it.err
		case it.existing != nil:
			live[i].Existing = it.existing
		case it.found != nil:
			live[i].Existing, live[i].Err = decode(it.key, it.found)
		}
	}
	return nil
}

// casBatch runs many, one of the compare-and-set batches, and sets each
// op's error as the single call (casResult) would return it.
func (s *Store) casBatch(ctx context.Context, name string, ops []idemhook.BatchOp, lifetime time.Duration, enc func(op *idemhook.BatchOp, it *item) error, many func(items []*item) error) error {
	if len(ops) == 0 {
		return nil
	}
	items, live, err := s.prepare(ctx, name, ops, lifetime, func(op *idemhook.BatchOp, it *item) (err error) {
		if it.old, err = encode(name, op.Claim); err != nil {
			return err
		}
		return enc(op, it)
	})
	if err != nil {
		return err
	}
	if err := many(items); err != nil {
		return batchError(name, len(ops), err)
	}
	for i, it := range items {
		live[i].Err = casResult(name, it.key, it.n, it.err)
	}
	return nil
}

func noEnc(*idemhook.BatchOp, *item) error { return nil }

// CompleteBatch is [Store.Complete] for each op, in one write of the
// writer.
func (s *Store) CompleteBatch(ctx context.Context, ops []idemhook.BatchOp, ttl time.Duration) error {
	return s.casBatch(ctx, "complete", ops, ttl, func(op *idemhook.BatchOp, it *item) (err error) {
		it.value, err = encode("complete", op.Done)
		return err
	}, func(items []*item) error { return s.mode.(batcher).completeMany(ctx, items, ttl) })
}

// ReleaseBatch is [Store.Release] for each op, in one write of the writer.
func (s *Store) ReleaseBatch(ctx context.Context, ops []idemhook.BatchOp) error {
	return s.casBatch(ctx, "release", ops, 0, noEnc, func(items []*item) error {
		return s.mode.(batcher).releaseMany(ctx, items)
	})
}

// ExtendBatch is [Store.Extend] for each op, in one write of the writer.
func (s *Store) ExtendBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	return s.casBatch(ctx, "extend", ops, lease, noEnc, func(items []*item) error {
		return s.mode.(batcher).extendMany(ctx, items, lease)
	})
}

// claimMany is claimMany with the claims in the file. As claim, it reads
// first; the items whose keys hold no live record are claimed in one
// write: the claim's insert, and when another record is in the way, the
// read of it in the same transaction.
func (s *fileStore) claimMany(ctx context.Context, items []*item, lease time.Duration) error {
	var absent []*item
	for _, it := range items {
		value, found, err := s.readValue(ctx, it.key)
		switch {
		case err != nil:
			return err
		case found:
			it.found = value
		default:
			absent = append(absent, it)
		}
	}
	if len(absent) == 0 {
		return nil
	}
	_, err := s.w.do(ctx, "claim many", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		claim, get := tx.StmtContext(ctx, s.claimStmt), tx.StmtContext(ctx, s.getStmt)
		for _, it := range absent {
			it.found = nil
			for it.found == nil {
				var one int
				err := claim.QueryRowContext(ctx, it.key, it.value, s.expiry(lease), s.nowMillis()).Scan(&one)
				if err == nil {
					break // stored
				}
				if !errors.Is(err, sql.ErrNoRows) {
					return 0, err
				}
				var existing []byte
				err = get.QueryRowContext(ctx, it.key, s.nowMillis()).Scan(&existing)
				if errors.Is(err, sql.ErrNoRows) {
					continue // expired in between: try again
				}
				if err != nil {
					return 0, err
				}
				it.found = existing
			}
		}
		return 0, nil
	})
	return err
}

// readValue reads the encoding of the live record under key from the
// file, through the read pool; found is false when there is none.
func (s *fileStore) readValue(ctx context.Context, key string) ([]byte, bool, error) {
	if s.rawRead != nil {
		return s.readRaw(ctx, key)
	}
	var value []byte
	err := s.read.QueryRowContext(ctx, key, s.nowMillis()).Scan(&value)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return value, true, nil
}

// readRaw is readValue through the read pool's raw statements (raw.go).
func (s *fileStore) readRaw(ctx context.Context, key string) (value []byte, found bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	err = s.rawRead.with(ctx, func(c *rawConn) error {
		value, found, err = c.blob(rawRead, key, s.nowMillis())
		return err
	})
	return value, found, err
}

// execMany runs stmt for each item, with the arguments args makes at the
// time it runs, in one write of the writer, and sets each item's n.
func (s *fileStore) execMany(ctx context.Context, name string, items []*item, stmt *sql.Stmt, args func(it *item) []any) error {
	return s.execManyRaw(ctx, name, items, stmt, -1, args)
}

// execManyRaw is execMany with, when id is not -1, the raw form of stmt
// (raw.go) for the writer to run instead.
func (s *fileStore) execManyRaw(ctx context.Context, name string, items []*item, stmt *sql.Stmt, id rawID, args func(it *item) []any) error {
	if len(items) == 0 {
		return nil
	}
	var raw rawWrite
	if id >= 0 {
		raw = rawExecMany{id: id, items: items, args: args}
	}
	_, err := s.w.doRaw(ctx, name, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		st := tx.StmtContext(ctx, stmt)
		for _, it := range items {
			it.n = 0
		}
		for _, it := range items {
			res, err := st.ExecContext(ctx, args(it)...)
			if err != nil {
				return 0, err
			}
			if it.n, err = res.RowsAffected(); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}, raw, nil)
	return err
}

// rawExecMany is execMany's write on the raw connection.
type rawExecMany struct {
	id    rawID
	items []*item
	args  func(it *item) []any
}

func (m rawExecMany) runRaw(rc *rawConn) (int64, error) {
	for _, it := range m.items {
		it.n = 0
	}
	for _, it := range m.items {
		n, err := rc.exec(m.id, m.args(it)...)
		if err != nil {
			return 0, err
		}
		it.n = n
	}
	return 0, nil
}

func (s *fileStore) completeMany(ctx context.Context, items []*item, ttl time.Duration) error {
	return s.execManyRaw(ctx, "complete many", items, s.completeStmt, rawComplete, func(it *item) []any {
		return []any{it.key, it.old, it.value, s.expiry(ttl), s.nowMillis()}
	})
}

func (s *fileStore) releaseMany(ctx context.Context, items []*item) error {
	return s.execMany(ctx, "release many", items, s.releaseStmt, func(it *item) []any {
		return []any{it.key, it.old, s.nowMillis()}
	})
}

func (s *fileStore) extendMany(ctx context.Context, items []*item, lease time.Duration) error {
	return s.execMany(ctx, "extend many", items, s.extendStmt, func(it *item) []any {
		return []any{it.key, it.old, s.expiry(lease), s.nowMillis()}
	})
}

// claimMany is claimMany with the claims held in memory: claim per item,
// which writes nothing.
func (h *heldStore) claimMany(ctx context.Context, items []*item, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, it := range items {
		it.existing, it.err = h.claim(ctx, it.key, it.value, lease)
	}
	return nil
}

// completeMany is completeMany with the claims held in memory: each item's
// completion (see heldStore.complete) in one write of the writer.
func (h *heldStore) completeMany(ctx context.Context, items []*item, ttl time.Duration) error {
	cs := make([]*completion, len(items))
	for i, it := range items {
		cs[i] = &completion{h: h, sh: h.shard(it.key), key: it.key, old: it.old, value: it.value, ttl: ttl}
	}
	b := &completionBatch{cs: cs, items: items}
	_, err := h.w.doRaw(ctx, "complete many", b.run, b, func(committed bool) {
		for _, c := range cs {
			c.after(committed)
		}
	})
	return err
}

// completionBatch is the write of a held CompleteBatch: each item's
// completion, setting its n.
type completionBatch struct {
	cs    []*completion
	items []*item
}

func (b *completionBatch) run(ctx context.Context, tx *sql.Tx) (int64, error) {
	for i, c := range b.cs {
		b.items[i].n = 0
		n, err := c.run(ctx, tx)
		if err != nil {
			return 0, err
		}
		b.items[i].n = n
	}
	return 0, nil
}

// runRaw is run on the raw connection.
func (b *completionBatch) runRaw(rc *rawConn) (int64, error) {
	for i, c := range b.cs {
		b.items[i].n = 0
		n, err := c.runRaw(rc)
		if err != nil {
			return 0, err
		}
		b.items[i].n = n
	}
	return 0, nil
}

// releaseMany and extendMany are release and extend per item, in memory.
func (h *heldStore) releaseMany(ctx context.Context, items []*item) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, it := range items {
		it.n, it.err = heldOutcome(h.release(ctx, it.key, it.old))
	}
	return nil
}

func (h *heldStore) extendMany(ctx context.Context, items []*item, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, it := range items {
		it.n, it.err = heldOutcome(h.extend(ctx, it.key, it.old, lease))
	}
	return nil
}

// heldOutcome turns the error of a held release or extend into an item's
// outcome: 1 row when it acted, 0 when it found no claim of the owner's.
func heldOutcome(err error) (int64, error) {
	switch {
	case err == nil:
		return 1, nil
	case errors.Is(err, idemhook.ErrNotOwner):
		return 0, nil
	}
	return 0, err
}
