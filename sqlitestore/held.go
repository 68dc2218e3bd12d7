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

// claimReadHook, set by tests only, runs in Claim between its read of the
// file and its second look at the map: where a record committed meanwhile
// must not be missed.
var claimReadHook atomic.Pointer[func(s *Store, key string)]

// heldShards is the number of independently locked parts of the map.
const heldShards = 32

type heldClaims struct {
	seed   maphash.Seed
	budget int // bytes of cached records per shard; 0 caches none
	shards [heldShards]heldShard
	filter keyFilter // the keys the file can't hold (see filter.go)
	// writeErr is the last write's error while writes fail; healing is set
	// while the probe writes run (see the end of this file).
	writeErr atomic.Pointer[error]
	healing  atomic.Bool
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

// newHeldClaims returns the claims of a store, with a cache of completed
// records of at most cacheBytes.
func newHeldClaims(cacheBytes int) *heldClaims {
	h := &heldClaims{seed: maphash.MakeSeed(), budget: cacheBytes / heldShards}
	h.filter.seed = maphash.MakeSeed()
	for i := range h.shards {
		h.shards[i].m = make(map[string]*heldClaim)
		h.shards[i].records = make(map[string]cachedRecord)
	}
	return h
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

func (h *heldClaims) shard(key string) *heldShard {
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

// sweep removes the claims whose lease has lapsed at now.
func (h *heldClaims) sweep(now int64) {
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

// claimHeld is Claim with the claims held in memory.
func (s *Store) claimHeld(ctx context.Context, key string, value []byte, lease time.Duration) (*idemhook.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: claim %q: %w", key, err)
	}
	if err := s.writeFailure(key); err != nil {
		return nil, err
	}
	sh := s.held.shard(key)
	for {
		sh.mu.Lock()
		now := s.nowMillis()
		if c := sh.live(key, now); c != nil {
			sh.mu.Unlock()
			return decode(key, c.value)
		}
		if v := sh.cached(key, now); v != nil {
			sh.mu.Unlock()
			return decode(key, v)
		}
		if s.held.filter.absent(key) { // no row: no need to read the file (see filter.go)
			sh.m[key] = &heldClaim{value: value, expiresAt: s.expiry(lease)}
			sh.mu.Unlock()
			return nil, nil
		}
		seen := sh.completions
		sh.mu.Unlock()

		if rec, found, err := s.readLive(ctx, "claim", key); err != nil || found {
			return rec, err
		}
		if hook := claimReadHook.Load(); hook != nil {
			(*hook)(s, key)
		}

		sh.mu.Lock()
		if c := sh.live(key, s.nowMillis()); c != nil {
			sh.mu.Unlock()
			return decode(key, c.value)
		}
		if sh.completions != seen {
			sh.mu.Unlock()
			continue // a record was committed meanwhile, maybe this key's
		}
		sh.m[key] = &heldClaim{value: value, expiresAt: s.expiry(lease)}
		sh.mu.Unlock()
		return nil, nil
	}
}

// completeHeld is Complete with the claims held in memory. The check of the
// claim and the record's write run on the writer's goroutine, in one order
// with Delete.
func (s *Store) completeHeld(ctx context.Context, key string, old, value []byte, ttl time.Duration) error {
	sh := s.held.shard(key)
	var mine *heldClaim // the claim this call marked completing
	var expiresAt int64 // the record's, as written
	run := func(ctx context.Context, tx *sql.Tx) (int64, error) {
		sh.mu.Lock()
		if mine == nil { // not on a second run of the write (see writer.run)
			mine = sh.owned(key, old, s.nowMillis())
			if mine != nil {
				mine.completing = true
			}
		}
		sh.mu.Unlock()
		if mine == nil {
			return 0, nil
		}
		expiresAt = s.expiry(ttl)
		s.held.filter.added(key) // before the commit (see filter.go)
		_, err := tx.StmtContext(ctx, s.put).ExecContext(ctx, key, value, expiresAt)
		if err != nil {
			return 0, err
		}
		return 1, nil
	}
	after := func(committed bool) {
		if mine == nil {
			return
		}
		sh.mu.Lock()
		mine.completing = false
		if committed {
			if sh.m[key] == mine { // no Delete took it meanwhile
				delete(sh.m, key)
				if s.held.budget > 0 {
					sh.cache(key, value, expiresAt, s.held.budget)
				}
			}
			sh.completions++
		}
		sh.mu.Unlock()
	}
	n, err := s.w.doThen(ctx, run, after)
	return casResult("complete", key, n, err)
}

// releaseHeld is Release with the claims held in memory.
func (s *Store) releaseHeld(ctx context.Context, key string, old []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlitestore: release %q: %w", key, err)
	}
	sh := s.held.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.owned(key, old, s.nowMillis()) == nil {
		return idemhook.ErrNotOwner
	}
	delete(sh.m, key)
	return nil
}

// extendHeld is Extend with the claims held in memory.
func (s *Store) extendHeld(ctx context.Context, key string, old []byte, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlitestore: extend %q: %w", key, err)
	}
	sh := s.held.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := sh.owned(key, old, s.nowMillis())
	if c == nil {
		return idemhook.ErrNotOwner
	}
	c.expiresAt = s.expiry(lease)
	return nil
}

// getHeld returns the encoding of the live claim held under key, or of
// the live record cached there, or nil. The caller has checked its context.
func (s *Store) getHeld(key string) []byte {
	sh := s.held.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.nowMillis()
	if c := sh.live(key, now); c != nil {
		return c.value
	}
	return sh.cached(key, now)
}

// deleteHeld removes the claim held under key, whatever its owner, and
// reports whether it was live. It runs in Delete's write, on the writer's
// goroutine (see the rules above). restore puts the claim back if that
// write was not committed and no other claim took the key meanwhile.
func (s *Store) deleteHeld(key string) (live bool, restore func()) {
	sh := s.held.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.uncache(key) // the file still has it if the delete fails
	c := sh.live(key, s.nowMillis())
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
func (s *Store) writeHealth(err error) {
	if err == nil {
		if s.held.writeErr.Load() != nil {
			s.held.writeErr.Store(nil)
			if s.log != nil {
				s.log.Info("sqlitestore: writes to the file succeed again: claims resume")
			}
		}
		return
	}
	if s.held.writeErr.Swap(&err) == nil && s.log != nil {
		s.log.Error("sqlitestore: a write to the file failed: claims fail until a write succeeds", "err", err)
	}
	if s.held.healing.CompareAndSwap(false, true) {
		go s.heal()
	}
}

// heal tries a probe write every healInterval until one commits (the
// writer then clears the failure) or the store is closed.
func (s *Store) heal() {
	defer s.held.healing.Store(false)
	t := time.NewTicker(healInterval)
	defer t.Stop()
	for s.held.writeErr.Load() != nil {
		select {
		case <-s.w.workers.Stopped():
			return
		case <-t.C:
		}
		s.w.do(context.Background(), func(ctx context.Context, tx *sql.Tx) (int64, error) { //nolint:errcheck // the writer reports the outcome
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
func (s *Store) writeFailure(key string) error {
	if p := s.held.writeErr.Load(); p != nil {
		return fmt.Errorf("sqlitestore: claim %q: the file can't be written (the last write failed: %w); claims fail until a write succeeds", key, *p)
	}
	return nil
}
