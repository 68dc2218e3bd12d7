package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
)

// Claims held in memory. With Config.Lock, no other process uses the file,
// so a pending claim needs no row: it lives in the map below, and only the
// completed record is written. A first delivery then commits once instead
// of twice. The file never held anything durable about a pending claim in
// that case anyway: a claim's owner is a handler of this process, and the
// claims a dead process left behind are freed at the next start
// ([Store.FreePendingClaims]).
//
// The store's calls then keep these rules, which make them act as one
// store, as the file alone does:
//   - A record enters the file only through Complete, on the writer's
//     goroutine, for a key whose claim is held here. The claim leaves the
//     map only after that commit, in the write's after function, under the
//     shard's lock.
//   - So a call that finds no claim in the map and then reads the file sees
//     any record completed before it looked: the removal it saw follows the
//     commit. Get relies on that alone.
//   - Claim must also not miss a record committed after it looked at the map
//     and before it puts its own claim there. It notes the shard's count of
//     completions before it reads the file and checks it is unchanged when
//     it takes the key; otherwise it looks again.
//   - From the moment Complete's write checks ownership until its commit is
//     known, the claim is marked completing: live whatever its lease says,
//     and no longer the owner's to release or extend. Delete removes the
//     claim on the writer's goroutine too, so Delete and Complete happen in
//     one order.
//   - With Config.CacheBytes, a completed record also stays in the shard's
//     cache. It enters there in the same step as its claim leaves the map,
//     after the commit, and only if no Delete took the claim meanwhile.
//     Delete removes it on the writer's goroutine. So the cache never holds
//     a record the file doesn't, and Claim and Get may answer from it.

// heldShards is the number of independently locked parts of the map.
const heldShards = 32

// heldStore is the store of a process holding its file alone (Config.Lock):
// the file store, whose pending claims are held in memory instead of the
// file, with recent records and the key filter (filter.go). Its claim,
// complete, release, extend, get and delete replace the file store's; the
// rest is the file store's.
type heldStore struct {
	*fileStore
	seed   maphash.Seed
	budget int // bytes of cached records per shard; 0 caches none
	shards [heldShards]heldShard
	filter keyFilter // the keys the file can't hold (see filter.go)
	// writeErr is the last write's error while writes fail; healing is set
	// while the probe writes run (see the end of this file).
	writeErr atomic.Pointer[error]
	healing  atomic.Bool

	// building is closed when the key filter's initial build ends; nil
	// when the store keeps no filter (Config.noKeyFilter).
	building chan struct{}
	stop     context.CancelFunc // of the initial build
	lock     *FileLock          // Config.Lock

	// readHook, set by tests only, runs in claim between its read of the
	// file and its second look at the map: where a record committed
	// meanwhile must not be missed.
	readHook atomic.Pointer[func(key string)]
}

type heldShard struct {
	mu sync.Mutex
	m  map[string]*heldClaim
	// completions counts the records Complete has committed to the file for
	// keys of this shard (see the rules above).
	completions uint64
	// records are the completed records kept in memory (Config.CacheBytes),
	// taking bytes of the budget.
	records map[string]cachedRecord
	bytes   int
}

// cachedRecord is a completed record kept in memory, as the file has it.
type cachedRecord struct {
	value     []byte // the record's encoding; never changed once cached
	expiresAt int64  // Unix milliseconds
}

// cacheCost is what a cached record counts against the budget: its key,
// its encoding, and about what the map and the entry take besides.
func cacheCost(key string, value []byte) int { return len(key) + len(value) + 64 }

// heldClaim is a pending claim held in memory. value never changes after
// the claim is stored, so it may be read without the lock.
type heldClaim struct {
	value      []byte // the claim's encoding, compared as the file's value column is
	expiresAt  int64  // Unix milliseconds
	completing bool   // Complete is writing the record
}

// newHeldStore returns the store holding its pending claims over the file
// store s, under lock, with a cache of completed records of at most
// cacheBytes.
func newHeldStore(s *fileStore, cacheBytes int, lock *FileLock) *heldStore {
	h := &heldStore{fileStore: s, seed: maphash.MakeSeed(), budget: cacheBytes / heldShards, lock: lock}
	h.filter.seed = maphash.MakeSeed()
	for i := range h.shards {
		h.shards[i].m = make(map[string]*heldClaim)
		h.shards[i].records = make(map[string]cachedRecord)
	}
	return h
}

