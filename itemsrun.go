package idemhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhook/idemhook/internal/fence"
	"github.com/idemhook/idemhook/internal/httpstatus"
)

// This file runs a batched delivery (Route.Items): its items are claimed
// together, the new ones reach the handler (one request each, or one
// request for all), each is stored or released on its own, and the
// provider gets one answer for the whole batch.

// FailedItemsHeader is the response header by which a handler in mode
// filter that is not a Go handler (the gateway's backend) fails some of the
// items its request carried while answering a 2xx for the others: a
// comma-separated list of their keys (BatchItem.Key, the item's key part,
// e.g. "wamid.HBgL..."). Those items are released rather than stored, as
// with [Batch.Fail], and the provider is answered a failure so that it
// retries them. A key the request did not carry is ignored. The header is
// never stored or replayed.
const FailedItemsHeader = "Idempotent-Failed-Items"

// ItemsInfo counts the items of a batched delivery, for
// [DeliveryInfo.Items].
type ItemsInfo struct {
	Total     int // the distinct items of the body (an item repeated in one body counts once)
	Processed int // run and stored now
	Replayed  int // done already: not run again
	Failed    int // run and failed, or refused by the store: released, for the provider's retry
	InFlight  int // held by another delivery still running at the end: left to it
}

// BatchItem is one item of a batched delivery that the handler's request
// carries (see [BatchFromContext]).
type BatchItem struct {
	Key      string // the item's key part (ItemPath.Key's value), e.g. "wamid.HBgL..."
	StoreKey string // where its answer is stored: "idem:<source>:<key>"
	Path     string // the ItemPath.Path it was found at
	Fence    uint64 // its claim's fencing token (see [Delivery.Fence])
}

// Batch is the items one request of a batched delivery carries to the
// handler: one in mode split, every new item in mode filter. The handler
// may fail some of them and still answer a 2xx for the others: those it
// failed are released instead of stored, and the provider is answered a
// failure, so that it sends the batch again and only the failed items run
// again.
type Batch struct {
	items []BatchItem

	mu     sync.Mutex
	failed []bool
	closed bool
}

type batchContextKey struct{}

// BatchFromContext returns the Batch of the request whose context is ctx:
// present while the handler runs for the items of a batched delivery
// (Route.Items), absent otherwise.
func BatchFromContext(ctx context.Context) (*Batch, bool) {
	b, ok := ctx.Value(batchContextKey{}).(*Batch)
	return b, ok && b != nil
}

// Items returns the items the request carries, in the order of the body.
func (b *Batch) Items() []BatchItem { return b.items }

// Fail marks the item at index i of Items as failed: it is released rather
// than stored, whatever the handler answers, and the delivery is answered
// with a failure so that the provider retries. It returns an error for an
// index out of range, or once the handler has returned.
func (b *Batch) Fail(i int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return errors.New("idemhook: Batch.Fail after the handler returned")
	case i < 0 || i >= len(b.items):
		return fmt.Errorf("idemhook: Batch.Fail(%d): the request carries %d items", i, len(b.items))
	}
	b.failed[i] = true
	return nil
}

// close ends the handler's use of b and returns which items it failed.
func (b *Batch) close() []bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.failed
}

// itemState is where one distinct item of a batched delivery stands.
type itemState uint8

const (
	itemNew       itemState = iota // claimed by this delivery, not yet run
	itemProcessed                  // run and stored
	itemReplayed                   // done by an earlier delivery
	itemPending                    // held by another delivery
	itemFailed                     // run and failed, or its store call failed: released
	itemUnclaimed                  // the store failed for it: run without a claim (on_store_error open)
)

// itemRun is one batched delivery's way through the middleware.
type itemRun struct {
	ex   *exchange
	body *itemBody
	plan *itemPlan

	// One per distinct item, in the order of the body.
	ops    []BatchOp
	index  []int // the body item of each op
	states []itemState

	mu   sync.Mutex
	held []bool // the op's claim is this delivery's and not yet settled: renewed

	stopRenewal chan struct{}
	renewalDone chan struct{}

	failStatus     int    // the first failure's status
	failRetryAfter string // and its Retry-After, if any
	waited         bool
	loose          bool // the body's loose content is still to be sent
}

