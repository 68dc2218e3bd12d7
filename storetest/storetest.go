// Package storetest is the conformance suite of the [idemhook.Store]
// contract. Every store in this module runs it from its tests, and a
// third-party store should too, as in this example.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(tb testing.TB) idemhook.Store { return newStore(tb) },
//		})
//	}
//
// The suite uses random keys, so stores may share a server. It checks claim
// on an absent and on a present key, exactly one winner among concurrent
// claims, the owner-only (compare-and-set) Complete, Release and Extend,
// exact round trips of completed records, lease and TTL expiry, large bodies,
// unusual keys, canceled contexts and races between the steps of one claim.
// For a store that implements [idemhook.FencingStore] it checks that the
// fences of a key's claims increase, a take-over of a lapsed lease
// included. For a store that implements [idemhook.BatchStore] it checks
// that each op of ClaimBatch, CompleteBatch, ReleaseBatch and ExtendBatch
// does what the single call does for its key (see batch.go): ops of mixed
// outcomes in one batch, the owner check per op, two ops on one key
// (sequential calls, in the batch's order), concurrent batches over shared
// keys (one winner per key), an empty batch, a batch of 1,000, canceled
// contexts and lifetimes.
//
// Contexts: a call made with a context that is already canceled must fail
// with an error for which errors.Is(err, context.Canceled) holds, and must
// change nothing. Every store can afford that check before it does any work
// (database/sql and go-redis both make it). A caller whose deadline has
// passed must not be told that a step it gave up on was done.
//
// Expiry: with [Harness.Advance] the suite moves the store's clock and checks
// the exact boundaries (present just before the lease or TTL ends, absent
// after). Without it, the suite uses lifetimes of a few hundred milliseconds
// and polls, under a deadline of [RealTimeDeadline], until the key is gone.
package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// Harness tells the suite how to make and drive a store.
type Harness struct {
	// New returns an empty store for one subtest. Stores that share a
	// server may hand out a fresh key prefix per call, though the suite uses
	// random keys anyway. New may register cleanup with tb.Cleanup. Required.
	New func(tb testing.TB) idemhook.Store

	// Advance moves the clock of every store New returns forward by d. It
	// is nil when the store's time can't be injected (Redis, for example).
	// The suite then checks expiry with short real lifetimes polled under a
	// deadline. A Run never advances the clock while another of its
	// subtests runs, so one clock may drive all the stores of a Run (but
	// not those of two Runs that run in parallel).
	Advance func(d time.Duration)

	// Corrupt stores a value under key that the store can't decode as a
	// record, live for at least an hour, so that the batch subtests can
	// check that a ClaimBatch op on it gets an error wrapping
	// [idemhook.ErrCorruptRecord] while the other ops of its batch go on.
	// It is nil when the store's test can't write such a value (the suite
	// then leaves the corrupt record out).
	Corrupt func(tb testing.TB, st idemhook.Store, key string)
}

// RealTimeDeadline bounds how long the suite waits for a key with a short
// real lifetime to expire when the harness has no Advance.
const RealTimeDeadline = 10 * time.Second

const (
	// longLease is the lifetime of claims and records that must not expire
	// during a subtest.
	longLease = time.Hour
	// shortLife is the real lifetime of keys the suite waits to expire.
	shortLife = 300 * time.Millisecond
	// racers is the number of goroutines in concurrency subtests.
	racers = 100
)

// Run runs the conformance suite against the stores h makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	s := &suite{h: h}

	// Subtests that advance the harness clock run one at a time, before the
	// parallel ones start (parallel subtests wait for this function to
	// return), so no other subtest sees the clock move.
	t.Run("Expiry", s.expiry)

	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Claim/Absent", s.claimAbsent},
		{"Claim/ExistingPending", s.claimExistingPending},
		{"Claim/ExistingCompleted", s.claimExistingCompleted},
		{"Claim/Concurrent", s.claimConcurrent},
		{"Claim/AfterRelease", s.claimAfterRelease},
		{"Claim/AfterDelete", s.claimAfterDelete},
		{"Complete/Owner", s.completeOwner},
		{"Complete/OtherToken", s.completeOtherToken},
		{"Complete/Missing", s.completeMissing},
		{"Complete/Twice", s.completeTwice},
		{"Complete/Concurrent", s.completeConcurrent},
		{"Complete/MinimalRecord", s.completeMinimal},
		{"Complete/CopiesInput", s.completeCopiesInput},
		{"Release/Owner", s.releaseOwner},
		{"Release/OtherToken", s.releaseOtherToken},
		{"Release/AfterComplete", s.releaseAfterComplete},
		{"Release/Missing", s.releaseMissing},
		{"Extend/Owner", s.extendOwner},
		{"Extend/OtherToken", s.extendOtherToken},
		{"Extend/Completed", s.extendCompleted},
		{"Extend/Missing", s.extendMissing},
		{"Get/Missing", s.getMissing},
		{"Get/ReturnsCopy", s.getReturnsCopy},
		{"Delete", s.delete},
		{"LargeBody", s.largeBody},
		{"OddKeys", s.oddKeys},
		{"CanceledContext", s.canceledContext},
		{"Race/CompleteReleaseExtend", s.raceSteps},
		{"Fence/Increases", s.fenceIncreases},
		{"Fence/Concurrent", s.fenceConcurrent},
	}
	tests = append(tests, s.batchTests()...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t)
		})
	}
}

