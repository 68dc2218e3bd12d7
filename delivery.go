package idemhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Delivery is the claim a delivery holds while its handler runs. It is what
// a store needs to complete the claim inside the handler's own database
// transaction, together with the handler's business writes. Both then
// commit or neither does (exactly-once effects).
//
// A handler gets it with [DeliveryFromContext] and completes it through a
// store that supports transactions (pgstore.Store.CompleteTx for a pgx.Tx,
// CompleteSQLTx for a *sql.Tx), as the last statement before its commit:
//
//	d, claimed := idemhook.DeliveryFromContext(r.Context())
//	if !claimed {
//		// No claim, so no record to commit with the effect: refuse, and
//		// the provider retries later.
//		w.Header().Set("Retry-After", "30")
//		http.Error(w, "retry later", http.StatusServiceUnavailable)
//		return
//	}
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// the business writes, then:
//		return store.CompleteTx(ctx, tx, d, http.StatusCreated, header, body)
//	})
//	if err != nil { // rolled back; ErrNotOwner: another delivery owns the event now
//		http.Error(w, "not recorded", http.StatusInternalServerError)
//	}
//
// docs/stores.md has the whole program (examples/exactlyonce/recordorder).
//
// After the handler returns, the middleware reads the key once to learn
// whether the transaction committed:
//
//   - committed: the stored record is the one written in the transaction.
//     The middleware sends that record, as a replay would (see
//     [CompleteDelivery] for its headers; what else the handler wrote
//     to the ResponseWriter, status, headers or body, is discarded), and
//     writes nothing more to the store. Every re-delivery gets the same
//     answer, replayed. Outcome processed.
//   - rolled back: the key still holds the delivery's pending claim. The
//     middleware releases it as for a failed handler, so that the provider's
//     retry runs afresh, and sends the handler's answer if it is one the
//     middleware would not store either (a failure such as a 5xx); an answer
//     it would store (a 2xx, or nothing written) becomes a 500, since the
//     provider would not retry it and the event would be lost. Outcome
//     failed_released.
//   - unknown (the read failed): the middleware answers 503 with
//     Retry-After. The provider's retry replays the committed response, or,
//     once the lease has lapsed, runs afresh. Outcome store_error_closed.
//
// A store author whose write commits its own transaction inside
// [CompleteDelivery] (the gateway's queue does: the event and the key's
// completion in one transaction) knows the outcome when that returns: it
// calls [DeliveryCommitted], and the middleware sends the committed record
// without reading the key back, so that a busy store cannot turn an event
// already recorded into a 503.
//
// A handler that doesn't complete its Delivery is handled as usual: the
// middleware stores its response after it returns.
//
// Once a completion has been written in a transaction the lease is no longer
// renewed (the row is locked by the transaction until it ends), so commit
// promptly, and end the transaction (commit or roll back) before the handler
// returns: the middleware's read after the return must see its outcome. A handler may try again in a new transaction after a rollback
// (a serialization failure, say); a completion whose transaction committed
// makes every later one fail with [ErrNotOwner].
//
// A Delivery is only valid while its handler runs; afterwards completing it
// fails.
type Delivery struct {
	ex *exchange
	// claim is the pending record the delivery holds, which stays as it is
	// while the handler runs; handed out only as copies. A pointer rather
	// than a copy keeps the delivery, which holds this Delivery, in a
	// smaller allocation.
	claim *Record
	// outer is the response header as the handler found it: what the
	// middleware around this one set, which it sets on a replay too. nil
	// when empty, as it mostly is.
	outer http.Header

	mu       sync.Mutex
	finished bool
	written  []txCompletion // completions written in a transaction, oldest first
	// committed is set by DeliveryCommitted: the last of written committed, so
	// settle needs no read-back.
	committed bool
}

// txCompletion is one completion written inside a caller's transaction: the
// record as stored, and the response it holds, to send once it committed.
type txCompletion struct {
	encoded []byte // the stored record, encoded: how the middleware recognizes it
	status  int
	header  http.Header // the record's header
	body    []byte      // the body, whole even where the record leaves it out
	omitted bool        // the record leaves the body out (over MaxStoredBodyBytes)
}