// findBatch returns the delivery's items, or nil when the route has none
// or the body holds none (it is then one event).
func (ex *exchange) findBatch() *itemRun {
	plan := ex.h.items
	if plan == nil {
		return nil
	}
	body := plan.findItems(ex.body)
	if body == nil {
		return nil
	}
	ex.scope = escapeScope(ex.h.scope(ex.r))
	if len(body.items) == 1 {
		// One event: it runs as any delivery does, with the body as sent
		// and its answer as the provider's, under its item's key, so that
		// a batch that holds it later finds it done.
		prefix := ex.setStoreKey(body.items[0].key, nil)
		ex.key, ex.kind = ex.storeKey[prefix:], keyFromPreset
		return nil
	}
	run := &itemRun{ex: ex, body: body, plan: plan, loose: body.loose}
	// The store calls share one context; made here, before the renewal's
	// goroutine may make calls too.
	ex.storeCtx = context.WithoutCancel(ex.r.Context())
	for i, it := range body.items {
		if it.dup >= 0 {
			continue
		}
		run.ops = append(run.ops, BatchOp{Key: itemStoreKey(ex.h.rt.Source, ex.scope, it.key)})
		run.index = append(run.index, i)
	}
	run.states = make([]itemState, len(run.ops))
	run.held = make([]bool, len(run.ops))
	ex.storeKey = run.ops[0].Key
	ex.key = body.items[0].key
	ex.kind = keyFromPreset
	return run
}

func itemStoreKey(source, scope, key string) string {
	b := make([]byte, 0, storeKeyLen(source, scope, len(key)))
	return string(append(appendStoreKeyPrefix(b, source, scope), key...))
}

// runItems carries the batched delivery through: it claims its items, runs
// the new ones, waits for those another delivery holds (policy wait), and
// answers the provider. It returns how the delivery settled, answered.
func (run *itemRun) runItems() settled {
	ex := run.ex
	if err := run.claim(); err != nil {
		v := ex.storeError(err)
		if v.act == actRun { // on_store_error open: the whole body, unprotected, as for one event
			ex.h.next.ServeHTTP(&ex.out, ex.r)
		} else {
			ex.out.w.Header().Set("Retry-After", v.retryAfter)
			ex.writeProblem(v.status, v.title, v.detail)
		}
		return settled{outcome: v.outcome, err: v.err}
	}
	run.startRenewal()
	defer run.stopRenewals()
	if run.plan.mode == ItemsFilter {
		run.runFiltered()
	} else {
		for i := range run.ops {
			if ex.r.Context().Err() != nil {
				run.giveUp(i) // the provider hung up: its retry brings the rest
				break
			}
			if run.states[i] == itemNew || run.states[i] == itemUnclaimed {
				run.runOne(i)
			}
		}
	}
	run.settlePending()
	return run.answer()
}

// claim claims every item in one batch where the store can, and sets each
// item's state. Its error is the store's for the whole batch.
func (run *itemRun) claim() error {
	ex := run.ex
	m := ex.h.m
	now := m.opts.Now()
	claims := make([]Record, len(run.ops))
	for i := range run.ops {
		var tok [tokenLen]byte
		claims[i] = Record{State: StatePending, Token: string(appendToken(tok[:0])), CreatedAt: now}
		run.ops[i].Claim = &claims[i]
	}
	if bs, ok := m.store.(BatchStore); ok {
		if _, err := ex.call("claim", func(ctx context.Context) (*Record, error) {
			return nil, bs.ClaimBatch(ctx, run.ops, ex.h.lease)
		}); err != nil {
			return err
		}
	} else {
		for i := range run.ops {
			op := &run.ops[i]
			var err error
			op.Existing, err = ex.callKey("claim", op.Key, func(ctx context.Context) (*Record, error) {
				if m.fencing != nil {
					rec, f, err := m.fencing.ClaimFenced(ctx, op.Key, op.Claim, ex.h.lease)
					op.Fence = f
					return rec, err
				}
				return m.store.Claim(ctx, op.Key, op.Claim, ex.h.lease)
			})
			switch {
			case err == nil:
			case i == 0 && !errors.Is(err, ErrCorruptRecord):
				return err // the store is down: the whole batch is
			default:
				op.Err, op.Existing = err, nil
			}
		}
	}
	for i := range run.ops {
		op := &run.ops[i]
		switch {
		case op.Err != nil:
			run.states[i] = itemFailed
			if ex.h.rt.OnStoreError == StoreErrorOpen || errors.Is(op.Err, ErrCorruptRecord) {
				run.states[i] = itemUnclaimed
			}
			ex.warnStore("WebhookIdempotencyGuard "+m.storeName+" error for key=", op.Err)
		case op.Existing == nil:
			run.states[i] = itemNew
			run.held[i] = true
			if op.Fence == 0 {
				op.Fence = fence.Next()
			}
		case op.Existing.State == StateCompleted:
			run.states[i] = itemReplayed
		default:
			run.states[i] = itemPending
		}
	}
	return nil
}