type suite struct{ h Harness }

func (s *suite) store(t testing.TB) idemhook.Store {
	t.Helper()
	st := s.h.New(t)
	if st == nil {
		t.Fatal("storetest: Harness.New returned a nil store")
	}
	return st
}

// newKey returns a random key with the shape the middleware uses.
func newKey() string {
	return "idem:storetest:" + rand.Text()
}

// newClaim returns a pending record with a fresh token and fingerprint.
func newClaim() *idemhook.Record {
	r := &idemhook.Record{
		State:     idemhook.StatePending,
		Token:     rand.Text(),
		CreatedAt: time.Now(),
	}
	rand.Read(r.Fingerprint[:])
	return r
}

// newDone returns a completed record for claim with every field set,
// including a multi-valued header and a CreatedAt below the millisecond.
func newDone(claim *idemhook.Record) *idemhook.Record {
	return &idemhook.Record{
		State:       idemhook.StateCompleted,
		Fingerprint: claim.Fingerprint,
		CreatedAt:   time.Now().Add(1234567 * time.Nanosecond),
		Status:      http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json; charset=utf-8"},
			"Set-Cookie":   {"a=1; Path=/", "b=2; Path=/", ""},
			"X-Request-Id": {"req-" + claim.Token},
		},
		Body: []byte(`{"ok":true,"token":"` + claim.Token + `"}` + "\n\x00\xff"),
	}
}

func (s *suite) mustClaim(t testing.TB, st idemhook.Store, key string, claim *idemhook.Record, lease time.Duration) {
	t.Helper()
	existing, err := st.Claim(t.Context(), key, claim, lease)
	if err != nil {
		t.Fatalf("Claim(%q): %v", key, err)
	}
	if existing != nil {
		t.Fatalf("Claim(%q) on an absent key: got existing %s, want nil (claim stored)", key, Describe(existing))
	}
}

func (s *suite) mustComplete(t testing.TB, st idemhook.Store, key string, claim, done *idemhook.Record, ttl time.Duration) {
	t.Helper()
	if err := st.Complete(t.Context(), key, claim, done, ttl); err != nil {
		t.Fatalf("Complete(%q) by the owner: %v", key, err)
	}
}

// wantRecord fails t unless key holds want (nil: absent).
func wantRecord(t testing.TB, st idemhook.Store, key string, want *idemhook.Record) {
	t.Helper()
	got, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if d := Diff(got, want); d != "" {
		t.Fatalf("Get(%q) mismatch:\n%s", key, d)
	}
}

// wantClaimReturns fails t unless a new Claim of key is refused with want,
// the record the key holds, unchanged. what names the Claim in the failure.
func wantClaimReturns(t testing.TB, st idemhook.Store, what, key string, want *idemhook.Record) {
	t.Helper()
	existing, err := st.Claim(t.Context(), key, newClaim(), longLease)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if d := Diff(existing, want); d != "" {
		t.Fatalf("%s must return the record the key holds, unchanged:\n%s", what, d)
	}
}

// wantNotOwner fails t unless err is ErrNotOwner.
func wantNotOwner(t testing.TB, op string, err error) {
	t.Helper()
	if !errors.Is(err, idemhook.ErrNotOwner) {
		t.Fatalf("%s: got error %v, want idemhook.ErrNotOwner", op, err)
	}
}

func (s *suite) claimAbsent(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	wantRecord(t, st, key, claim)
}

func (s *suite) claimExistingPending(t *testing.T) {
	st := s.store(t)
	key, first := newKey(), newClaim()
	s.mustClaim(t, st, key, first, longLease)
	for i := range 3 {
		wantClaimReturns(t, st, fmt.Sprintf("second Claim #%d", i), key, first)
	}
	wantRecord(t, st, key, first)
	// The first claim still owns the key.
	s.mustComplete(t, st, key, first, newDone(first), longLease)
}

func (s *suite) claimExistingCompleted(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	for i := range 3 {
		wantClaimReturns(t, st, fmt.Sprintf("Claim #%d on a completed key", i), key, done)
	}
	wantRecord(t, st, key, done)
}

