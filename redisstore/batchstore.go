package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// The batched calls ([idemhook.BatchStore]). Each op is the command its
// single call sends (SET NX GET PX for a claim, the compare-and-set script
// for the others, on the same key, with the same arguments), and the ops
// of one call go out as one pipeline: go-redis's Pipeline, rueidis's
// DoMulti. A Cluster client splits a pipeline by node and sends the parts
// at once, so a batch costs one round trip per master it touches, whatever
// the slots of its keys. These calls bypass the pipelines of batch.go (a
// batch is already one), so Config.Unbatched changes nothing for them.
// Two more can follow, each one pipeline too: the
// EVAL of the scripts a server had not cached (NOSCRIPT, once per script
// and server), and with Config.WaitReplicas the release of the claims the
// replicas did not acknowledge.
//
// Redis runs a connection's commands in the order sent, and the ops of one
// key go to one node, so two ops on one key act as two sequential calls in
// the batch's order. Each op is atomic on its own, as the single call is;
// a batch is not atomic across keys.
//
// With Config.WaitReplicas (or WaitAOF) the pipeline of a ClaimBatch or
// CompleteBatch ends with one WAIT, whose answer covers every write before
// it on the connection; each op that wrote is then judged by that answer
// as its single call would be (a short count is the op's error wrapping
// ErrReplicasShort, and the claims it covers are released, in one more
// pipeline).
//
// Errors: an op's error is what its single call would have returned (a
// reply error of its command, ErrNotOwner, ErrCorruptRecord). The call's
// own error is for the batch as a whole: an invalid lifetime, a context
// that ended before anything was sent, or no op reaching Redis (every op
// failed with a network or context error). When only some failed that
// way (one node of a Cluster down), those ops carry the error and the
// others their results.

var _ idemhook.BatchStore = (*Store)(nil)

// multiReply is the outcome of one command of a batch.
type multiReply struct {
	val   []byte // setNXGet: the value the key held
	found bool   // setNXGet: the key held a value (and still does)
	n     int64  // eval: the script's answer
	err   error  // the command's error, or the transport's
	// pipe is the pipeline that carried the command (0, or 1 for a
	// script resent with EVAL), whose WAIT's answer is acks[pipe].
	pipe int
}

// multiResult is the outcome of a batch: a reply per command and, when
// the batch waited for replicas, the answer of each pipeline's WAIT.
type multiResult struct {
	replies []multiReply
	acks    [2]acks
}

// batchConn is the part of a conn that sends many commands at once.
type batchConn interface {
	// setNXGetMany runs SET key val NX GET PX ms for each key, as one
	// pipeline (per node), followed by w's WAIT when w is not nil.
	setNXGetMany(ctx context.Context, keys []string, vals [][]byte, ms int64, w *waiting) multiResult
	// evalMany runs sc for each key with its args, as one pipeline (per
	// node), followed by w's WAIT when w is not nil; the scripts a server
	// had not cached are sent again with EVAL, in a second pipeline.
	evalMany(ctx context.Context, sc *script, keys []string, args [][]any, w *waiting) multiResult
	// isReply reports whether err is an error Redis answered a command
	// with (the command reached it), not one of the network or context.
	isReply(err error) bool
}

// batchFailure returns the error every reply of res failed with when none
// reached Redis, and nil otherwise.
func batchFailure(bc batchConn, res multiResult) error {
	if len(res.replies) == 0 {
		return nil
	}
	for _, r := range res.replies {
		if r.err == nil || bc.isReply(r.err) {
			return nil
		}
	}
	return res.replies[0].err
}

func batchError(op string, n int, err error) error {
	return fmt.Errorf("redisstore: %s batch of %d: %w", op, n, err)
}

// ackCheck judges the WAIT answers of a batch once per pipeline.
type ackCheck struct {
	s    *Store
	res  *multiResult
	done [2]bool
	errs [2]error
}

func (a *ackCheck) err(ctx context.Context, pipe int) error {
	if !a.done[pipe] {
		a.done[pipe], a.errs[pipe] = true, a.s.checkAcks(ctx, a.res.acks[pipe])
	}
	return a.errs[pipe]
}

// ClaimBatch is [Store.Claim] for each op, in one pipeline (one per
// master on a Cluster): SET NX GET PX on each op's key. It sets op.Existing
// to the record found, or leaves it nil when the claim was stored.
func (s *Store) ClaimBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return batchError("claim", len(ops), err)
	}
	ms, err := millis("lease", lease)
	if err != nil {
		return batchError("claim", len(ops), err)
	}
	bc := s.conn
	idx := make([]int, 0, len(ops))
	keys := make([]string, 0, len(ops))
	vals := make([][]byte, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		op.Existing, op.Fence, op.Err = nil, 0, nil
		rkey := s.Key(op.Key)
		val, err := op.Claim.MarshalBinary()
		if err != nil {
			op.Err = opError("claim", rkey, err)
			continue
		}
		idx, keys, vals = append(idx, i), append(keys, rkey), append(vals, val)
	}
	if len(keys) == 0 {
		return nil
	}
	res := bc.setNXGetMany(ctx, keys, vals, ms, s.wait)
	if err := batchFailure(bc, res); err != nil {
		return batchError("claim", len(ops), err)
	}
	ac := ackCheck{s: s, res: &res}
	var short []int // the replies of claims stored without the acknowledgements asked
	var shortErr []error
	for j, r := range res.replies {
		op := &ops[idx[j]]
		switch {
		case r.err != nil:
			err := r.err
			if strings.Contains(err.Error(), "ERR syntax error") {
				err = fmt.Errorf("%w (SET with both NX and GET needs Redis 7.0 or later)", err)
			}
			op.Err = opError("claim", keys[j], err)
		case !r.found:
			// Stored. Nothing written elsewhere is judged by the WAIT.
			if s.wait != nil {
				if err := ac.err(ctx, r.pipe); err != nil {
					short, shortErr = append(short, j), append(shortErr, err)
				}
			}
		default:
			rec := new(idemhook.Record)
			if err := rec.UnmarshalBinary(r.val); err != nil {
				op.Err = opError("claim", keys[j], err)
				continue
			}
			op.Existing = rec
		}
	}
	if len(short) > 0 {
		// As Claim's unclaim: release the claims the replicas don't have,
		// all in one pipeline, and say what became of each.
		rkeys := make([]string, len(short))
		args := make([][]any, len(short))
		for k, j := range short {
			rkeys[k], args[k] = keys[j], []any{vals[j]}
		}
		rel := bc.evalMany(ctx, releaseScript, rkeys, args, nil)
		for k, j := range short {
			err := fmt.Errorf("%w; the claim was released", shortErr[k])
			if rerr := rel.replies[k].err; rerr != nil {
				err = fmt.Errorf("%w; releasing the claim failed too (%v), so it stays until its lease lapses", shortErr[k], rerr)
			}
			ops[idx[j]].Err = opError("claim", keys[j], err)
		}
	}
	return nil
}

