package storetest

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// The batch part of the suite, for a store that implements
// [idemhook.BatchStore]; for any other store its subtests skip.
//
// Each op of a batch must do what the single call of the same name does for
// its key, so the checks are those of the single calls, per op, with ops of
// different outcomes mixed in one batch. Two ops of one batch on the same
// key are two sequential calls, in the order of the batch: the second
// ClaimBatch op finds the first's claim (Existing is that claim), a second
// CompleteBatch or ReleaseBatch op with the same claim finds it gone
// (ErrNotOwner), a second ExtendBatch op extends it again (nil). A store
// may run the ops of different keys in any order, and atomically per key
// only.

// batchLarge is the size of the batches that stand for the middleware's
// largest: a body of 1,000 items.
const batchLarge = 1000

// batchTests are the batch subtests that run in parallel with the rest of
// the suite.
func (s *suite) batchTests() []struct {
	name string
	fn   func(t *testing.T)
} {
	return []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Batch/Empty", s.batchEmpty},
		{"Batch/ClaimAbsent", s.batchClaimAbsent},
		{"Batch/ClaimMixed", s.batchClaimMixed},
		{"Batch/Large", s.batchLarge},
		{"Batch/CompleteOwners", s.batchCompleteOwners},
		{"Batch/ReleaseOwners", s.batchReleaseOwners},
		{"Batch/ExtendOwners", s.batchExtendOwners},
		{"Batch/Duplicates", s.batchDuplicates},
		{"Batch/Concurrent", s.batchConcurrent},
		{"Batch/CanceledContext", s.batchCanceled},
		{"Batch/Fence", s.batchFence},
	}
}

// batching returns st as a BatchStore, or skips t when it is not one.
func batching(t *testing.T, st idemhook.Store) idemhook.BatchStore {
	t.Helper()
	bs, ok := st.(idemhook.BatchStore)
	if !ok {
		t.Skipf("%T does not implement idemhook.BatchStore (the middleware makes one call per item)", st)
	}
	return bs
}

// claimOps returns one op per key, each with a fresh claim.
func claimOps(keys ...string) []idemhook.BatchOp {
	ops := make([]idemhook.BatchOp, len(keys))
	for i, k := range keys {
		ops[i] = idemhook.BatchOp{Key: k, Claim: newClaim()}
	}
	return ops
}

func newKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = newKey()
	}
	return keys
}

// mustClaimBatch claims every op's key, all of which must be absent.
func mustClaimBatch(t testing.TB, st idemhook.BatchStore, ops []idemhook.BatchOp, lease time.Duration) {
	t.Helper()
	if err := st.ClaimBatch(t.Context(), ops, lease); err != nil {
		t.Fatalf("ClaimBatch of %d absent keys: %v", len(ops), err)
	}
	for i, op := range ops {
		if op.Err != nil || op.Existing != nil {
			t.Fatalf("ClaimBatch op %d (%q) on an absent key: got existing %s, err %v; want the claim stored", i, op.Key, Describe(op.Existing), op.Err)
		}
	}
}

// resetOps clears what the store set in ops, so that they may be sent
// again.
func resetOps(ops []idemhook.BatchOp) {
	for i := range ops {
		ops[i].Existing, ops[i].Fence, ops[i].Err = nil, 0, nil
	}
}

// wantOpErr fails t unless op's error is want: nil, or one errors.Is finds.
func wantOpErr(t testing.TB, what string, i int, op idemhook.BatchOp, want error) {
	t.Helper()
	switch {
	case want == nil && op.Err != nil:
		t.Fatalf("%s op %d (%q): got error %v, want nil", what, i, op.Key, op.Err)
	case want != nil && !errors.Is(op.Err, want):
		t.Fatalf("%s op %d (%q): got error %v, want %v", what, i, op.Key, op.Err, want)
	}
}

func (s *suite) batchEmpty(t *testing.T) {
	st := batching(t, s.store(t))
	ctx := t.Context()
	for _, ops := range [][]idemhook.BatchOp{nil, {}} {
		if err := st.ClaimBatch(ctx, ops, longLease); err != nil {
			t.Fatalf("ClaimBatch of %d ops: %v", len(ops), err)
		}
		if err := st.CompleteBatch(ctx, ops, longLease); err != nil {
			t.Fatalf("CompleteBatch of %d ops: %v", len(ops), err)
		}
		if err := st.ReleaseBatch(ctx, ops); err != nil {
			t.Fatalf("ReleaseBatch of %d ops: %v", len(ops), err)
		}
		if err := st.ExtendBatch(ctx, ops, longLease); err != nil {
			t.Fatalf("ExtendBatch of %d ops: %v", len(ops), err)
		}
	}
}

