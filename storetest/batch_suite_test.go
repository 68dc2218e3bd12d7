package storetest_test

import (
	"context"
	"time"

	"github.com/idemhook/idemhook"
)

// loopBatch is a BatchStore made of the single calls of the store it
// wraps, one per op: the reference the batch subtests hold the stores'
// batches to. A nil hook field calls through; a set one replaces that op.
type loopBatch struct {
	idemhook.Store
	claimOp    func(ctx context.Context, op *idemhook.BatchOp, lease time.Duration) error
	completeOp func(ctx context.Context, op *idemhook.BatchOp, ttl time.Duration) error
}

var _ idemhook.BatchStore = (*loopBatch)(nil)

func (l *loopBatch) ClaimBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range ops {
		op := &ops[i]
		if l.claimOp != nil {
			if err := l.claimOp(ctx, op, lease); err != nil {
				return err
			}
			continue
		}
		op.Existing, op.Err = l.Claim(ctx, op.Key, op.Claim, lease)
	}
	return nil
}

func (l *loopBatch) CompleteBatch(ctx context.Context, ops []idemhook.BatchOp, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range ops {
		op := &ops[i]
		if l.completeOp != nil {
			if err := l.completeOp(ctx, op, ttl); err != nil {
				return err
			}
			continue
		}
		op.Err = l.Complete(ctx, op.Key, op.Claim, op.Done, ttl)
	}
	return nil
}

func (l *loopBatch) ReleaseBatch(ctx context.Context, ops []idemhook.BatchOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range ops {
		ops[i].Err = l.Release(ctx, ops[i].Key, ops[i].Claim)
	}
	return nil
}

func (l *loopBatch) ExtendBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range ops {
		ops[i].Err = l.Extend(ctx, ops[i].Key, ops[i].Claim, lease)
	}
	return nil
}

func init() {
	// Stores whose batches are broken in one way each: the batch subtests
	// must catch them (TestSuiteCatchesBrokenStores).
	mutants["batch claim that overwrites"] = struct {
		wantFail []string
		wrap     func(st idemhook.Store) idemhook.Store
	}{[]string{"Batch/ClaimMixed", "Batch/Concurrent", "Batch/Duplicates"}, func(st idemhook.Store) idemhook.Store {
		l := &loopBatch{Store: st}
		l.claimOp = func(ctx context.Context, op *idemhook.BatchOp, lease time.Duration) error {
			st.Delete(ctx, op.Key)
			op.Existing, op.Err = st.Claim(ctx, op.Key, op.Claim, lease)
			return nil
		}
		return l
	}}
	mutants["batch complete without owner check"] = struct {
		wantFail []string
		wrap     func(st idemhook.Store) idemhook.Store
	}{[]string{"Batch/CompleteOwners", "Batch/Duplicates"}, func(st idemhook.Store) idemhook.Store {
		l := &loopBatch{Store: st}
		l.completeOp = func(ctx context.Context, op *idemhook.BatchOp, ttl time.Duration) error {
			st.Delete(ctx, op.Key)
			if _, err := st.Claim(ctx, op.Key, op.Claim, time.Hour); err != nil {
				return err
			}
			op.Err = st.Complete(ctx, op.Key, op.Claim, op.Done, ttl)
			return nil
		}
		return l
	}}
	mutants["batch claim that loses the existing record"] = struct {
		wantFail []string
		wrap     func(st idemhook.Store) idemhook.Store
	}{[]string{"Batch/ClaimMixed", "Batch/Large", "Batch/Duplicates", "Batch/Concurrent"}, func(st idemhook.Store) idemhook.Store {
		l := &loopBatch{Store: st}
		l.claimOp = func(ctx context.Context, op *idemhook.BatchOp, lease time.Duration) error {
			_, op.Err = st.Claim(ctx, op.Key, op.Claim, lease)
			return nil
		}
		return l
	}}
	mutants["batch complete that ignores the TTL"] = struct {
		wantFail []string
		wrap     func(st idemhook.Store) idemhook.Store
	}{[]string{"Expiry/BatchLease"}, func(st idemhook.Store) idemhook.Store {
		l := &loopBatch{Store: st}
		l.completeOp = func(ctx context.Context, op *idemhook.BatchOp, ttl time.Duration) error {
			op.Err = st.Complete(ctx, op.Key, op.Claim, op.Done, 1000*ttl)
			return nil
		}
		return l
	}}
}