func (s *suite) claimConcurrent(t *testing.T) {
	st := s.store(t)
	raceClaims(t, st, newKey())
}

// raceClaims has racers goroutines claim key at once and checks that
// exactly one wins and every other one is shown the winner's claim.
func raceClaims(t *testing.T, st idemhook.Store, key string) {
	t.Helper()
	claims := make([]*idemhook.Record, racers)
	existing := make([]*idemhook.Record, racers)
	errs := make([]error, racers)
	for i := range claims {
		claims[i] = newClaim()
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			existing[i], errs[i] = st.Claim(t.Context(), key, claims[i], longLease)
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	wins := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("Claim by racer %d: %v", i, errs[i])
		}
		if existing[i] == nil {
			wins++
			winner = i
		}
	}
	if wins != 1 {
		t.Fatalf("%d goroutines claimed one key at once: %d won, want exactly 1", racers, wins)
	}
	for i := range racers {
		if i == winner {
			continue
		}
		if d := Diff(existing[i], claims[winner]); d != "" {
			t.Fatalf("racer %d lost but was not shown the winner's claim:\n%s", i, d)
		}
	}
	wantRecord(t, st, key, claims[winner])
}

func (s *suite) claimAfterRelease(t *testing.T) {
	st := s.store(t)
	key, first := newKey(), newClaim()
	s.mustClaim(t, st, key, first, longLease)
	if err := st.Release(t.Context(), key, first); err != nil {
		t.Fatalf("Release by the owner: %v", err)
	}
	second := newClaim()
	s.mustClaim(t, st, key, second, longLease)
	wantRecord(t, st, key, second)
	wantNotOwner(t, "Complete with the released claim", st.Complete(t.Context(), key, first, newDone(first), longLease))
	s.mustComplete(t, st, key, second, newDone(second), longLease)
}

func (s *suite) claimAfterDelete(t *testing.T) {
	st := s.store(t)
	key, first := newKey(), newClaim()
	s.mustClaim(t, st, key, first, longLease)
	s.mustComplete(t, st, key, first, newDone(first), longLease)
	if ok, err := st.Delete(t.Context(), key); err != nil || !ok {
		t.Fatalf("Delete of a completed key: got %t, %v; want true, nil", ok, err)
	}
	second := newClaim()
	s.mustClaim(t, st, key, second, longLease)
	wantRecord(t, st, key, second)
}

func (s *suite) completeOwner(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	done.BodyOmitted = true
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	wantRecord(t, st, key, done)
}

func (s *suite) completeOtherToken(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	other := newClaim()
	wantNotOwner(t, "Complete with another token", st.Complete(t.Context(), key, other, newDone(other), longLease))
	wantRecord(t, st, key, claim)
	// The same fields with another token are not the claim either.
	impostor := *claim
	impostor.Token = rand.Text()
	wantNotOwner(t, "Complete with the claim's fields and another token", st.Complete(t.Context(), key, &impostor, newDone(claim), longLease))
	wantRecord(t, st, key, claim)
}

func (s *suite) completeMissing(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	wantNotOwner(t, "Complete on a missing key", st.Complete(t.Context(), key, claim, newDone(claim), longLease))
	wantRecord(t, st, key, nil)
}

func (s *suite) completeTwice(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	again := newDone(claim)
	again.Status = http.StatusAccepted
	wantNotOwner(t, "second Complete by the owner", st.Complete(t.Context(), key, claim, again, longLease))
	wantRecord(t, st, key, done)
}

func (s *suite) completeConcurrent(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	dones := make([]*idemhook.Record, racers)
	errs := make([]error, racers)
	for i := range dones {
		dones[i] = newDone(claim)
		dones[i].Status = 200 + i
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			errs[i] = st.Complete(t.Context(), key, claim, dones[i], longLease)
		})
	}
	close(start)
	wg.Wait()
	winner, wins := -1, 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
			winner = i
		case !errors.Is(err, idemhook.ErrNotOwner):
			t.Fatalf("Complete by racer %d: got %v, want nil or ErrNotOwner", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d goroutines completed one claim at once: %d succeeded, want exactly 1", racers, wins)
	}
	wantRecord(t, st, key, dones[winner])
}

func (s *suite) completeMinimal(t *testing.T) {
	st := s.store(t)
	key := newKey()
	claim := &idemhook.Record{State: idemhook.StatePending, Token: rand.Text()}
	done := &idemhook.Record{State: idemhook.StateCompleted, Status: http.StatusNoContent}
	s.mustClaim(t, st, key, claim, longLease)
	wantRecord(t, st, key, claim)
	s.mustComplete(t, st, key, claim, done, longLease)
	wantRecord(t, st, key, done)
}