func (s *suite) batchClaimAbsent(t *testing.T) {
	st := batching(t, s.store(t))
	ops := claimOps(newKeys(50)...)
	mustClaimBatch(t, st, ops, longLease)
	for _, op := range ops {
		wantRecord(t, st, op.Key, op.Claim)
		// A single call sees the batch's claim, and the claim is owned.
		wantClaimReturns(t, st, "Claim after ClaimBatch", op.Key, op.Claim)
	}
	for _, op := range ops[:5] {
		s.mustComplete(t, st, op.Key, op.Claim, newDone(op.Claim), longLease)
	}
}

// batchClaimMixed claims, in one batch, keys that are absent, pending,
// completed and (with Harness.Corrupt) corrupt, interleaved.
func (s *suite) batchClaimMixed(t *testing.T) {
	st := batching(t, s.store(t))
	const each = 10
	type want struct {
		existing *idemhook.Record // nil: the claim is stored
		err      error
	}
	var ops []idemhook.BatchOp
	var wants []want
	for range each {
		// absent
		ops = append(ops, idemhook.BatchOp{Key: newKey(), Claim: newClaim()})
		wants = append(wants, want{})
		// pending
		key, first := newKey(), newClaim()
		s.mustClaim(t, st, key, first, longLease)
		ops = append(ops, idemhook.BatchOp{Key: key, Claim: newClaim()})
		wants = append(wants, want{existing: first})
		// completed
		key, claim := newKey(), newClaim()
		done := newDone(claim)
		s.mustClaim(t, st, key, claim, longLease)
		s.mustComplete(t, st, key, claim, done, longLease)
		ops = append(ops, idemhook.BatchOp{Key: key, Claim: newClaim()})
		wants = append(wants, want{existing: done})
		// corrupt
		if s.h.Corrupt != nil {
			key := newKey()
			s.h.Corrupt(t, st, key)
			ops = append(ops, idemhook.BatchOp{Key: key, Claim: newClaim()})
			wants = append(wants, want{err: idemhook.ErrCorruptRecord})
		}
	}
	if s.h.Corrupt == nil {
		t.Log("Harness.Corrupt is nil: no corrupt record in the batch")
	}
	if err := st.ClaimBatch(t.Context(), ops, longLease); err != nil {
		t.Fatalf("ClaimBatch: %v", err)
	}
	for i, op := range ops {
		w := wants[i]
		wantOpErr(t, "ClaimBatch", i, op, w.err)
		if w.err != nil {
			if op.Existing != nil {
				t.Fatalf("ClaimBatch op %d over a corrupt record: got existing %s with error %v; want none", i, Describe(op.Existing), op.Err)
			}
			continue
		}
		if d := Diff(op.Existing, w.existing); d != "" {
			t.Fatalf("ClaimBatch op %d (%q): existing mismatch:\n%s", i, op.Key, d)
		}
		if w.existing != nil && op.Fence != 0 {
			t.Fatalf("ClaimBatch op %d (%q) found a record and has fence %d; want 0", i, op.Key, op.Fence)
		}
		want := w.existing
		if want == nil {
			want = op.Claim
		}
		wantRecord(t, st, op.Key, want)
	}
}

// batchLarge claims and completes a batch of the middleware's largest size,
// and claims it again: every op then finds its completed record.
func (s *suite) batchLarge(t *testing.T) {
	st := batching(t, s.store(t))
	ops := claimOps(newKeys(batchLarge)...)
	mustClaimBatch(t, st, ops, longLease)
	for i := range ops {
		ops[i].Done = newDone(ops[i].Claim)
	}
	if err := st.CompleteBatch(t.Context(), ops, longLease); err != nil {
		t.Fatalf("CompleteBatch of %d ops: %v", len(ops), err)
	}
	for i, op := range ops {
		wantOpErr(t, "CompleteBatch", i, op, nil)
	}
	again := claimOps(make([]string, len(ops))...)
	for i := range again {
		again[i].Key = ops[i].Key
	}
	if err := st.ClaimBatch(t.Context(), again, longLease); err != nil {
		t.Fatalf("second ClaimBatch of %d ops: %v", len(ops), err)
	}
	for i, op := range again {
		wantOpErr(t, "second ClaimBatch", i, op, nil)
		if d := Diff(op.Existing, ops[i].Done); d != "" {
			t.Fatalf("second ClaimBatch op %d (%q) must find the completed record:\n%s", i, op.Key, d)
		}
	}
	for _, i := range []int{0, len(ops) / 2, len(ops) - 1} {
		wantRecord(t, st, ops[i].Key, ops[i].Done)
	}
}