type deliveryContextKey struct{}

// DeliveryFromContext returns the Delivery of the request whose context is
// ctx. It is present only while the handler runs for a delivery that holds a
// claim: not for a replay, a pass-through (in-flight proceed, a store error,
// a key error) or a request outside the middleware.
func DeliveryFromContext(ctx context.Context) (*Delivery, bool) {
	x, ok := ctx.Value(deliveryContextKey{}).(*Delivery)
	return x, ok && x != nil
}

// StoreKey returns the key the claim is stored under ("idem:<source>:<key>").
func (x *Delivery) StoreKey() string { return x.ex.storeKey }

// Body returns the request body as the middleware read it, before the
// handler ran: the same bytes the handler reads from the request, without a
// copy. It is not the caller's to change; it stays valid after the handler
// returns (the middleware never reuses it).
func (x *Delivery) Body() []byte { return x.ex.body }

// Fence returns the delivery's fencing token: a number that grows with
// every claim of the event's key, so that whoever holds the key's claim
// later (another delivery, in this process or another, that took the
// event over once this one's lease lapsed) has a larger one. A backend
// that records the largest fence it has seen for a key, and refuses work
// whose fence is smaller, refuses the work of a stale holder: a process
// that was frozen past its lease (a long GC pause, SIGSTOP, a VM paused)
// and carries on as if it still held the claim. The owner token already
// keeps that holder from storing its answer; the fence lets the backend
// keep it from committing its effect. The gateway forwards it to the
// backend as the header Idempotent-Fence.
//
// The fence is the claim's time in Unix microseconds, on one clock where
// the store has one: a [FencingStore]'s (pgstore: the database's clock),
// else this process's wall clock, raised to one more than the last fence
// of the process when the clock has not moved past it. So fences increase
// within a process whatever its clock does, and across processes (Redis)
// as long as their clocks agree within the lease (docs/stores.md says
// what each store assumes).
//
// Fence is 0 for a nil *Delivery, which [DeliveryFromContext] returns when
// the request holds no claim.
func (x *Delivery) Fence() uint64 {
	if x == nil {
		return 0
	}
	return x.ex.fence
}

// The store author's side of a Delivery: [DeliveryStore], [CompleteDelivery]
// and [DeliveryCommitted] are functions rather than methods, so that the
// handler's type offers the handler only what it uses; a handler completes
// its Delivery through its store (pgstore.Store.CompleteTx).

// DeliveryStore returns the store holding d's claim: the middleware's store.
// A store's transactional completion checks with it that the claim is its
// own.
func DeliveryStore(d *Delivery) Store { return d.ex.h.m.store }