func (s *suite) completeCopiesInput(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	done := newDone(claim)
	want := newDone(claim)
	want.CreatedAt = done.CreatedAt
	want.Header["X-Request-Id"] = done.Header["X-Request-Id"]
	s.mustComplete(t, st, key, claim, done, longLease)
	// The caller may reuse its buffers once Complete returns.
	done.Body[0] = 'X'
	done.Header["Content-Type"][0] = "text/plain"
	done.Header.Add("X-Late", "1")
	wantRecord(t, st, key, want)
}

func (s *suite) releaseOwner(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	if err := st.Release(t.Context(), key, claim); err != nil {
		t.Fatalf("Release by the owner: %v", err)
	}
	wantRecord(t, st, key, nil)
	wantNotOwner(t, "second Release", st.Release(t.Context(), key, claim))
	wantNotOwner(t, "Complete after Release", st.Complete(t.Context(), key, claim, newDone(claim), longLease))
	wantNotOwner(t, "Extend after Release", st.Extend(t.Context(), key, claim, longLease))
	wantRecord(t, st, key, nil)
}

func (s *suite) releaseOtherToken(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	wantNotOwner(t, "Release with another token", st.Release(t.Context(), key, newClaim()))
	wantRecord(t, st, key, claim)
}

func (s *suite) releaseAfterComplete(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	wantNotOwner(t, "Release after Complete", st.Release(t.Context(), key, claim))
	wantRecord(t, st, key, done)
}

func (s *suite) releaseMissing(t *testing.T) {
	st := s.store(t)
	key := newKey()
	wantNotOwner(t, "Release on a missing key", st.Release(t.Context(), key, newClaim()))
	wantRecord(t, st, key, nil)
}

func (s *suite) extendOwner(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	for range 3 {
		if err := st.Extend(t.Context(), key, claim, longLease); err != nil {
			t.Fatalf("Extend by the owner: %v", err)
		}
	}
	wantRecord(t, st, key, claim)
	done := newDone(claim)
	s.mustComplete(t, st, key, claim, done, longLease)
	wantRecord(t, st, key, done)
}

func (s *suite) extendOtherToken(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	wantNotOwner(t, "Extend with another token", st.Extend(t.Context(), key, newClaim(), longLease))
	wantRecord(t, st, key, claim)
}

func (s *suite) extendCompleted(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	wantNotOwner(t, "Extend after Complete", st.Extend(t.Context(), key, claim, longLease))
	wantRecord(t, st, key, done)
}

func (s *suite) extendMissing(t *testing.T) {
	st := s.store(t)
	key := newKey()
	wantNotOwner(t, "Extend on a missing key", st.Extend(t.Context(), key, newClaim(), longLease))
	wantRecord(t, st, key, nil)
}

func (s *suite) getMissing(t *testing.T) {
	st := s.store(t)
	got, err := st.Get(t.Context(), newKey())
	if err != nil || got != nil {
		t.Fatalf("Get of a missing key: got %s, %v; want nil, nil", Describe(got), err)
	}
}

func (s *suite) getReturnsCopy(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	for _, read := range []string{"Get", "Claim"} {
		var got *idemhook.Record
		var err error
		if read == "Get" {
			got, err = st.Get(t.Context(), key)
		} else {
			got, err = st.Claim(t.Context(), key, newClaim(), longLease)
		}
		if err != nil || got == nil {
			t.Fatalf("%s: got %s, %v; want the completed record", read, Describe(got), err)
		}
		// A caller that edits what it was given must not edit the store.
		got.Body[0] = 'X'
		got.Header["Content-Type"][0] = "text/plain"
		got.Header.Add("X-Late", "1")
		got.Status = 500
		wantRecord(t, st, key, done)
	}
}

func (s *suite) delete(t *testing.T) {
	st := s.store(t)
	pendingKey, claim := newKey(), newClaim()
	completedKey, claim2 := newKey(), newClaim()
	s.mustClaim(t, st, pendingKey, claim, longLease)
	s.mustClaim(t, st, completedKey, claim2, longLease)
	s.mustComplete(t, st, completedKey, claim2, newDone(claim2), longLease)
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{"pending", pendingKey, true},
		{"completed", completedKey, true},
		{"pending again", pendingKey, false},
		{"completed again", completedKey, false},
		{"missing", newKey(), false},
	}
	for _, tt := range tests {
		ok, err := st.Delete(t.Context(), tt.key)
		if err != nil {
			t.Fatalf("Delete of a %s key: %v", tt.name, err)
		}
		if ok != tt.want {
			t.Fatalf("Delete of a %s key: got %t, want %t", tt.name, ok, tt.want)
		}
		wantRecord(t, st, tt.key, nil)
	}
	wantNotOwner(t, "Complete after Delete", st.Complete(t.Context(), pendingKey, claim, newDone(claim), longLease))
	wantRecord(t, st, pendingKey, nil)
}

