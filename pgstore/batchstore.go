package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/idemhook/idemhook"
)

// The batched calls ([idemhook.BatchStore]). Each op is the statement of
// its single call (Claim's INSERT ... ON CONFLICT with its fence, and the
// compare-and-set UPDATE or DELETE of the others), with the same
// arguments, and the ops of one call go out as one pgx.Batch: one round
// trip and one implicit transaction, so one commit and one WAL flush for
// all of them. (A first use of a statement on a connection adds one round
// trip, in which pgx prepares it.)
//
// Why a pgx.Batch of the single statements rather than one statement over
// unnest'ed arrays: the single statements are what the conformance suite
// and the concurrency argument in prepareSQL were made for, and a batch
// keeps them word for word, so each op keeps its single call's semantics
// by construction. One INSERT ... ON CONFLICT over many rows would fail as
// a whole on two ops of one key ("ON CONFLICT DO UPDATE command cannot
// affect row a second time"), would read every key in one snapshot (the
// second op of a key could not see the first's claim), and would need its
// own proof of the take-over of lapsed rows. The cost of the batch is the
// server parsing nothing (the statement is prepared) and executing N
// statements, a few microseconds each.
//
// The statements run in key order, as the Config.Batch batcher's do, so
// that two batches (or a batch and the batcher) lock the rows they share
// in one order and never deadlock; the ops of one key keep the batch's
// order, so two ops on one key act as two sequential calls. Each op is
// atomic per key; a batch commits as one transaction, but a claim it
// stores is no more visible to others before that commit than a single
// Claim's is before its own.
//
// Errors: an op's error is what its single call would have returned
// (ErrNotOwner, ErrCorruptRecord). When the server rejects a statement (a
// deadlock with a CompleteTx transaction, a lock or statement timeout), it
// rolls the whole batch back, and each op then runs again as a statement
// of its own, with its own outcome: the rare failure costs a round trip
// per op instead of failing the ops that had nothing to do with it. The
// call's own error is for the batch as a whole: an invalid lifetime, a
// context that ended, or a failure of the connection, after which no op's
// outcome is known.

var _ idemhook.BatchStore = (*Store)(nil)

func batchError(name string, n int, err error) error {
	return fmt.Errorf("pgstore: %s batch of %d: %w", name, n, err)
}

// ClaimBatch is [Store.ClaimFenced] for each op, in one pgx.Batch: it sets
// op.Existing to the live record found, or, when the claim was stored,
// op.Fence to its fence.
func (s *Store) ClaimBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return batchError("claim", len(ops), err)
	}
	us, err := micros("claim", lease)
	if err != nil {
		return batchError("claim", len(ops), err)
	}
	all := make([]op, len(ops))
	live := make([]*op, 0, len(ops))
	values := make([][]byte, len(ops))
	for i := range ops {
		bo := &ops[i]
		bo.Existing, bo.Fence, bo.Err = nil, 0, nil
		value, err := encode("claim", bo.Claim)
		if err != nil {
			bo.Err = err
			continue
		}
		values[i] = value
		o := &all[i]
		*o = op{ctx: ctx, key: []byte(bo.Key), sql: s.claimSQL, query: true, fenced: true}
		o.args = []any{o.key, value, us}
		live = append(live, o)
	}
	if err := s.sendBatch(ctx, live); err != nil {
		return batchError("claim", len(ops), err)
	}
	for i := range ops {
		bo, o := &ops[i], &all[i]
		if values[i] == nil {
			continue
		}
		switch {
		case o.err != nil:
			bo.Err = opError("claim", bo.Key, o.err)
		case bytes.Equal(o.value, values[i]):
			bo.Fence = uint64(max(o.fence, 1)) // the claim itself: stored
		default:
			bo.Existing, bo.Err = decode(bo.Key, o.value)
		}
	}
	return nil
}

// sendBatch runs live through the pool as one batch (see runBatch), and
// returns the error that makes every outcome unknown.
func (s *Store) sendBatch(ctx context.Context, live []*op) error {
	if len(live) == 0 {
		return nil
	}
	return runBatch(ctx, s.pool, live)
}

// casBatch runs sql for each op, its arguments made by args from the op's
// key and encoded claim, in one pgx.Batch, and sets each op's error as the
// single call (casResult) would return it.
func (s *Store) casBatch(ctx context.Context, name, sql string, ops []idemhook.BatchOp, args func(bo *idemhook.BatchOp, key, old []byte) ([]any, error)) error {
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return batchError(name, len(ops), err)
	}
	all := make([]op, len(ops))
	live := make([]*op, 0, len(ops))
	for i := range ops {
		bo := &ops[i]
		bo.Err = nil
		old, err := encode(name, bo.Claim)
		if err != nil {
			bo.Err = err
			continue
		}
		o := &all[i]
		*o = op{ctx: ctx, key: []byte(bo.Key), sql: sql}
		if o.args, err = args(bo, o.key, old); err != nil {
			bo.Err = err
			continue
		}
		live = append(live, o)
	}
	if err := s.sendBatch(ctx, live); err != nil {
		return batchError(name, len(ops), err)
	}
	for i := range ops {
		if o := &all[i]; o.sql != "" && o.args != nil {
			ops[i].Err = casResult(name, ops[i].Key, o.n, o.err)
		}
	}
	return nil
}

// CompleteBatch is [Store.Complete] for each op, in one pgx.Batch.
func (s *Store) CompleteBatch(ctx context.Context, ops []idemhook.BatchOp, ttl time.Duration) error {
	us, err := micros("complete", ttl)
	if err != nil && len(ops) > 0 {
		return batchError("complete", len(ops), err)
	}
	return s.casBatch(ctx, "complete", s.completeSQL, ops, func(bo *idemhook.BatchOp, key, old []byte) ([]any, error) {
		value, err := encode("complete", bo.Done)
		if err != nil {
			return nil, err
		}
		return []any{key, old, value, us}, nil
	})
}

// ReleaseBatch is [Store.Release] for each op, in one pgx.Batch.
func (s *Store) ReleaseBatch(ctx context.Context, ops []idemhook.BatchOp) error {
	return s.casBatch(ctx, "release", s.releaseSQL, ops, func(_ *idemhook.BatchOp, key, old []byte) ([]any, error) {
		return []any{key, old}, nil
	})
}

// ExtendBatch is [Store.Extend] for each op, in one pgx.Batch.
func (s *Store) ExtendBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	us, err := micros("extend", lease)
	if err != nil && len(ops) > 0 {
		return batchError("extend", len(ops), err)
	}
	return s.casBatch(ctx, "extend", s.extendSQL, ops, func(_ *idemhook.BatchOp, key, old []byte) ([]any, error) {
		return []any{key, old, us}, nil
	})
}