// startRenewal keeps the claims this delivery holds alive until each is
// settled: every Lease/3, one batched Extend of those still held.
func (run *itemRun) startRenewal() {
	run.stopRenewal = make(chan struct{})
	run.renewalDone = make(chan struct{})
	go func() {
		defer close(run.renewalDone)
		t := time.NewTicker(run.ex.h.renewals.interval)
		defer t.Stop()
		for {
			select {
			case <-run.stopRenewal:
				return
			case <-t.C:
				run.extend()
			}
		}
	}()
}

func (run *itemRun) extend() {
	ex := run.ex
	m := ex.h.m
	run.mu.Lock()
	var ops []BatchOp
	var which []int
	for i, held := range run.held {
		if held {
			ops = append(ops, BatchOp{Key: run.ops[i].Key, Claim: run.ops[i].Claim})
			which = append(which, i)
		}
	}
	run.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	if bs, ok := m.store.(BatchStore); ok {
		ex.call("extend", func(ctx context.Context) (*Record, error) { //nolint:errcheck // a failed renewal is tried again at the next tick
			return nil, bs.ExtendBatch(ctx, ops, ex.h.lease)
		})
	} else {
		for i := range ops {
			_, ops[i].Err = ex.callKey("extend", ops[i].Key, func(ctx context.Context) (*Record, error) {
				return nil, m.store.Extend(ctx, ops[i].Key, ops[i].Claim, ex.h.lease)
			})
		}
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	for j, op := range ops {
		if i := which[j]; run.held[i] && errors.Is(op.Err, ErrNotOwner) {
			// Lost (lapsed while the store was unreachable): another
			// delivery may hold it now. An item not yet run is left to
			// it (runOne skips it; it counts as in flight).
			run.held[i] = false
			ex.h.m.warn("idemhook: an item's lease was lost before its batch settled it: another delivery may run it",
				slog.String("source", ex.h.rt.Source), slog.String("key", op.Key))
		}
	}
}

func (run *itemRun) stopRenewals() {
	if run.stopRenewal != nil {
		close(run.stopRenewal)
		<-run.renewalDone
		run.stopRenewal = nil
	}
}

// settle notes that op i's claim is no longer this delivery's to renew, and
// reports whether it still was (a claim lost to a lapse is not run).
func (run *itemRun) settle(i int) bool {
	run.mu.Lock()
	defer run.mu.Unlock()
	was := run.held[i]
	run.held[i] = false
	return was
}

// giveUp releases, in one batch, the claims still held of the items from
// op from on, none of which has run: they are failed, for the provider's
// retry.
func (run *itemRun) giveUp(from int) {
	var held []int
	for i := from; i < len(run.ops); i++ {
		if run.states[i] != itemNew && run.states[i] != itemUnclaimed {
			continue
		}
		if run.settle(i) {
			held = append(held, i)
		}
		run.states[i] = itemFailed
	}
	run.release(held)
}

// isHeld reports whether op i's claim is still this delivery's.
func (run *itemRun) isHeld(i int) bool {
	run.mu.Lock()
	defer run.mu.Unlock()
	return run.held[i]
}

// request returns the request to the handler that carries body for the
// items at ops (one in mode split), with their Batch in its context.
func (run *itemRun) request(ops []int, body []byte) (*http.Request, *Batch) {
	r := run.ex.r.Clone(run.ex.r.Context())
	r.Header.Del("Content-Length")
	r.Body, r.ContentLength = &bodyReader{*bytes.NewReader(body)}, int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return &bodyReader{*bytes.NewReader(body)}, nil }
	b := &Batch{items: make([]BatchItem, len(ops)), failed: make([]bool, len(ops))}
	for j, i := range ops {
		it := run.body.items[run.index[i]]
		b.items[j] = BatchItem{Key: it.key, StoreKey: run.ops[i].Key, Path: run.plan.paths[it.path], Fence: run.ops[i].Fence}
	}
	return r.WithContext(context.WithValue(r.Context(), batchContextKey{}, b)), b
}

// itemCapture returns the capture of a request of items' answer, which the
// middleware keeps: the provider gets the batch's answer instead.
func itemCapture() *responseCapture {
	return &responseCapture{w: &itemWriter{header: make(http.Header)}}
}