// ownerOps claims n keys and returns ops for them in which every third op
// holds another claim than the key's (a wrong token, or the claim's fields
// with another token), and every fifth op names a key never claimed. wrong
// reports which ops must get ErrNotOwner; held is each key's real claim
// (nil for a missing key).
func (s *suite) ownerOps(t *testing.T, st idemhook.BatchStore, n int) (ops []idemhook.BatchOp, wrong []bool, held []*idemhook.Record) {
	t.Helper()
	claimed := claimOps(newKeys(n)...)
	mustClaimBatch(t, st, claimed, longLease)
	ops = make([]idemhook.BatchOp, n)
	wrong = make([]bool, n)
	held = make([]*idemhook.Record, n)
	for i, c := range claimed {
		ops[i] = idemhook.BatchOp{Key: c.Key, Claim: c.Claim}
		held[i] = c.Claim
		switch {
		case i%5 == 4:
			ops[i].Key = newKey() // never claimed
			held[i] = nil
			wrong[i] = true
		case i%3 == 1:
			impostor := *c.Claim
			impostor.Token = newClaim().Token
			ops[i].Claim = &impostor
			wrong[i] = true
		case i%3 == 2:
			ops[i].Claim = newClaim()
			wrong[i] = true
		}
	}
	return ops, wrong, held
}

// wantOwners checks the ops of a batch call named name, made with the
// claims ownerOps gave: each op of a wrong owner failed with ErrNotOwner and
// left its key as it was (held), and each of the owner succeeded, which
// owner then checks further.
func wantOwners(t *testing.T, st idemhook.Store, name string, ops []idemhook.BatchOp, wrong []bool, held []*idemhook.Record, owner func(idemhook.BatchOp)) {
	t.Helper()
	for i, op := range ops {
		if wrong[i] {
			wantOpErr(t, name, i, op, idemhook.ErrNotOwner)
			wantRecord(t, st, op.Key, held[i])
			continue
		}
		wantOpErr(t, name, i, op, nil)
		owner(op)
	}
}

func (s *suite) batchCompleteOwners(t *testing.T) {
	st := batching(t, s.store(t))
	ops, wrong, held := s.ownerOps(t, st, 30)
	for i := range ops {
		ops[i].Done = newDone(ops[i].Claim)
	}
	if err := st.CompleteBatch(t.Context(), ops, longLease); err != nil {
		t.Fatalf("CompleteBatch: %v", err)
	}
	wantOwners(t, st, "CompleteBatch", ops, wrong, held, func(op idemhook.BatchOp) {
		wantRecord(t, st, op.Key, op.Done)
	})
	// Completed: a second CompleteBatch by the owners finds no claim.
	resetOps(ops)
	if err := st.CompleteBatch(t.Context(), ops, longLease); err != nil {
		t.Fatalf("second CompleteBatch: %v", err)
	}
	for i, op := range ops {
		wantOpErr(t, "second CompleteBatch", i, op, idemhook.ErrNotOwner)
	}
}

func (s *suite) batchReleaseOwners(t *testing.T) {
	st := batching(t, s.store(t))
	ops, wrong, held := s.ownerOps(t, st, 30)
	if err := st.ReleaseBatch(t.Context(), ops); err != nil {
		t.Fatalf("ReleaseBatch: %v", err)
	}
	wantOwners(t, st, "ReleaseBatch", ops, wrong, held, func(op idemhook.BatchOp) {
		wantRecord(t, st, op.Key, nil)
		// Released: the key may be claimed afresh.
		s.mustClaim(t, st, op.Key, newClaim(), longLease)
	})
	// A completed claim can't be released.
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	after := []idemhook.BatchOp{{Key: key, Claim: claim}}
	if err := st.ReleaseBatch(t.Context(), after); err != nil {
		t.Fatalf("ReleaseBatch after Complete: %v", err)
	}
	wantOpErr(t, "ReleaseBatch after Complete", 0, after[0], idemhook.ErrNotOwner)
	wantRecord(t, st, key, done)
}