// startFilter starts the key filter's initial build. The store's writer must
// be running.
func (h *heldStore) startFilter() {
	ctx, cancel := context.WithCancel(context.Background())
	h.building, h.stop = make(chan struct{}), cancel
	go func() {
		defer close(h.building)
		if err := h.buildFilter(ctx); err != nil && ctx.Err() == nil && h.log != nil {
			h.log.Warn("sqlitestore: building the key filter failed; first deliveries read the file until the sweeper builds it", "err", err)
		}
	}()
}

// close stops the key filter's build, then the file store, and frees the
// lock for another Store.
func (h *heldStore) close() {
	if h.building != nil {
		h.stop()
		<-h.building
	}
	h.fileStore.close()
	h.lock.store.Store(false)
}

// sweepRun is the file store's run of the sweeper, after removing the
// claims and records that have expired from memory and building the key
// filter again when it is stale.
func (h *heldStore) sweepRun(ctx context.Context) error {
	h.sweepMemory(h.nowMillis())
	if h.filterStale() {
		if err := h.buildFilter(ctx); err != nil {
			return err
		}
	}
	return h.fileStore.sweepRun(ctx)
}

// cached returns the encoding of the record cached under key if it is live
// at now, and drops one that has expired. The caller holds sh.mu.
func (sh *heldShard) cached(key string, now int64) []byte {
	r, ok := sh.records[key]
	if !ok {
		return nil
	}
	if r.expiresAt <= now {
		sh.uncache(key)
		return nil
	}
	return r.value
}

// cache keeps value, the record committed under key, until expiresAt,
// dropping other records while the shard's budget would be exceeded. A
// record larger than an eighth of the budget is not kept. The caller holds
// sh.mu.
func (sh *heldShard) cache(key string, value []byte, expiresAt int64, budget int) {
	sh.uncache(key)
	cost := cacheCost(key, value)
	if cost > budget/8 {
		return
	}
	for sh.bytes+cost > budget {
		for k := range sh.records { // a map's order is random: a random victim
			sh.uncache(k)
			break
		}
	}
	sh.records[key] = cachedRecord{value: value, expiresAt: expiresAt}
	sh.bytes += cost
}

// uncache drops the record cached under key, if any. The caller holds
// sh.mu.
func (sh *heldShard) uncache(key string) {
	if r, ok := sh.records[key]; ok {
		sh.bytes -= cacheCost(key, r.value)
		delete(sh.records, key)
	}
}

func (h *heldStore) shard(key string) *heldShard {
	return &h.shards[maphash.String(h.seed, key)%heldShards]
}

// live returns the claim held under key if it is live at now, and removes
// one whose lease has lapsed. The caller holds sh.mu.
func (sh *heldShard) live(key string, now int64) *heldClaim {
	c := sh.m[key]
	if c == nil {
		return nil
	}
	if !c.completing && c.expiresAt <= now {
		delete(sh.m, key)
		return nil
	}
	return c
}

// owned returns the claim held under key if it is live, not completing,
// and has the encoding value; nil otherwise. The caller holds sh.mu.
func (sh *heldShard) owned(key string, value []byte, now int64) *heldClaim {
	c := sh.live(key, now)
	if c == nil || c.completing || !bytes.Equal(c.value, value) {
		return nil
	}
	return c
}

// sweepMemory removes the claims whose lease has lapsed at now, and the
// cached records that have expired.
func (h *heldStore) sweepMemory(now int64) {
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.Lock()
		for key := range sh.m {
			sh.live(key, now)
		}
		for key := range sh.records {
			sh.cached(key, now)
		}
		sh.mu.Unlock()
	}
}

// claim is Claim with the claims held in memory.
func (h *heldStore) claim(ctx context.Context, key string, value []byte, lease time.Duration) (*idemhook.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: claim %q: %w", key, err)
	}
	if err := h.writeFailure(key); err != nil {
		return nil, err
	}
	sh := h.shard(key)
	for {
		sh.mu.Lock()
		now := h.nowMillis()
		if c := sh.live(key, now); c != nil {
			sh.mu.Unlock()
			return decode(key, c.value)
		}
		if v := sh.cached(key, now); v != nil {
			sh.mu.Unlock()
			return decode(key, v)
		}
		if h.filter.absent(key) { // no row: no need to read the file (see filter.go)
			sh.m[key] = &heldClaim{value: value, expiresAt: h.expiry(lease)}
			sh.mu.Unlock()
			return nil, nil
		}
		seen := sh.completions
		sh.mu.Unlock()

		if rec, found, err := h.readLive(ctx, "claim", key); err != nil || found {
			return rec, err
		}
		if hook := h.readHook.Load(); hook != nil {
			(*hook)(key)
		}

		sh.mu.Lock()
		if c := sh.live(key, h.nowMillis()); c != nil {
			sh.mu.Unlock()
			return decode(key, c.value)
		}
		if sh.completions != seen {
			sh.mu.Unlock()
			continue // a record was committed meanwhile, maybe this key's
		}
		sh.m[key] = &heldClaim{value: value, expiresAt: h.expiry(lease)}
		sh.mu.Unlock()
		return nil, nil
	}
}