// casOps encodes the ops of a compare-and-set batch: the Redis key of each
// op that encoded, with its index and the script's arguments. args makes
// an op's arguments from its encoded claim.
func (s *Store) casOps(name string, ops []idemhook.BatchOp, args func(op *idemhook.BatchOp, cv []byte) ([]any, error)) (idx []int, keys []string, argv [][]any) {
	idx = make([]int, 0, len(ops))
	keys = make([]string, 0, len(ops))
	argv = make([][]any, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		op.Err = nil
		rkey := s.Key(op.Key)
		cv, err := op.Claim.MarshalBinary()
		if err != nil {
			op.Err = opError(name, rkey, err)
			continue
		}
		a, err := args(op, cv)
		if err != nil {
			op.Err = opError(name, rkey, err)
			continue
		}
		idx, keys, argv = append(idx, i), append(keys, rkey), append(argv, a)
	}
	return idx, keys, argv
}

// runCASBatch runs sc for each op in one pipeline (per master) and sets
// each op's error as runCAS would return it. w, when not nil, is judged
// for each op that acted, with the error wrapped by wrapShort.
func (s *Store) runCASBatch(ctx context.Context, name string, sc *script, ops []idemhook.BatchOp, idx []int, keys []string, argv [][]any, w *waiting, wrapShort func(error) error) error {
	if len(keys) == 0 {
		return nil
	}
	bc := s.conn
	res := bc.evalMany(ctx, sc, keys, argv, w)
	if err := batchFailure(bc, res); err != nil {
		return batchError(name, len(ops), err)
	}
	ac := ackCheck{s: s, res: &res}
	for j, r := range res.replies {
		op := &ops[idx[j]]
		switch {
		case r.err != nil:
			op.Err = opError(name, keys[j], r.err)
		case r.n != 1:
			op.Err = opError(name, keys[j], idemhook.ErrNotOwner)
		case w != nil:
			if err := ac.err(ctx, r.pipe); err != nil {
				op.Err = opError(name, keys[j], wrapShort(err))
			}
		}
	}
	return nil
}

// CompleteBatch is [Store.Complete] for each op, in one pipeline (one per
// master on a Cluster): the complete script on each op's key.
func (s *Store) CompleteBatch(ctx context.Context, ops []idemhook.BatchOp, ttl time.Duration) error {
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return batchError("complete", len(ops), err)
	}
	ms, err := millis("ttl", ttl)
	if err != nil {
		return batchError("complete", len(ops), err)
	}
	idx, keys, argv := s.casOps("complete", ops, func(op *idemhook.BatchOp, cv []byte) ([]any, error) {
		dv, err := op.Done.MarshalBinary()
		if err != nil {
			return nil, err
		}
		return []any{cv, dv, ms}, nil
	})
	return s.runCASBatch(ctx, "complete", completeScript, ops, idx, keys, argv, s.wait, func(err error) error {
		return fmt.Errorf("%w; the record is written on the master, but a failover now may lose it", err)
	})
}

// ReleaseBatch is [Store.Release] for each op, in one pipeline (one per
// master on a Cluster).
func (s *Store) ReleaseBatch(ctx context.Context, ops []idemhook.BatchOp) error {
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return batchError("release", len(ops), err)
	}
	idx, keys, argv := s.casOps("release", ops, func(_ *idemhook.BatchOp, cv []byte) ([]any, error) {
		return []any{cv}, nil
	})
	return s.runCASBatch(ctx, "release", releaseScript, ops, idx, keys, argv, nil, nil)
}

// ExtendBatch is [Store.Extend] for each op, in one pipeline (one per
// master on a Cluster).
func (s *Store) ExtendBatch(ctx context.Context, ops []idemhook.BatchOp, lease time.Duration) error {
	if len(ops) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return batchError("extend", len(ops), err)
	}
	ms, err := millis("lease", lease)
	if err != nil {
		return batchError("extend", len(ops), err)
	}
	idx, keys, argv := s.casOps("extend", ops, func(_ *idemhook.BatchOp, cv []byte) ([]any, error) {
		return []any{cv, ms}, nil
	})
	return s.runCASBatch(ctx, "extend", extendScript, ops, idx, keys, argv, nil, nil)
}