func (s *suite) batchExtendOwners(t *testing.T) {
	st := batching(t, s.store(t))
	ops, wrong, held := s.ownerOps(t, st, 30)
	if err := st.ExtendBatch(t.Context(), ops, longLease); err != nil {
		t.Fatalf("ExtendBatch: %v", err)
	}
	wantOwners(t, st, "ExtendBatch", ops, wrong, held, func(op idemhook.BatchOp) {
		// Still the owner's claim, and still completable.
		wantRecord(t, st, op.Key, op.Claim)
		s.mustComplete(t, st, op.Key, op.Claim, newDone(op.Claim), longLease)
	})
	// A completed record is no claim to extend.
	resetOps(ops)
	if err := st.ExtendBatch(t.Context(), ops, longLease); err != nil {
		t.Fatalf("ExtendBatch after Complete: %v", err)
	}
	for i, op := range ops {
		wantOpErr(t, "ExtendBatch after Complete", i, op, idemhook.ErrNotOwner)
	}
}

// batchDuplicates sends two ops on one key in one batch: they act as two
// sequential calls in the batch's order.
func (s *suite) batchDuplicates(t *testing.T) {
	st := batching(t, s.store(t))
	ctx := t.Context()
	other := newKey()
	key := newKey()
	first, second := newClaim(), newClaim()
	ops := []idemhook.BatchOp{
		{Key: key, Claim: first},
		{Key: other, Claim: newClaim()},
		{Key: key, Claim: second},
	}
	if err := st.ClaimBatch(ctx, ops, longLease); err != nil {
		t.Fatalf("ClaimBatch: %v", err)
	}
	for i, op := range ops {
		wantOpErr(t, "ClaimBatch", i, op, nil)
	}
	if ops[0].Existing != nil || ops[1].Existing != nil {
		t.Fatalf("ClaimBatch: the first op of each key must store its claim; got existing %s and %s", Describe(ops[0].Existing), Describe(ops[1].Existing))
	}
	if d := Diff(ops[2].Existing, first); d != "" {
		t.Fatalf("ClaimBatch: the second op on a key must find the first op's claim:\n%s", d)
	}
	if ops[2].Fence != 0 {
		t.Fatalf("ClaimBatch: the second op on a key has fence %d; want 0", ops[2].Fence)
	}
	wantRecord(t, st, key, first)

	// Extend twice: both hold the claim.
	ext := []idemhook.BatchOp{{Key: key, Claim: first}, {Key: key, Claim: first}}
	if err := st.ExtendBatch(ctx, ext, longLease); err != nil {
		t.Fatalf("ExtendBatch: %v", err)
	}
	for i, op := range ext {
		wantOpErr(t, "ExtendBatch", i, op, nil)
	}

	// Complete twice: the second finds the record, not the claim; a
	// Complete with the loser's claim fails whatever its place.
	d1, d2 := newDone(first), newDone(first)
	d2.Status = 299
	comp := []idemhook.BatchOp{
		{Key: key, Claim: second, Done: newDone(second)},
		{Key: key, Claim: first, Done: d1},
		{Key: key, Claim: first, Done: d2},
	}
	if err := st.CompleteBatch(ctx, comp, longLease); err != nil {
		t.Fatalf("CompleteBatch: %v", err)
	}
	wantOpErr(t, "CompleteBatch", 0, comp[0], idemhook.ErrNotOwner)
	wantOpErr(t, "CompleteBatch", 1, comp[1], nil)
	wantOpErr(t, "CompleteBatch", 2, comp[2], idemhook.ErrNotOwner)
	wantRecord(t, st, key, d1)

	// Release twice: the second finds no claim.
	rel := []idemhook.BatchOp{{Key: other, Claim: ops[1].Claim}, {Key: other, Claim: ops[1].Claim}}
	if err := st.ReleaseBatch(ctx, rel); err != nil {
		t.Fatalf("ReleaseBatch: %v", err)
	}
	wantOpErr(t, "ReleaseBatch", 0, rel[0], nil)
	wantOpErr(t, "ReleaseBatch", 1, rel[1], idemhook.ErrNotOwner)
	wantRecord(t, st, other, nil)
}