func (s *suite) largeBody(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	done.Body = make([]byte, 1<<20)
	rand.Read(done.Body)
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, longLease)
	wantRecord(t, st, key, done)
	wantClaimReturns(t, st, "Claim on the completed key", key, done)
}

func (s *suite) oddKeys(t *testing.T) {
	st := s.store(t)
	base := newKey()
	keys := []string{
		base,
		base + ":",
		base + "::x",
		base + " with spaces ",
		base + "\ttab\nnewline",
		base + ":ünïcödé:日本語:🙂",
		base + ":*?[]{}%_\\",
		base + `:'";--`,
		base + ":" + strings.Repeat("k", 300),
		base + ":sha256:" + strings.Repeat("0123456789abcdef", 4),
		base + ":sha256:" + strings.Repeat("0123456789ABCDEF", 4),
		base + "\x00nul",
	}
	claims := make([]*idemhook.Record, len(keys))
	dones := make([]*idemhook.Record, len(keys))
	for i, key := range keys {
		claims[i] = newClaim()
		dones[i] = newDone(claims[i])
		s.mustClaim(t, st, key, claims[i], longLease)
	}
	// Keys that share a prefix or differ by case hold distinct records.
	for i, key := range keys {
		wantRecord(t, st, key, claims[i])
		if i%2 == 0 {
			s.mustComplete(t, st, key, claims[i], dones[i], longLease)
		}
	}
	for i, key := range keys {
		if i%2 == 0 {
			wantRecord(t, st, key, dones[i])
		} else {
			wantRecord(t, st, key, claims[i])
		}
	}
	for i, key := range keys {
		if i%2 == 1 {
			if err := st.Release(t.Context(), key, claims[i]); err != nil {
				t.Fatalf("Release(%q): %v", key, err)
			}
			continue
		}
		if ok, err := st.Delete(t.Context(), key); err != nil || !ok {
			t.Fatalf("Delete(%q): got %t, %v; want true, nil", key, ok, err)
		}
	}
	for _, key := range keys {
		wantRecord(t, st, key, nil)
	}
}

func (s *suite) canceledContext(t *testing.T) {
	st := s.store(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	absent := newKey()

	wantCanceled := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a canceled context: got error %v, want one wrapping context.Canceled", op, err)
		}
	}
	existing, err := st.Claim(ctx, absent, newClaim(), longLease)
	wantCanceled("Claim", err)
	if existing != nil {
		t.Fatalf("Claim with a canceled context returned a record: %s", Describe(existing))
	}
	wantRecord(t, st, absent, nil)

	got, err := st.Get(ctx, key)
	wantCanceled("Get", err)
	if got != nil {
		t.Fatalf("Get with a canceled context returned a record: %s", Describe(got))
	}
	wantCanceled("Extend", st.Extend(ctx, key, claim, longLease))
	wantCanceled("Complete", st.Complete(ctx, key, claim, newDone(claim), longLease))
	wantCanceled("Release", st.Release(ctx, key, claim))
	_, err = st.Delete(ctx, key)
	wantCanceled("Delete", err)
	// Nothing changed: the claim is still there and still owned.
	wantRecord(t, st, key, claim)
	s.mustComplete(t, st, key, claim, newDone(claim), longLease)
}

// raceSteps runs Complete, Release and Extend of one claim at once, many
// times. Exactly one of Complete and Release wins, and the key ends up
// holding what the winner left.
func (s *suite) raceSteps(t *testing.T) {
	st := s.store(t)
	const rounds = 50
	var completes, releases int
	for round := range rounds {
		key, claim := newKey(), newClaim()
		done := newDone(claim)
		s.mustClaim(t, st, key, claim, longLease)
		var errComplete, errRelease, errExtend error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; errComplete = st.Complete(t.Context(), key, claim, done, longLease) })
		wg.Go(func() { <-start; errRelease = st.Release(t.Context(), key, claim) })
		wg.Go(func() { <-start; errExtend = st.Extend(t.Context(), key, claim, longLease) })
		close(start)
		wg.Wait()
		for op, err := range map[string]error{"Complete": errComplete, "Release": errRelease, "Extend": errExtend} {
			if err != nil && !errors.Is(err, idemhook.ErrNotOwner) {
				t.Fatalf("round %d: %s: got %v, want nil or ErrNotOwner", round, op, err)
			}
		}
		switch {
		case errComplete == nil && errRelease == nil:
			t.Fatalf("round %d: both Complete and Release of one claim succeeded", round)
		case errComplete == nil:
			completes++
			wantRecord(t, st, key, done)
		case errRelease == nil:
			releases++
			wantRecord(t, st, key, nil)
		default:
			t.Fatalf("round %d: neither Complete nor Release succeeded (%v; %v)", round, errComplete, errRelease)
		}
	}
	t.Logf("%d rounds: Complete won %d, Release won %d", rounds, completes, releases)
}