// itemExchange returns the exchange of item i, keyed by it, for r: in mode
// split, the delivery of its own that the item is; with body nil, its wait
// for the delivery that holds its claim (policy wait).
func (run *itemRun) itemExchange(i int, r *http.Request, body []byte) *exchange {
	ex := run.ex
	c := &exchange{h: ex.h, r: r, start: ex.h.m.opts.Now(), body: body, scope: ex.scope, kind: keyFromPreset,
		key: run.body.items[run.index[i]].key, storeKey: run.ops[i].Key, fence: run.ops[i].Fence, storeCtx: ex.storeCtx}
	c.out = responseCapture{w: &itemWriter{header: make(http.Header)}}
	return c
}

// runItem runs the handler for the one item of b (mode split), holding its
// claim, which the batch renews, and settles the claim: the handler's
// answer is stored for the item unless the handler failed it (Batch.Fail).
// A panic goes on to the batch's serve.
func (c *exchange) runItem(pending *Record, b *Batch) settled {
	tx := c.offerDelivery(pending)
	defer tx.close()
	c.h.next.ServeHTTP(&c.out, c.r)
	return c.settleClaim(pending, tx, b.close()[0])
}

// itemResult is what the handler answered a request of items, as far as
// the batch's answer needs it when an item failed: the status, and the
// Retry-After.
type itemResult struct {
	status     int
	retryAfter string
}

func itemResultOf(out *responseCapture) itemResult {
	return itemResult{status: out.finalStatus(), retryAfter: out.w.Header().Get("Retry-After")}
}

// runOne runs the handler for item i alone (mode split): in a request whose
// body is the provider's envelope with just that item, holding its claim,
// as a delivery of its own. The first such request also carries the body's
// loose content.
func (run *itemRun) runOne(i int) {
	if run.states[i] == itemNew && !run.isHeld(i) {
		return // lost to a lapse: another delivery runs it
	}
	item := run.index[i]
	body := run.body.render(func(j int) bool { return j == item }, run.loose)
	run.loose = false
	r, b := run.request([]int{i}, body)
	if run.states[i] == itemUnclaimed {
		out := itemCapture()
		run.ex.h.next.ServeHTTP(out, r)
		if failed := b.close(); failed[0] || !httpstatus.IsSuccess(out.finalStatus()) {
			run.fail(i, itemResultOf(out))
		}
		return
	}
	c := run.itemExchange(i, r, body)
	s := c.runItem(run.ops[i].Claim, b) // stores or releases the item's claim (Batch.Fail included)
	c.send(s.answer)
	run.settle(i)
	if s.outcome == OutcomeProcessed {
		run.states[i] = itemProcessed
		return
	}
	run.fail(i, itemResultOf(&c.out))
}

// fail notes that item i failed, as res says.
func (run *itemRun) fail(i int, res itemResult) {
	run.states[i] = itemFailed
	if run.failStatus == 0 {
		run.failStatus, run.failRetryAfter = res.status, res.retryAfter
	}
}

// runFiltered runs the handler once for every new item (mode filter): in a
// request whose body is the provider's envelope with just those items.
// Its answer, stored for each, is theirs; a failure releases them all, and
// the items the handler failed (Batch.Fail) are released whatever it
// answered.
func (run *itemRun) runFiltered() {
	ex := run.ex
	var news []int
	keep := make([]bool, len(run.body.items))
	for i, st := range run.states {
		if st == itemNew || st == itemUnclaimed {
			news = append(news, i)
			keep[run.index[i]] = true
		}
	}
	if len(news) == 0 {
		return
	}
	body := run.body.render(func(j int) bool { return keep[j] }, run.loose)
	run.loose = false
	r, b := run.request(news, body)
	out := itemCapture()
	out.buffering = true
	out.limit = ex.h.rt.MaxStoredBodyBytes
	ex.h.next.ServeHTTP(out, r)
	failed := b.close()
	failHeaderItems(out.w.Header(), b, failed)
	status := out.finalStatus()
	cutShort := out.status == 0 && ex.r.Context().Err() != nil
	var done, released []int
	for j, i := range news {
		if !run.settle(i) && run.states[i] == itemNew {
			run.states[i] = itemFailed // lost to a lapse meanwhile: its answer can't be stored
			continue
		}
		switch {
		case run.states[i] == itemUnclaimed:
			if out.hijacked || cutShort || failed[j] || !httpstatus.IsSuccess(status) {
				run.states[i] = itemFailed
			} else {
				run.states[i] = itemProcessed
			}
		case out.hijacked || cutShort || failed[j] || !ex.h.stores(status):
			released = append(released, i)
		default:
			done = append(done, i)
		}
	}
	run.release(released)
	for _, i := range released {
		run.fail(i, itemResultOf(out))
	}
	if len(done) > 0 {
		run.complete(done, out)
	}
}