// batchConcurrent has racers batches claim overlapping keys at once, each
// in an order of its own (a store that locks keys in the batch's order
// would deadlock here). Every key gets exactly one winner, and every loser
// is shown the winner's claim.
func (s *suite) batchConcurrent(t *testing.T) {
	st := batching(t, s.store(t))
	const batches, keysPer, shared = 8, 60, 40
	common := newKeys(shared)
	all := make([][]idemhook.BatchOp, batches)
	for b := range all {
		keys := append(newKeys(keysPer-shared), common...)
		mrand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		all[b] = claimOps(keys...)
	}
	errs := make([]error, batches)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for b := range all {
		wg.Go(func() {
			<-start
			errs[b] = st.ClaimBatch(t.Context(), all[b], longLease)
		})
	}
	close(start)
	wg.Wait()
	winners := map[string]*idemhook.Record{}
	wins := map[string]int{}
	for b, ops := range all {
		if errs[b] != nil {
			t.Fatalf("ClaimBatch %d: %v", b, errs[b])
		}
		for i, op := range ops {
			wantOpErr(t, fmt.Sprintf("ClaimBatch %d", b), i, op, nil)
			if op.Existing == nil {
				wins[op.Key]++
				winners[op.Key] = op.Claim
			}
		}
	}
	for b, ops := range all {
		for _, op := range ops {
			if n := wins[op.Key]; n != 1 {
				t.Fatalf("key %q claimed by %d batches at once: %d won, want exactly 1", op.Key, batches, n)
			}
			if op.Existing != nil {
				if d := Diff(op.Existing, winners[op.Key]); d != "" {
					t.Fatalf("batch %d lost key %q but was not shown the winner's claim:\n%s", b, op.Key, d)
				}
			}
		}
	}
	for _, key := range common {
		wantRecord(t, st, key, winners[key])
	}
	perBatch := make([]int, batches)
	for b, ops := range all {
		for _, op := range ops {
			if op.Existing == nil && winners[op.Key] == op.Claim {
				perBatch[b]++
			}
		}
	}
	t.Logf("%d batches of %d keys, %d keys in all of them: %d keys, one winner each; keys won per batch %v", batches, keysPer, shared, len(wins), perBatch)
}

func (s *suite) batchCanceled(t *testing.T) {
	st := batching(t, s.store(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	held := claimOps(newKeys(3)...)
	mustClaimBatch(t, st, held, longLease)
	wantCanceled := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a canceled context: got error %v, want one wrapping context.Canceled", op, err)
		}
	}
	absent := claimOps(newKeys(3)...)
	wantCanceled("ClaimBatch", st.ClaimBatch(ctx, absent, longLease))
	for _, op := range absent {
		wantRecord(t, st, op.Key, nil)
	}
	for i := range held {
		held[i].Done = newDone(held[i].Claim)
	}
	wantCanceled("ExtendBatch", st.ExtendBatch(ctx, held, longLease))
	wantCanceled("CompleteBatch", st.CompleteBatch(ctx, held, longLease))
	wantCanceled("ReleaseBatch", st.ReleaseBatch(ctx, held))
	// Nothing changed: the claims are still there and still owned.
	for _, op := range held {
		wantRecord(t, st, op.Key, op.Claim)
	}
	resetOps(held)
	if err := st.CompleteBatch(t.Context(), held, longLease); err != nil {
		t.Fatalf("CompleteBatch: %v", err)
	}
	for i, op := range held {
		wantOpErr(t, "CompleteBatch", i, op, nil)
	}
}

// batchFence checks, on a FencingStore, that ClaimBatch gives each stored
// claim a fence, larger than the fence of the key's earlier claims.
func (s *suite) batchFence(t *testing.T) {
	st := batching(t, s.store(t))
	fs := fencing(t, st)
	keys := newKeys(20)
	ops := claimOps(keys...)
	mustClaimBatch(t, st, ops, longLease)
	for i, op := range ops {
		if op.Fence == 0 {
			t.Fatalf("ClaimBatch op %d stored its claim with fence 0", i)
		}
	}
	if err := st.ReleaseBatch(t.Context(), ops); err != nil {
		t.Fatalf("ReleaseBatch: %v", err)
	}
	for i, op := range ops {
		wantOpErr(t, "ReleaseBatch", i, op, nil)
		if f := mustClaimFenced(t, fs, op.Key, newClaim(), longLease); f <= op.Fence {
			t.Fatalf("ClaimFenced after ReleaseBatch has fence %d; want more than the batch's %d", f, op.Fence)
		}
	}
}