// complete is Complete with the claims held in memory. The check of the
// claim and the record's write run on the writer's goroutine, in one order
// with Delete.
func (h *heldStore) complete(ctx context.Context, key string, old, value []byte, ttl time.Duration, also func(ctx context.Context, tx *sql.Tx) error) error {
	c := &completion{h: h, sh: h.shard(key), key: key, old: old, value: value, ttl: ttl, also: also}
	var raw rawWrite
	if also == nil { // also runs in a database/sql transaction
		raw = c
	}
	n, err := h.w.doRaw(ctx, "complete", c.run, raw, c.after)
	return casResult("complete", key, n, err)
}

// completion is one Complete of a claim held in memory: its part of a
// write of the writer (run) and what follows that write's commit (after).
// A write may hold several (CompleteBatch).
type completion struct {
	h          *heldStore
	sh         *heldShard
	key        string
	old, value []byte
	ttl        time.Duration
	also       func(ctx context.Context, tx *sql.Tx) error
	mine       *heldClaim // the claim this completion marked completing
	expiresAt  int64      // the record's, as written
}

// run checks the claim, marks it completing and writes the record in tx.
// It returns 1 when it wrote, 0 when the claim is not held.
func (c *completion) run(ctx context.Context, tx *sql.Tx) (int64, error) {
	if !c.take() {
		return 0, nil
	}
	_, err := tx.StmtContext(ctx, c.h.putStmt).ExecContext(ctx, c.key, c.value, c.expiresAt)
	if err == nil && c.also != nil {
		err = c.also(ctx, tx)
	}
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// runRaw is run on the raw connection, for a completion without also.
func (c *completion) runRaw(rc *rawConn) (int64, error) {
	if !c.take() {
		return 0, nil
	}
	if _, err := rc.exec(rawPut, c.key, c.value, c.expiresAt); err != nil {
		return 0, err
	}
	return 1, nil
}

// take is the start of run: it checks the claim and marks it completing,
// sets the record's expiry and tells the key filter. It reports whether
// the claim is held, and so the record is to be written.
func (c *completion) take() bool {
	h, sh := c.h, c.sh
	sh.mu.Lock()
	if c.mine == nil { // not on a second run of the write (see writer.run)
		c.mine = sh.owned(c.key, c.old, h.nowMillis())
		if c.mine != nil {
			c.mine.completing = true
		}
	}
	sh.mu.Unlock()
	if c.mine == nil {
		return false
	}
	c.expiresAt = h.expiry(c.ttl)
	h.filter.added(c.key) // before the commit (see filter.go)
	return true
}

// after ends the completion once the write's outcome is known.
func (c *completion) after(committed bool) {
	if c.mine == nil {
		return
	}
	h, sh, key := c.h, c.sh, c.key
	sh.mu.Lock()
	c.mine.completing = false
	if committed {
		if sh.m[key] == c.mine { // no Delete took it meanwhile
			delete(sh.m, key)
			if h.budget > 0 {
				sh.cache(key, c.value, c.expiresAt, h.budget)
			}
		}
		sh.completions++
	}
	sh.mu.Unlock()
}

// release is Release with the claims held in memory.
func (h *heldStore) release(ctx context.Context, key string, old []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlitestore: release %q: %w", key, err)
	}
	sh := h.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.owned(key, old, h.nowMillis()) == nil {
		return idemhook.ErrNotOwner
	}
	delete(sh.m, key)
	return nil
}

// extend is Extend with the claims held in memory.
func (h *heldStore) extend(ctx context.Context, key string, old []byte, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlitestore: extend %q: %w", key, err)
	}
	sh := h.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := sh.owned(key, old, h.nowMillis())
	if c == nil {
		return idemhook.ErrNotOwner
	}
	c.expiresAt = h.expiry(lease)
	return nil
}