// CompleteDelivery completes d's claim with the response status, header and
// body through write, which must store done under key in place of claim,
// kept for ttl, with the compare-and-set of [Store.Complete], inside the
// caller's transaction. It is the building block of the stores'
// transactional completions (pgstore.Store.CompleteTx); a handler calls
// those instead.
//
// CompleteDelivery builds the record as the middleware would, and the answer
// sent once the transaction committed is that record, so that the first
// answer and every replay are the same. Its headers are the route's replay
// headers ([RepresentationHeaders] and Route.ReplayHeaders), each taken from
// header or, when header lacks it, from what the handler has set on its
// ResponseWriter by now. Any other header the handler sets does not go out,
// since a replay could not carry it; a name in header that the route does
// not store is an error. A body over the route's MaxStoredBodyBytes is left
// out of the record (it is still sent whole; a replay then has an empty
// body). status must be one the middleware stores (a failure such as a 5xx
// releases the claim instead, so that the provider's retry runs afresh).
//
// An error from write is returned as is: [ErrNotOwner] means the claim was
// lost (its lease lapsed and another delivery took the event over, or it was
// deleted), and the caller must roll its transaction back.
func CompleteDelivery(d *Delivery, status int, header http.Header, body []byte, write func(key string, claim, done *Record, ttl time.Duration) error) error {
	if write == nil {
		return errors.New("idemhook: CompleteDelivery: nil write")
	}
	if status < 200 || status > 999 || !d.ex.h.stores(status) {
		return fmt.Errorf("idemhook: CompleteDelivery: status %d is not one the middleware stores (it releases the claim of a failed delivery so that a retry runs afresh)", status)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished {
		return errors.New("idemhook: CompleteDelivery: the handler has returned: a Delivery is only valid while its handler runs")
	}
	ex := d.ex
	done := &Record{
		State:       StateCompleted,
		Fingerprint: ex.fp,
		CreatedAt:   ex.h.m.opts.Now(),
		Status:      status,
	}
	given, err := ex.h.givenHeader(header)
	if err != nil {
		return err
	}
	rw := ex.out.w.Header()
	for _, name := range ex.h.replayHeaders {
		vs := given[name]
		if len(vs) == 0 {
			vs = rw[name]
		}
		if len(vs) > 0 {
			if done.Header == nil {
				done.Header = make(http.Header, len(ex.h.replayHeaders))
			}
			done.Header[name] = slices.Clone(vs)
		}
	}
	if len(body) > ex.h.rt.MaxStoredBodyBytes {
		done.BodyOmitted = true
	} else if len(body) > 0 {
		done.Body = bytes.Clone(body)
	}
	encoded, err := done.MarshalBinary()
	if err != nil {
		return fmt.Errorf("idemhook: CompleteDelivery: %w", err)
	}
	claim := *d.claim // a copy: write may keep it
	if err := write(ex.storeKey, &claim, done, ex.h.rt.TTL); err != nil {
		return err
	}
	// The row is now locked by the caller's transaction: a renewal would
	// wait for it to end, and then find the claim gone.
	ex.renew.stop()
	d.written = append(d.written, txCompletion{encoded: encoded, status: status, header: done.Header, body: bytes.Clone(body), omitted: done.BodyOmitted})
	return nil
}

// DeliveryCommitted tells the middleware that the transaction that wrote
// d's last completion (the last [CompleteDelivery] that returned nil)
// committed, so settling d needs no read-back. The middleware then sends
// that completion's record once the handler returns, as it would after
// reading the key back and finding it, and makes no store call to learn it.
// It is for a store author whose write function commits its own
// transaction, so that CompleteDelivery returning nil means committed; a handler that commits later, in a transaction of its
// own (pgstore.Store.CompleteTx), does not call it, and the middleware
// reads the key back.
//
// It fails when no completion has been written, or after the handler
// returned.
func DeliveryCommitted(d *Delivery) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished {
		return errors.New("idemhook: DeliveryCommitted: the handler has returned: a Delivery is only valid while its handler runs")
	}
	if len(d.written) == 0 {
		return errors.New("idemhook: DeliveryCommitted: no completion has been written (CompleteDelivery)")
	}
	d.committed = true
	return nil
}

// givenHeader is the header given to a completion, by canonical name,
// checked: each name must be one the route stores.
func (h *routeConfig) givenHeader(header http.Header) (http.Header, error) {
	var given http.Header
	for name, vs := range header {
		if len(vs) == 0 {
			continue
		}
		name = http.CanonicalHeaderKey(name)
		switch {
		case neverReplayed[name]:
			return nil, fmt.Errorf("idemhook: CompleteDelivery: header %s: it is never stored or replayed, so a replay could not carry it", name)
		case !slices.Contains(h.replayHeaders, name):
			return nil, fmt.Errorf("idemhook: CompleteDelivery: header %s: route %q does not store it, so a replay could not carry it: add it to Route.ReplayHeaders", name, h.rt.Source)
		}
		if given == nil {
			given = make(http.Header, len(header))
		}
		given[name] = vs
	}
	return given, nil
}

// offerDelivery readies ex to run the handler holding pending: the answer
// is buffered, to be stored before it is sent, and the claim's Delivery is
// in the request's context for the handler to find.
func (ex *exchange) offerDelivery(pending *Record) *Delivery {
	ex.out.buffering = true
	ex.out.limit = ex.h.rt.MaxStoredBodyBytes
	x := &ex.offered
	x.ex, x.claim = ex, pending
	if h := ex.out.w.Header(); len(h) > 0 {
		x.outer = h.Clone()
	}
	ex.offerCtx = offerContext{Context: ex.r.Context(), x: x}
	ex.r = ex.r.WithContext(&ex.offerCtx)
	return x
}