// pollAbsent waits, under RealTimeDeadline, for key to expire.
func pollAbsent(t *testing.T, st idemhook.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(RealTimeDeadline)
	for {
		got, err := st.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if got == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get(%q) still returns %s %v after its lifetime of %v", key, Describe(got), RealTimeDeadline, shortLife)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pollClaim claims key with claim, retrying under RealTimeDeadline while
// the key still holds an earlier record.
func pollClaim(t *testing.T, st idemhook.Store, key string, claim *idemhook.Record) {
	t.Helper()
	deadline := time.Now().Add(RealTimeDeadline)
	for {
		existing, err := st.Claim(t.Context(), key, claim, longLease)
		if err != nil {
			t.Fatalf("Claim(%q): %v", key, err)
		}
		if existing == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim(%q) still finds %s %v after its lifetime of %v", key, Describe(existing), RealTimeDeadline, shortLife)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *suite) expiry(t *testing.T) {
	if s.h.Advance == nil {
		// Real time: nothing moves a shared clock, and the waits overlap
		// with the other subtests.
		t.Parallel()
		t.Run("Lease", s.realLease)
		t.Run("ClaimAfterLease", s.realClaimAfterLease)
		t.Run("ConcurrentClaimAfterLease", s.realConcurrentClaimAfterLease)
		t.Run("TTL", s.realTTL)
		t.Run("ExtendRenews", s.realExtend)
		t.Run("FenceAfterLease", s.realFenceAfterLease)
		t.Run("BatchLease", s.realBatchLease)
		return
	}
	// Sequential: each of these moves the shared clock.
	t.Run("Lease", s.fakeLease)
	t.Run("ClaimAfterLease", s.fakeClaimAfterLease)
	t.Run("ConcurrentClaimAfterLease", s.fakeConcurrentClaimAfterLease)
	t.Run("TTL", s.fakeTTL)
	t.Run("CompleteReplacesLease", s.fakeCompleteReplacesLease)
	t.Run("ExtendRenews", s.fakeExtend)
	t.Run("ExtendCanShorten", s.fakeExtendShorten)
	t.Run("FenceAfterLease", s.fakeFenceAfterLease)
	t.Run("BatchLease", s.fakeBatchLease)
}

func (s *suite) fakeLease(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	const lease = 10 * time.Second
	s.mustClaim(t, st, key, claim, lease)
	s.h.Advance(lease - time.Second)
	wantRecord(t, st, key, claim)
	s.h.Advance(2 * time.Second)
	wantRecord(t, st, key, nil)
	s.wantLeaseOver(t, st, key, claim, lease, lease)
}

// wantLeaseOver checks a key whose only record, the pending claim, has
// expired. The former owner can neither Extend (by extend), Complete nor
// Release it. Delete reports no live record. A new claim (with lease
// nextLease) takes the key.
func (s *suite) wantLeaseOver(t *testing.T, st idemhook.Store, key string, claim *idemhook.Record, extend, nextLease time.Duration) {
	t.Helper()
	wantNotOwner(t, "Extend after the lease", st.Extend(t.Context(), key, claim, extend))
	wantNotOwner(t, "Complete after the lease", st.Complete(t.Context(), key, claim, newDone(claim), longLease))
	wantNotOwner(t, "Release after the lease", st.Release(t.Context(), key, claim))
	if ok, err := st.Delete(t.Context(), key); err != nil || ok {
		t.Fatalf("Delete of an expired key: got %t, %v; want false, nil", ok, err)
	}
	next := newClaim()
	s.mustClaim(t, st, key, next, nextLease)
	wantRecord(t, st, key, next)
}

func (s *suite) fakeClaimAfterLease(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	const lease = 10 * time.Second
	s.mustClaim(t, st, key, claim, lease)
	s.h.Advance(lease + time.Second)
	// No Get in between: a store that removes expired keys lazily must
	// still let the new claim win.
	next := newClaim()
	s.mustClaim(t, st, key, next, longLease)
	wantNotOwner(t, "Complete by the expired owner", st.Complete(t.Context(), key, claim, newDone(claim), longLease))
	wantNotOwner(t, "Release by the expired owner", st.Release(t.Context(), key, claim))
	wantRecord(t, st, key, next)
	s.mustComplete(t, st, key, next, newDone(next), longLease)
}

func (s *suite) fakeConcurrentClaimAfterLease(t *testing.T) {
	st := s.store(t)
	key := newKey()
	s.mustClaim(t, st, key, newClaim(), 10*time.Second)
	s.h.Advance(11 * time.Second)
	// The expired claim is still in a lazily expiring store: replacing it
	// must be as atomic as claiming an absent key.
	raceClaims(t, st, key)
}

func (s *suite) fakeTTL(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	const ttl = 24 * time.Hour
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, done, ttl)
	s.h.Advance(ttl - time.Minute)
	wantRecord(t, st, key, done)
	wantClaimReturns(t, st, "Claim before the TTL", key, done)
	s.h.Advance(2 * time.Minute)
	wantRecord(t, st, key, nil)
	next := newClaim()
	s.mustClaim(t, st, key, next, longLease)
	wantRecord(t, st, key, next)
}

func (s *suite) fakeCompleteReplacesLease(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	done := newDone(claim)
	s.mustClaim(t, st, key, claim, 10*time.Second)
	s.mustComplete(t, st, key, claim, done, time.Hour)
	s.h.Advance(time.Minute)
	// The record lives for its TTL, not for the lease of the claim.
	wantRecord(t, st, key, done)
}

func (s *suite) fakeExtend(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	const lease = 10 * time.Second
	s.mustClaim(t, st, key, claim, lease)
	s.h.Advance(8 * time.Second)
	if err := st.Extend(t.Context(), key, claim, lease); err != nil {
		t.Fatalf("Extend by the owner: %v", err)
	}
	s.h.Advance(8 * time.Second) // past the first lease, within the new one
	wantRecord(t, st, key, claim)
	s.h.Advance(3 * time.Second) // past the new lease
	wantRecord(t, st, key, nil)
	wantNotOwner(t, "Extend after the renewed lease", st.Extend(t.Context(), key, claim, lease))

	// A renewed claim can still be completed.
	key2, claim2 := newKey(), newClaim()
	s.mustClaim(t, st, key2, claim2, lease)
	s.h.Advance(8 * time.Second)
	if err := st.Extend(t.Context(), key2, claim2, lease); err != nil {
		t.Fatalf("Extend by the owner: %v", err)
	}
	s.h.Advance(8 * time.Second)
	done := newDone(claim2)
	s.mustComplete(t, st, key2, claim2, done, longLease)
	wantRecord(t, st, key2, done)
}

func (s *suite) fakeExtendShorten(t *testing.T) {
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, time.Hour)
	if err := st.Extend(t.Context(), key, claim, 10*time.Second); err != nil {
		t.Fatalf("Extend by the owner: %v", err)
	}
	// Extend sets the lease to lease from now, even when that is sooner.
	s.h.Advance(11 * time.Second)
	wantRecord(t, st, key, nil)
}

func (s *suite) realLease(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, shortLife)
	pollAbsent(t, st, key)
	s.wantLeaseOver(t, st, key, claim, shortLife, longLease)
}

