package idemhook

import (
	"context"
	"errors"
	"time"
)

// Store keeps one [Record] per key and offers the atomic steps the middleware
// is built from. Every method takes a context first; a missing key is data
// (a nil record, or false), never an error.
//
// A store shared by several processes must make Claim atomic across all of
// them: when N callers claim one absent key at once, exactly one gets a nil
// existing record. Complete, Release and Extend are compare-and-set on the
// claim: they act only while the key still holds exactly the pending record
// that was claimed (same owner token), and return [ErrNotOwner] otherwise, so
// a runner whose lease lapsed can't overwrite or free a newer one.
//
// A store must not retain the records passed to it after the call returns
// (their Body may be reused), and must return records that don't alias its
// own memory.
//
// A store may also implement [NamedStore], [InProcessStore],
// [TimeoutStore] and [FencingStore]; [New] looks for each.
//
// Every store in this module passes the conformance suite in package
// storetest; a third-party store should run it too.
type Store interface {
	// Claim stores claim (a pending record) under key with a lifetime of
	// lease, unless key already holds a record. It returns the record found
	// (nil when the claim was stored). A stored value that can't be decoded
	// is reported as an error wrapping ErrCorruptRecord.
	Claim(ctx context.Context, key string, claim *Record, lease time.Duration) (existing *Record, err error)

	// Complete replaces the pending claim with done, kept for ttl.
	Complete(ctx context.Context, key string, claim, done *Record, ttl time.Duration) error

	// Release deletes the pending claim, so that the next delivery of the
	// event runs the handler afresh.
	Release(ctx context.Context, key string, claim *Record) error

	// Extend renews the lease of the pending claim to lease from now.
	Extend(ctx context.Context, key string, claim *Record, lease time.Duration) error

	// Get returns the record under key, or nil when there is none.
	Get(ctx context.Context, key string) (*Record, error)

	// Delete removes key whatever it holds and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
}

// NamedStore is a [Store] that names itself in the WARN logs
// ("WebhookIdempotencyGuard Redis error for key=..."). A store that is not
// one is named "store".
type NamedStore interface {
	Store
	Name() string
}

// InProcessStore is a [Store] that may say its calls complete in-process
// without waiting on I/O (memstore): when InProcess reports true, the
// middleware spares its calls the StoreTimeout deadline.
type InProcessStore interface {
	Store
	InProcess() bool
}

// TimeoutStore is a [Store] whose calls may rightly wait longer than
// [DefaultStoreTimeout] (a database file on the same machine, waiting for
// its writer on a loaded machine: sqlitestore). StoreTimeout is the bound
// its calls get when Options.StoreTimeout is not set; 0 means
// DefaultStoreTimeout.
type TimeoutStore interface {
	Store
	StoreTimeout() time.Duration
}

// FencingStore is a [Store] whose claims carry a fencing token of the
// store's own: a number that grows with every claim of a key, so that a
// later holder of a key's claim has a larger one than every earlier holder,
// whichever process made either claim. The middleware hands it to the
// handler ([Delivery.Fence]), and the gateway forwards it to the backend,
// so that a backend that records the largest it has seen can refuse the
// work of a stale holder: one whose lease lapsed while it was frozen, and
// whose claim another delivery took over.
//
// For a store that is not one, the middleware takes the fence from this
// process's clock instead (see [Delivery.Fence]): enough for a store only
// one process uses, and for several processes whose clocks agree within a
// lease. A store shared by processes on several machines implements it to
// take the fence from one clock, its own (pgstore).
type FencingStore interface {
	Store
	// ClaimFenced is Claim, and when the claim was stored (existing is
	// nil) it also returns the claim's fence: larger than the fence of
	// every earlier claim of key, and never 0. When key holds a record
	// the fence is 0.
	ClaimFenced(ctx context.Context, key string, claim *Record, lease time.Duration) (existing *Record, fence uint64, err error)
}

// ErrNotOwner is returned by Complete, Release and Extend when the key no
// longer holds the claim passed in: it expired, was released, was deleted or
// was taken over by another delivery.
var ErrNotOwner = errors.New("idemhook: claim not held")

// ErrCorruptRecord is wrapped by the errors of stores and [Record.UnmarshalBinary]
// when a stored value can't be decoded.
var ErrCorruptRecord = errors.New("idemhook: corrupt record")

// StoreError is the error of a delivery that ended in store_error_open or
// store_error_closed because a store call failed: [DeliveryInfo.Err] is a
// *StoreError naming the operation and the key, wrapping the store's error
// (errors.As finds it). A corrupt record is reported as an error wrapping
// [ErrCorruptRecord] instead.
type StoreError struct {
	Op  string // "claim", "complete", "release", "extend", "get"
	Key string
	Err error
}

func (e *StoreError) Error() string {
	return "idemhook: store " + e.Op + " " + e.Key + ": " + e.Err.Error()
}
func (e *StoreError) Unwrap() error { return e.Err }

// BatchStore is a [Store] that makes many calls of one kind in one round
// trip (a Redis pipeline, one PostgreSQL batch, one SQLite transaction).
// The middleware uses it for the items of a batched delivery
// ([Route.Items]): a body of 1,000 items is claimed, completed or released
// in a bounded number of round trips instead of 1,000. A store that is not
// one gets one call per item (fine for an in-process store, memstore).
//
// Each method does, for every op, exactly what the Store method of the same
// name does for one key, with the same atomicity per key (not across keys:
// one op may succeed while another finds its key taken). The result of each
// op is set in the op: Existing (and Fence) for ClaimBatch, Err for every
// method, an error the single call would have returned ([ErrNotOwner],
// [ErrCorruptRecord]). The method's own error is for the batch as a whole
// (the store could not be reached): then no op's result may be trusted, and
// the middleware treats every op as failed with it.
type BatchStore interface {
	Store
	// ClaimBatch is Claim for each op: it offers op.Claim under op.Key for
	// lease, and sets op.Existing to the record found (nil when the claim
	// was stored). A store that is also a [FencingStore] sets op.Fence for
	// each claim it stored.
	ClaimBatch(ctx context.Context, ops []BatchOp, lease time.Duration) error
	// CompleteBatch is Complete for each op: it replaces op.Claim with
	// op.Done, kept for ttl.
	CompleteBatch(ctx context.Context, ops []BatchOp, ttl time.Duration) error
	// ReleaseBatch is Release for each op's claim.
	ReleaseBatch(ctx context.Context, ops []BatchOp) error
	// ExtendBatch is Extend for each op's claim, to lease from now.
	ExtendBatch(ctx context.Context, ops []BatchOp, lease time.Duration) error
}

// BatchOp is one key's part of a [BatchStore] call.
type BatchOp struct {
	Key   string
	Claim *Record // the pending claim: offered by ClaimBatch, held by the others
	Done  *Record // CompleteBatch: the completed record that replaces Claim

	// Set by the store.
	Existing *Record // ClaimBatch: the record already under Key; nil when Claim was stored
	Fence    uint64  // ClaimBatch on a FencingStore: the stored claim's fence
	Err      error   // this op's error, as the single call would have returned it
}