// failHeaderItems marks failed the items of b that the answer's
// FailedItemsHeader names, and takes the header out of the answer.
func failHeaderItems(h http.Header, b *Batch, failed []bool) {
	vs := h.Values(FailedItemsHeader)
	if len(vs) == 0 {
		return
	}
	h.Del(FailedItemsHeader)
	for _, v := range vs {
		for _, key := range strings.Split(v, ",") {
			key = NormalizeKey(key)
			for i, it := range b.items {
				if it.Key == key {
					failed[i] = true
				}
			}
		}
	}
}

// complete stores the handler's answer, out, for the items at ops, in one
// batch where the store can.
func (run *itemRun) complete(ops []int, out *responseCapture) {
	ex := run.ex
	m := ex.h.m
	rec := Record{
		State:       StateCompleted,
		CreatedAt:   m.opts.Now(),
		Status:      out.finalStatus(),
		Header:      ex.h.storedHeader(out.w.Header()),
		BodyOmitted: out.omitted,
	}
	if !out.omitted {
		rec.Body = out.buf
	}
	batch := make([]BatchOp, len(ops))
	for j, i := range ops {
		batch[j] = BatchOp{Key: run.ops[i].Key, Claim: run.ops[i].Claim, Done: &rec}
	}
	run.batch("complete", batch, func(ctx context.Context, bs BatchStore) error {
		return bs.CompleteBatch(ctx, batch, ex.h.rt.TTL)
	}, func(ctx context.Context, op *BatchOp) error {
		return m.store.Complete(ctx, op.Key, op.Claim, op.Done, ex.h.rt.TTL)
	})
	for j, i := range ops {
		run.states[i] = itemProcessed
		if err := batch[j].Err; err != nil && !errors.Is(err, ErrNotOwner) {
			ex.warnStore("WebhookIdempotencyInterceptor cache write failed for key=", err)
		}
	}
}

// release releases the claims of the items at ops, in one batch where the
// store can.
func (run *itemRun) release(ops []int) {
	if len(ops) == 0 {
		return
	}
	ex := run.ex
	batch := make([]BatchOp, len(ops))
	for j, i := range ops {
		batch[j] = BatchOp{Key: run.ops[i].Key, Claim: run.ops[i].Claim}
	}
	run.batch("release", batch, func(ctx context.Context, bs BatchStore) error {
		return bs.ReleaseBatch(ctx, batch)
	}, func(ctx context.Context, op *BatchOp) error {
		return ex.h.m.store.Release(ctx, op.Key, op.Claim)
	})
}

// batch makes one store call for every op: one batch on a BatchStore, one
// call each on another store. A failed batch is every op's error.
func (run *itemRun) batch(name string, ops []BatchOp, all func(context.Context, BatchStore) error, one func(context.Context, *BatchOp) error) {
	ex := run.ex
	if bs, ok := ex.h.m.store.(BatchStore); ok {
		if _, err := ex.call(name, func(ctx context.Context) (*Record, error) { return nil, all(ctx, bs) }); err != nil {
			for i := range ops {
				ops[i].Err = err
			}
		}
		return
	}
	for i := range ops {
		_, ops[i].Err = ex.callKey(name, ops[i].Key, func(ctx context.Context) (*Record, error) {
			return nil, one(ctx, &ops[i])
		})
	}
}

// settlePending deals with the items another delivery held when they were
// claimed, as the route's in-flight policy says: wait for each (its answer
// is then this delivery's too, or, released, this delivery runs it),
// proceed without a claim, or leave it to that delivery (reject).
func (run *itemRun) settlePending() {
	ex := run.ex
	for i, st := range run.states {
		if st != itemPending || ex.r.Context().Err() != nil {
			continue
		}
		switch ex.h.rt.InFlight {
		case InFlightReject:
			continue
		case InFlightProceed:
			run.states[i] = itemUnclaimed
			run.runOne(i)
			continue
		}
		c := run.itemExchange(i, ex.r, nil)
		v := c.wait()
		run.waited = true
		switch v.act {
		case actReplay:
			run.states[i] = itemReplayed
		case actRunClaimed: // released meanwhile: this delivery took it over
			run.ops[i].Claim, run.ops[i].Fence = v.claim, c.fence
			run.mu.Lock()
			run.held[i] = true
			run.mu.Unlock()
			run.states[i] = itemNew
			run.runOne(i)
		case actRun: // the store failed while waiting, on_store_error open
			run.states[i] = itemUnclaimed
			run.runOne(i)
		case actProblem:
			if v.status != http.StatusConflict { // the store failed, on_store_error closed
				run.states[i] = itemFailed
				if run.failStatus == 0 {
					run.failStatus, run.failRetryAfter = v.status, v.retryAfter
				}
			}
		}
	}
}