// get is Get with the claims held in memory: the live claim or cached
// record held under key, or else the file's record.
func (h *heldStore) get(ctx context.Context, key string) (*idemhook.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: get %q: %w", key, err)
	}
	if value := h.lookup(key); value != nil {
		return decode(key, value)
	}
	return h.fileStore.get(ctx, key)
}

// lookup returns the encoding of the live claim held under key, or of
// the live record cached there, or nil.
func (h *heldStore) lookup(key string) []byte {
	sh := h.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := h.nowMillis()
	if c := sh.live(key, now); c != nil {
		return c.value
	}
	return sh.cached(key, now)
}

// delete is Delete with the claims held in memory: the claim held under key
// and the file's row go in one write.
func (h *heldStore) delete(ctx context.Context, key string) (bool, error) {
	var expiresAt int64
	var heldLive bool
	var restore func() // puts back the claim held in memory, if Delete failed
	n, err := h.w.doThen(ctx, "delete", func(ctx context.Context, tx *sql.Tx) (int64, error) {
		if restore == nil { // not on a second run (see writer.run)
			heldLive, restore = h.unhold(key)
		}
		return h.deleteRow(ctx, tx, key, &expiresAt)
	}, func(committed bool) {
		if !committed && restore != nil {
			restore()
		}
	})
	if err != nil {
		return false, fmt.Errorf("sqlitestore: delete %q: %w", key, err)
	}
	return heldLive || n == 1 && expiresAt > h.nowMillis(), nil
}

// unhold removes the claim held under key, whatever its owner, and
// reports whether it was live. It runs in Delete's write, on the writer's
// goroutine (see the rules above). restore puts the claim back if that
// write was not committed and no other claim took the key meanwhile.
func (h *heldStore) unhold(key string) (live bool, restore func()) {
	sh := h.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.uncache(key) // the file still has it if the delete fails
	c := sh.live(key, h.nowMillis())
	if c == nil {
		return false, func() {}
	}
	delete(sh.m, key)
	return true, func() {
		sh.mu.Lock()
		if sh.m[key] == nil {
			sh.m[key] = c
		}
		sh.mu.Unlock()
	}
}

// Writes that fail. With claims in memory, a Claim doesn't write, so a file
// that can't be written (a full disk, an I/O error, pages overwritten) would
// go unnoticed until the delivery's Complete, after its handler ran. So once
// a write fails, Claim fails too, with that error: the middleware applies
// the route's store-error policy (fail open with the WARN, or 503 under
// on_store_error: closed) as it did when the claim itself was written. A
// probe write, every healInterval, clears the failure once the file takes
// writes again (any write that commits does).

// healInterval is how often a store whose writes fail tries a probe write.
const healInterval = 500 * time.Millisecond

// writeHealth records the outcome of a commit of the writer.
func (h *heldStore) writeHealth(err error) {
	if err == nil {
		if h.writeErr.Load() != nil {
			h.writeErr.Store(nil)
			if h.log != nil {
				h.log.Info("sqlitestore: writes to the file succeed again: claims resume")
			}
		}
		return
	}
	if h.writeErr.Swap(&err) == nil && h.log != nil {
		h.log.Error("sqlitestore: a write to the file failed: claims fail until a write succeeds", "err", err)
	}
	if h.healing.CompareAndSwap(false, true) {
		go h.heal()
	}
}

// heal tries a probe write every healInterval until one commits (the
// writer then clears the failure) or the store is closed.
func (h *heldStore) heal() {
	defer h.healing.Store(false)
	t := time.NewTicker(healInterval)
	defer t.Stop()
	for h.writeErr.Load() != nil {
		select {
		case <-h.w.workers.Stopped():
			return
		case <-t.C:
		}
		h.w.do(context.Background(), "write probe", func(ctx context.Context, tx *sql.Tx) (int64, error) { //nolint:errcheck // the writer reports the outcome
			// A row that is absent to every call (expired), gone again
			// before the commit: the write touches pages, changes nothing.
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO idem_keys (key, value, expires_at) VALUES ('idemhook:write-probe', x'', 0)`); err != nil {
				return 0, err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM idem_keys WHERE key = 'idemhook:write-probe'`)
			return 0, err
		})
	}
}

// writeFailure is the error Claim returns while writes fail, or nil.
func (h *heldStore) writeFailure(key string) error {
	if p := h.writeErr.Load(); p != nil {
		return fmt.Errorf("sqlitestore: claim %q: the file can't be written (the last write failed: %w); claims fail until a write succeeds", key, *p)
	}
	return nil
}