func (s *suite) realClaimAfterLease(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, shortLife)
	next := newClaim()
	pollClaim(t, st, key, next)
	wantNotOwner(t, "Complete by the expired owner", st.Complete(t.Context(), key, claim, newDone(claim), longLease))
	wantRecord(t, st, key, next)
	s.mustComplete(t, st, key, next, newDone(next), longLease)
}

func (s *suite) realConcurrentClaimAfterLease(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	key := newKey()
	start := time.Now()
	s.mustClaim(t, st, key, newClaim(), shortLife)
	time.Sleep(time.Until(start.Add(shortLife + 50*time.Millisecond)))
	pollAbsent(t, st, key)
	raceClaims(t, st, key)
}

func (s *suite) realTTL(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	key, claim := newKey(), newClaim()
	s.mustClaim(t, st, key, claim, longLease)
	s.mustComplete(t, st, key, claim, newDone(claim), shortLife)
	pollAbsent(t, st, key)
	next := newClaim()
	s.mustClaim(t, st, key, next, longLease)
}

func (s *suite) realExtend(t *testing.T) {
	t.Parallel()
	st := s.store(t)
	key, claim := newKey(), newClaim()
	start := time.Now()
	s.mustClaim(t, st, key, claim, shortLife)
	err := st.Extend(t.Context(), key, claim, longLease)
	if errors.Is(err, idemhook.ErrNotOwner) && time.Since(start) >= shortLife {
		t.Skipf("inconclusive: Extend came %v after a claim with a lease of %v", time.Since(start), shortLife)
	}
	if err != nil {
		t.Fatalf("Extend by the owner: %v", err)
	}
	// Sleep past the first lease: the renewed claim must still be there.
	time.Sleep(time.Until(start.Add(2 * shortLife)))
	wantRecord(t, st, key, claim)
	done := newDone(claim)
	s.mustComplete(t, st, key, claim, done, longLease)
	wantRecord(t, st, key, done)
}

// fencing returns st as a FencingStore, or skips t when it is not one.
func fencing(t *testing.T, st idemhook.Store) idemhook.FencingStore {
	t.Helper()
	fs, ok := st.(idemhook.FencingStore)
	if !ok {
		t.Skipf("%T does not implement idemhook.FencingStore (the middleware takes its fences from the process's clock)", st)
	}
	return fs
}