// Expiry of the batches' lifetimes, as the single calls' (see expiry).

func (s *suite) fakeBatchLease(t *testing.T) {
	st := batching(t, s.store(t))
	const lease = 10 * time.Second
	ops := claimOps(newKeys(5)...)
	mustClaimBatch(t, st, ops, lease)
	s.h.Advance(lease - time.Second)
	for _, op := range ops {
		wantRecord(t, st, op.Key, op.Claim)
	}
	// Extend the first two, complete the third for a TTL.
	ext := ops[:2:2]
	if err := st.ExtendBatch(t.Context(), ext, lease); err != nil {
		t.Fatalf("ExtendBatch: %v", err)
	}
	comp := []idemhook.BatchOp{{Key: ops[2].Key, Claim: ops[2].Claim, Done: newDone(ops[2].Claim)}}
	const ttl = time.Hour
	if err := st.CompleteBatch(t.Context(), comp, ttl); err != nil {
		t.Fatalf("CompleteBatch: %v", err)
	}
	for i, op := range append(ext, comp...) {
		wantOpErr(t, "ExtendBatch and CompleteBatch", i, op, nil)
	}
	s.h.Advance(2 * time.Second) // past the first lease
	wantRecord(t, st, ops[0].Key, ops[0].Claim)
	wantRecord(t, st, ops[1].Key, ops[1].Claim)
	wantRecord(t, st, ops[2].Key, comp[0].Done)
	wantRecord(t, st, ops[3].Key, nil)
	wantRecord(t, st, ops[4].Key, nil)
	// The lapsed claims are no one's: a batch of their owners fails, a new
	// batch claims them.
	late := append([]idemhook.BatchOp(nil), ops[3:]...)
	resetOps(late)
	if err := st.ReleaseBatch(t.Context(), late); err != nil {
		t.Fatalf("ReleaseBatch: %v", err)
	}
	for i, op := range late {
		wantOpErr(t, "ReleaseBatch after the lease", i, op, idemhook.ErrNotOwner)
	}
	mustClaimBatch(t, st, claimOps(ops[3].Key, ops[4].Key), longLease)
	s.h.Advance(lease) // past the extended lease
	wantRecord(t, st, ops[0].Key, nil)
	wantRecord(t, st, ops[2].Key, comp[0].Done)
	s.h.Advance(ttl)
	wantRecord(t, st, ops[2].Key, nil)
}

func (s *suite) realBatchLease(t *testing.T) {
	t.Parallel()
	st := batching(t, s.store(t))
	ops := claimOps(newKeys(3)...)
	start := time.Now()
	mustClaimBatch(t, st, ops, shortLife)
	// The first is extended for long, the second completed for a short TTL,
	// the third left to lapse.
	ext := ops[:1:1]
	err := st.ExtendBatch(t.Context(), ext, longLease)
	if err == nil && ext[0].Err != nil && errors.Is(ext[0].Err, idemhook.ErrNotOwner) && time.Since(start) >= shortLife {
		t.Skipf("inconclusive: ExtendBatch came %v after a claim with a lease of %v", time.Since(start), shortLife)
	}
	if err != nil || ext[0].Err != nil {
		t.Fatalf("ExtendBatch by the owner: %v, %v", err, ext[0].Err)
	}
	comp := []idemhook.BatchOp{{Key: ops[1].Key, Claim: ops[1].Claim, Done: newDone(ops[1].Claim)}}
	if err := st.CompleteBatch(t.Context(), comp, shortLife); err != nil || comp[0].Err != nil {
		if errors.Is(comp[0].Err, idemhook.ErrNotOwner) && time.Since(start) >= shortLife {
			t.Skipf("inconclusive: CompleteBatch came %v after a claim with a lease of %v", time.Since(start), shortLife)
		}
		t.Fatalf("CompleteBatch by the owner: %v, %v", err, comp[0].Err)
	}
	pollAbsent(t, st, ops[2].Key)
	pollAbsent(t, st, ops[1].Key)
	wantRecord(t, st, ops[0].Key, ops[0].Claim)
	mustClaimBatch(t, st, claimOps(ops[1].Key, ops[2].Key), longLease)
}