// counts tallies the items' states.
func (run *itemRun) counts() ItemsInfo {
	n := ItemsInfo{Total: len(run.ops)}
	for _, st := range run.states {
		switch st {
		case itemProcessed:
			n.Processed++
		case itemReplayed:
			n.Replayed++
		case itemPending, itemNew:
			n.InFlight++
		default:
			n.Failed++
		}
	}
	return n
}

// answer writes the one answer of the batch: a failure when any item
// failed (the provider retries, and its retry runs only those); 409 when
// another delivery still holds an item (its retry finds it done, or
// released); else the success the provider expects, marked replayed when
// every item was done before. It returns the outcome, with the items'
// counts for the report.
func (run *itemRun) answer() settled {
	ex := run.ex
	n := run.counts()
	h := ex.out.w.Header()
	switch {
	case n.Failed > 0:
		status := run.failStatus
		if status < 400 { // a 3xx or 1xx a route doesn't store: not a success either
			status = http.StatusBadGateway
		}
		if run.failRetryAfter != "" {
			h.Set("Retry-After", run.failRetryAfter)
		}
		ex.writeProblem(status, "Some items failed", fmt.Sprintf(
			"%d of the %d items of this delivery failed (the first answered %d) and were released; %d are done. Send the delivery again: only the items not done run",
			n.Failed, n.Total, run.failStatus, n.Processed+n.Replayed))
		return settled{outcome: OutcomeFailedReleased, items: &n}
	case n.InFlight > 0:
		h.Set("Retry-After", ex.h.leaseAfter)
		ex.writeProblem(http.StatusConflict, "Delivery in progress", fmt.Sprintf(
			"%d of the %d items of this delivery are being processed by another delivery; retry later", n.InFlight, n.Total))
		if run.waited {
			return settled{outcome: OutcomeInFlightRejected, err: errWaitTimeout, items: &n}
		}
		return settled{outcome: OutcomeInFlightRejected, items: &n}
	}
	status, body, contentType := http.StatusOK, "", ""
	if a := ex.h.rt.ItemsSuccess; a != nil {
		status, body = a.Status, string(a.Body)
		for name, v := range a.Header {
			h[name] = slices.Clone(v)
		}
		contentType = h.Get("Content-Type")
	} else if p := ex.h.rt.Preset; p != nil && p.SuccessStatus != 0 {
		status, body = p.SuccessStatus, p.SuccessBody
	}
	outcome := OutcomeProcessed
	if n.Processed == 0 {
		outcome = OutcomeReplayed
		if run.waited {
			outcome = OutcomeInFlightWaited
		}
		h.Set(ReplayedHeader, "true")
		if p := ex.h.rt.Preset; p != nil && p.DuplicateStatus != 0 {
			status = p.DuplicateStatus
		}
	}
	if body != "" && contentType == "" {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	ex.out.WriteHeader(status)
	io.WriteString(&ex.out, body) //nolint:errcheck // the client may be gone
	return settled{outcome: outcome, items: &n}
}

// died settles a batched delivery whose handler panicked (p) or exited its
// goroutine: every claim still held is released, and the provider gets a
// 500 unless an answer is on its way.
func (run *itemRun) died(p any) settled {
	run.stopRenewals()
	var held []int
	for i := range run.held {
		if run.settle(i) {
			held = append(held, i)
		}
	}
	run.release(held)
	return settled{outcome: OutcomeFailedReleased, err: diedError(p), answer: answer{kind: answerFailed}}
}

// itemWriter takes a child request's answer: the middleware keeps what it
// stores, and the provider gets the batch's answer instead.
type itemWriter struct {
	header http.Header
	status int
}

func (w *itemWriter) Header() http.Header { return w.header }
func (w *itemWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
func (w *itemWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}