// mustClaimFenced claims key with claim and returns the claim's fence,
// which must not be 0.
func mustClaimFenced(t testing.TB, st idemhook.FencingStore, key string, claim *idemhook.Record, lease time.Duration) uint64 {
	t.Helper()
	existing, fence, err := st.ClaimFenced(t.Context(), key, claim, lease)
	if err != nil {
		t.Fatalf("ClaimFenced(%q): %v", key, err)
	}
	if existing != nil {
		t.Fatalf("ClaimFenced(%q) on an absent key: got existing %s, want nil (claim stored)", key, Describe(existing))
	}
	if fence == 0 {
		t.Fatalf("ClaimFenced(%q) stored the claim with fence 0", key)
	}
	return fence
}

// wantNoFence fails t unless a ClaimFenced of key returns want, the record
// the key holds, and fence 0.
func wantNoFence(t testing.TB, st idemhook.FencingStore, what, key string, want *idemhook.Record) {
	t.Helper()
	existing, fence, err := st.ClaimFenced(t.Context(), key, newClaim(), longLease)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if d := Diff(existing, want); d != "" {
		t.Fatalf("%s must return the record the key holds:\n%s", what, d)
	}
	if fence != 0 {
		t.Fatalf("%s returned fence %d with the record in the way; want 0", what, fence)
	}
}

// The fences of a key's successive claims increase: after a release, after
// a delete. A claim that finds a record gets none.
func (s *suite) fenceIncreases(t *testing.T) {
	st := fencing(t, s.store(t))
	key, first := newKey(), newClaim()
	f1 := mustClaimFenced(t, st, key, first, longLease)
	wantNoFence(t, st, "ClaimFenced of a pending key", key, first)
	if err := st.Release(t.Context(), key, first); err != nil {
		t.Fatalf("Release by the owner: %v", err)
	}
	second := newClaim()
	f2 := mustClaimFenced(t, st, key, second, longLease)
	done := newDone(second)
	s.mustComplete(t, st, key, second, done, longLease)
	wantNoFence(t, st, "ClaimFenced of a completed key", key, done)
	if _, err := st.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	f3 := mustClaimFenced(t, st, key, newClaim(), longLease)
	if !(f1 < f2 && f2 < f3) {
		t.Fatalf("fences of successive claims: %d, after a release %d, after a delete %d; want them increasing", f1, f2, f3)
	}
}

// Of racers claiming one key at once, the one that wins gets a fence and
// the others none.
func (s *suite) fenceConcurrent(t *testing.T) {
	st := fencing(t, s.store(t))
	key := newKey()
	fences := make([]uint64, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			var existing *idemhook.Record
			existing, fences[i], errs[i] = st.ClaimFenced(t.Context(), key, newClaim(), longLease)
			if errs[i] == nil && existing == nil && fences[i] == 0 {
				errs[i] = errors.New("stored the claim with fence 0")
			}
		})
	}
	close(start)
	wg.Wait()
	fenced := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("ClaimFenced by racer %d: %v", i, errs[i])
		}
		if fences[i] != 0 {
			fenced++
		}
	}
	if fenced != 1 {
		t.Fatalf("%d goroutines claimed one key at once: %d got a fence, want exactly 1", racers, fenced)
	}
}

// A claim that takes over a lapsed lease gets a larger fence than the
// lapsed claim.
func (s *suite) realFenceAfterLease(t *testing.T) {
	t.Parallel()
	st := fencing(t, s.store(t))
	key := newKey()
	lapsed := mustClaimFenced(t, st, key, newClaim(), shortLife)
	deadline := time.Now().Add(RealTimeDeadline)
	for {
		existing, fence, err := st.ClaimFenced(t.Context(), key, newClaim(), longLease)
		if err != nil {
			t.Fatalf("ClaimFenced(%q): %v", key, err)
		}
		if existing == nil {
			if fence <= lapsed {
				t.Fatalf("the claim that took over a lapsed lease has fence %d; want more than the lapsed claim's %d", fence, lapsed)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClaimFenced(%q) still finds %s %v after its lifetime of %v", key, Describe(existing), RealTimeDeadline, shortLife)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *suite) fakeFenceAfterLease(t *testing.T) {
	st := fencing(t, s.store(t))
	key := newKey()
	const lease = 10 * time.Second
	lapsed := mustClaimFenced(t, st, key, newClaim(), lease)
	s.h.Advance(lease + time.Second)
	if fence := mustClaimFenced(t, st, key, newClaim(), longLease); fence <= lapsed {
		t.Fatalf("the claim that took over a lapsed lease has fence %d; want more than the lapsed claim's %d", fence, lapsed)
	}
}