// offerContext is the request's context holding its Delivery, as
// context.WithValue would make it, but held in the delivery rather than
// allocated on its own.
type offerContext struct {
	context.Context
	x *Delivery
}

func (c *offerContext) Value(key any) any {
	if key == (deliveryContextKey{}) {
		return c.x
	}
	return c.Context.Value(key)
}

// close ends the Delivery's validity: later completions fail.
func (x *Delivery) close() {
	x.mu.Lock()
	x.finished = true
	x.mu.Unlock()
}

// settle runs after the handler returned. When the handler completed the
// claim in a transaction, it finds out whether that committed and returns
// how the delivery settled, with true; otherwise it returns false and the
// middleware settles the claim as usual.
func (x *Delivery) settle(pending *Record) (settled, bool) {
	x.close()
	if len(x.written) == 0 {
		return settled{}, false
	}
	if x.committed {
		return x.committedAnswer(&x.written[len(x.written)-1]), true
	}
	return x.settleTx(pending), true
}

// committedAnswer settles a delivery whose completion c committed: it is
// answered with c's record, in place of whatever the handler wrote, as a
// replay has it.
func (x *Delivery) committedAnswer(c *txCompletion) settled {
	if c.omitted {
		x.ex.warnBodyOmitted(int64(len(c.body)))
	}
	return settled{outcome: OutcomeProcessed, answer: answer{kind: answerCommitted, done: c}, bodyOmitted: c.omitted}
}

func (x *Delivery) settleTx(pending *Record) settled {
	ex := x.ex
	rec, err := ex.call("get", func(ctx context.Context) (*Record, error) {
		return ex.h.m.store.Get(ctx, ex.storeKey)
	})
	if err != nil {
		// Committed or not, the provider's retry finds out: it replays
		// the committed record, or runs afresh once the lease lapses.
		ex.warnStore("WebhookIdempotencyInterceptor could not tell whether the handler's transaction committed for key=", err)
		return settled{outcome: OutcomeStoreErrorClosed, err: err, answer: problemAnswer(http.StatusServiceUnavailable, ex.h.retryAfter,
			"Idempotency store unavailable", "the idempotency store could not tell whether this delivery was committed; retry later")}
	}
	if rec != nil && rec.State == StateCompleted {
		if enc, err := rec.MarshalBinary(); err == nil {
			for i := range x.written {
				if bytes.Equal(enc, x.written[i].encoded) {
					return x.committedAnswer(&x.written[i])
				}
			}
		}
	}
	// Not committed: the transaction rolled back (the key still holds the
	// claim, released now as for a failure), or the claim was lost before
	// (a release then finds nothing to release).
	if rec != nil && rec.State == StatePending && rec.Token == pending.Token {
		ex.release(pending)
		err = errors.New("idemhook: the handler completed the claim in a transaction that did not commit; the claim was released")
	} else {
		err = errors.New("idemhook: the handler completed the claim in a transaction that did not commit, and the claim was lost meanwhile (lease lapsed or key deleted)")
	}
	if ex.h.stores(ex.out.finalStatus()) {
		// A success (or any answer the provider won't retry) for work that
		// did not commit would lose the event.
		return settled{outcome: OutcomeFailedReleased, err: err, answer: problemAnswer(http.StatusInternalServerError, "",
			"Delivery not committed", "the handler's transaction did not commit; retry the delivery")}
	}
	return settled{outcome: OutcomeFailedReleased, err: err, answer: answer{kind: answerCaptured}}
}

// resetHeader makes the response header what a replay of a record with
// header starts from: what the middleware around this one had set when the
// handler started, and header over it. What the handler set is gone.
func (x *Delivery) resetHeader(header http.Header) {
	h := x.ex.out.w.Header()
	clear(h)
	for name, vs := range x.outer {
		h[name] = vs
	}
	for name, vs := range header {
		h[name] = vs
	}
}
