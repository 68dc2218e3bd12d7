// Package memstore is an in-memory [idemhook.Store] for one process: the
// library's default, and the store of tests.
//
// Keys live in shards, each behind its own mutex. A shard holds its entries
// in a few large byte slices (segments), indexed by a map from the 64-bit
// hash of a key to the entry's place: neither holds a pointer per key, so
// the garbage collector's work hardly grows with the number of keys held
// (about 2 ns of CPU per key per cycle). When each entry was an allocation
// of its own, in a map of strings, it took 170-770 ns per key (6-8 s per
// cycle at 10M keys), which every request of the process paid for: see
// TestFirstDeliveryTail and docs/benchmarks.md. A key whose hash collides
// with another's is told apart by comparing the keys' bytes; the rare
// second key of a hash is indexed by its bytes in a small map of its own.
// Segments with much dead space (removed or replaced entries) are
// compacted when a new one is opened, so memory stays within about 1.5
// times the live entries, plus about a segment (256 KiB) per shard.
//
// An entry holds the record in an encoding of the package's own (smaller
// than idemhook's binary one, which the other stores persist: common
// header names and values take a byte each, the created-at a few), its key
// and its expiry. Keys that end in a lowercase hex SHA-256, the body-hash
// keys of the middleware, are held in 32 bytes instead of 64, and the part
// before the digits ("idem:<source>:sha256:"), which repeats for every key
// of a source, is held once per store and in each key as one byte (for up
// to 254 such prefixes of at most 64 bytes; others are held in full). A
// typical small response so takes a slot of 75 bytes and its index entry:
// about 107 bytes per key (see BenchmarkMemoryPerKey). A completion
// rewrites the claim's slot in place when it fits, as it usually does.
//
// Expired entries are absent to every call. They are removed when a call
// meets them, when compaction copies them, and all at once when a shard
// has grown by half since it was last swept (amortized, three entries
// looked at per new key): under steady traffic a shard holds at most 1.5
// times its live keys (or 1024 entries), so dead keys can't pile up. No
// goroutine runs in the background.
package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
)

// Defaults of [Config].
const (
	DefaultMaxEntries = 1_000_000
	DefaultShards     = 64
)

// ErrFull is returned by Claim when the store holds MaxEntries keys and none
// can be dropped: every entry of the key's shard is a live pending claim.
// The middleware treats it as any store error (fail-open by default).
var ErrFull = errors.New("memstore: full: every entry of the shard is a running claim (raise Config.MaxEntries)")

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("memstore: store is closed")

// Config configures a [Store]. The zero value means the defaults.
type Config struct {
	// Now is the clock that leases and TTLs are measured with. Default
	// time.Now.
	Now func() time.Time

	// MaxEntries bounds the number of keys held, expired ones included.
	// The bound is kept per shard (MaxEntries/Shards keys each, so the
	// total never exceeds MaxEntries). When a Claim finds its shard full it
	// frees 1/16 of the shard, as a cache would: expired entries, and
	// completed records among the quarter of the shard closest to expiry
	// (as judged from a sample of 1024 of its entries). Those are the
	// oldest answers, whose retries are least likely to come. A shard that
	// is a quarter expired or more is swept of all its expired entries
	// instead. Pending claims are never evicted (a running handler would
	// lose its protection against a concurrent duplicate): when the whole
	// shard is pending claims, Claim fails with ErrFull. Default 1_000_000.
	MaxEntries int

	// Shards is the number of independently locked parts of the map, a
	// power of two. It is lowered to the largest power of two not above
	// MaxEntries when MaxEntries is smaller. Default 64.
	Shards int
}

// Store is an in-memory [idemhook.Store]. It is safe for concurrent use.
type Store struct {
	now      func() time.Time
	hasher   hasher
	mask     uint64
	perShard int // capacity of each shard
	shards   []shard
	closed   atomic.Bool
	prefixes prefixTable
	// epoch is the store's creation time in Unix milliseconds: records hold
	// their created-at as a difference from it, shorter than the time itself.
	epoch int64
}

var (
	_ idemhook.NamedStore     = (*Store)(nil)
	_ idemhook.InProcessStore = (*Store)(nil)
)

type shard struct {
	mu sync.Mutex
	// index maps the hash of a compact key to the location of its entry in
	// the arena. A key whose hash another key's entry holds in index is
	// in overflow instead, under its bytes: a collision of 64-bit hashes
	// of a random seed, which nobody can aim at, so overflow is nearly
	// always empty. Both are nil once the store is closed.
	index    map[uint64]uint64
	overflow map[string]uint64
	arena    arena
	hasher   hasher // the store's
	// sweepAt is the size at which the shard is swept in full: 1.5 times
	// its size after the previous sweep.
	sweepAt int
	// fullUntil is set when the shard was found full of pending claims:
	// until that time (the end of the first of their leases) or until an
	// entry is removed, Claim fails fast rather than scan the shard again.
	fullUntil int64
	_         [32]byte // 160 bytes of fields: keep shards on separate cache lines
}

// len is the number of entries held. The caller holds sh.mu.
func (sh *shard) len() int { return len(sh.index) + len(sh.overflow) }

// entry returns the entry at loc and its compact key's length. The bytes
// are the arena's: the caller holds sh.mu while it reads them.
func (sh *shard) entry(loc uint64) (e []byte, klen int) { return entryIn(sh.arena.slot(loc)) }

// find returns the location of the entry under ck, whose hash is h. The
// caller holds sh.mu.
func (sh *shard) find(h uint64, ck []byte) (loc uint64, ok bool) {
	if loc, ok := sh.index[h]; ok {
		if e, klen := sh.entry(loc); bytes.Equal(e[entryHeader:entryHeader+klen], ck) {
			return loc, true
		}
	}
	if len(sh.overflow) == 0 {
		return 0, false
	}
	loc, ok = sh.overflow[string(ck)]
	return loc, ok
}

// holds reports whether the entry at loc, under ck of hash h, is indexed:
// whether its slot is live. The caller holds sh.mu.
func (sh *shard) holds(h uint64, ck []byte, loc uint64) bool {
	if l, ok := sh.index[h]; ok && l == loc {
		return true
	}
	if len(sh.overflow) == 0 {
		return false // as nearly always: no hashing of ck for a dead slot
	}
	l, ok := sh.overflow[string(ck)]
	return ok && l == loc
}

// insert stores entry e under ck, of hash h, which the shard does not
// hold. The caller holds sh.mu.
func (sh *shard) insert(h uint64, ck, e []byte, now int64) {
	loc, opened := sh.arena.put(e, len(ck))
	if _, taken := sh.index[h]; taken {
		if sh.overflow == nil {
			sh.overflow = make(map[string]uint64)
		}
		sh.overflow[string(ck)] = loc
	} else {
		sh.index[h] = loc
	}
	if opened {
		sh.collect(now)
	}
}

// replace puts entry e in place of the one at loc, under ck of hash h: in
// its slot when it fits, else in a new one. The caller holds sh.mu.
func (sh *shard) replace(h uint64, ck []byte, loc uint64, e []byte, now int64) {
	sh.fullUntil = 0 // as remove does: a completed record may make room
	if slot := sh.arena.slot(loc); fits(slot, len(e), len(ck)) {
		fill(slot, e, len(ck))
		return
	}
	to, opened := sh.arena.put(e, len(ck))
	sh.relocate(h, ck, loc, to)
	sh.arena.release(loc)
	if opened {
		sh.collect(now)
	}
}

// relocate points the index of the entry under ck, of hash h, from the
// slot at from to the one at to. The caller holds sh.mu.
func (sh *shard) relocate(h uint64, ck []byte, from, to uint64) {
	if l, ok := sh.index[h]; ok && l == from {
		sh.index[h] = to
	} else {
		sh.overflow[string(ck)] = to
	}
}

// remove deletes the entry at loc, whose compact key has hash h. The
// caller holds sh.mu.
func (sh *shard) remove(h, loc uint64) {
	if l, ok := sh.index[h]; ok && l == loc {
		delete(sh.index, h)
	} else {
		e, klen := sh.entry(loc)
		delete(sh.overflow, string(e[entryHeader:entryHeader+klen]))
	}
	sh.arena.release(loc)
	sh.fullUntil = 0
}

// all yields the hash and location of every entry of the shard, from a
// random place. The loop may remove the entry it is given. The caller
// holds sh.mu.
func (sh *shard) all(yield func(h, loc uint64) bool) {
	for h, loc := range sh.index {
		if !yield(h, loc) {
			return
		}
	}
	for ck, loc := range sh.overflow {
		if !yield(sh.hasher.hash([]byte(ck)), loc) {
			return
		}
	}
}

// Compaction. When an entry opens a new segment, the shard copies the
// live slots of the segments with the most dead space into the open one
// and frees them, while a third or more of the arena is dead: each copy
// frees at least a third as much as it copies (see arena.victim), so a
// byte written costs a bounded amount of copying, and memory stays within
// 1.5 times the live slots plus the open segment. At most maxCompactions
// segments are copied per call, to bound the time one call holds the lock.
const maxCompactions = 4

// collect compacts the arena as said above. The caller holds sh.mu.
func (sh *shard) collect(now int64) {
	a := &sh.arena
	for range maxCompactions {
		if 3*(a.used-a.live) < a.used {
			return
		}
		seg, ok := a.victim()
		if !ok {
			return
		}
		sh.compact(seg, now)
	}
}

// compact copies the live slots of segment seg to the open one, dropping
// expired entries, which frees seg. The caller holds sh.mu.
func (sh *shard) compact(seg uint32, now int64) {
	buf := sh.arena.segs[seg].buf
	// The segment is freed as its last live slot goes: stop there.
	for off := 0; off < len(buf) && sh.arena.segs[seg].live > 0; {
		slot := slotAt(buf[off:])
		loc := location(seg, off)
		off += len(slot)
		e, klen := entryIn(slot)
		ck := e[entryHeader : entryHeader+klen]
		h := sh.hasher.hash(ck)
		switch {
		case !sh.holds(h, ck, loc):
		case expired(e, now):
			sh.remove(h, loc)
		default:
			// put may open a segment, but not compact: that is collect's.
			to, _ := sh.arena.put(e, klen)
			sh.relocate(h, ck, loc, to)
			sh.arena.release(loc)
		}
	}
}

// minSweepAt is the smallest size that triggers a full sweep.
const minSweepAt = 1024

// New returns a Store configured by cfg.
func New(cfg Config) (*Store, error) { return newStore(cfg, ^uint64(0)) }

// A hasher hashes compact keys, keeping the bits of keep: all of them,
// but fewer in tests, so that keys collide.
type hasher struct {
	seed maphash.Seed
	keep uint64
}

func (hs hasher) hash(ck []byte) uint64 { return maphash.Bytes(hs.seed, ck) & hs.keep }

// newStore is New keeping the bits keep of the keys' hashes.
func newStore(cfg Config, keep uint64) (*Store, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxEntries < 0 {
		return nil, fmt.Errorf("memstore: MaxEntries is %d; want a positive bound, or 0 for the default %d", cfg.MaxEntries, DefaultMaxEntries)
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Shards < 0 || bits.OnesCount(uint(cfg.Shards)) != 1 {
		return nil, fmt.Errorf("memstore: Shards is %d; want a power of two, or 0 for the default %d", cfg.Shards, DefaultShards)
	}
	for cfg.Shards > cfg.MaxEntries {
		cfg.Shards /= 2
	}
	s := &Store{
		now:      cfg.Now,
		hasher:   hasher{maphash.MakeSeed(), keep},
		mask:     uint64(cfg.Shards - 1),
		perShard: cfg.MaxEntries / cfg.Shards,
		shards:   make([]shard, cfg.Shards),
		epoch:    cfg.Now().UnixMilli(),
	}
	for i := range s.shards {
		s.shards[i].index = make(map[uint64]uint64)
		s.shards[i].hasher = s.hasher
		s.shards[i].sweepAt = minSweepAt
	}
	return s, nil
}

// Name names the store in the middleware's logs.
func (s *Store) Name() string { return "memory" }

// InProcess tells the middleware that calls never wait on I/O, so they need
// no deadline.
func (s *Store) InProcess() bool { return true }

// Len returns the number of keys held, counting expired keys that have not
// been removed yet: the number MaxEntries bounds.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.len()
		sh.mu.Unlock()
	}
	return n
}

// Close drops every entry; later calls fail with ErrClosed. The store runs
// no goroutine, so Close is only needed to free the memory early.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.index, sh.overflow, sh.arena = nil, nil, arena{}
		sh.mu.Unlock()
	}
	return nil
}

// Claim implements [idemhook.Store].
func (s *Store) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := checkClaim(claim); err != nil {
		return nil, err
	}
	if lease <= 0 {
		return nil, fmt.Errorf("memstore: claim lease is %v; want a positive duration", lease)
	}
	var kbuf, ebuf, rbuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, true)
	now := s.now().UnixNano()
	entry, err := newEntry(ebuf[:0], expiry(now, lease), ck, claim, s.epoch)
	if err != nil {
		return nil, err
	}

	h := s.hasher.hash(ck)
	existing, found, err := s.claim(&s.shards[h&s.mask], h, ck, entry, now, rbuf[:0])
	if err != nil || !found {
		return nil, err
	}
	// A private copy of the record: decode outside the lock.
	return decodeRecord(view(existing), s.epoch)
}

// claim stores entry under ck, of hash h, unless the shard holds a live
// entry there, whose record it then appends to rec.
func (s *Store) claim(sh *shard, h uint64, ck, entry []byte, now int64, rec []byte) ([]byte, bool, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.index == nil {
		return nil, false, ErrClosed
	}
	if loc, ok := sh.find(h, ck); ok {
		e, klen := sh.entry(loc)
		if !expired(e, now) {
			return append(rec, e[entryHeader+klen:]...), true, nil
		}
		sh.remove(h, loc)
	}
	if sh.len() >= s.perShard {
		if now < sh.fullUntil || !s.makeRoom(sh, now) {
			return nil, false, ErrFull
		}
	} else if sh.len() >= sh.sweepAt {
		sh.sweep(now)
	}
	sh.insert(h, ck, entry, now)
	return nil, false, nil
}

// Complete implements [idemhook.Store].
func (s *Store) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkClaim(claim); err != nil {
		return err
	}
	if done == nil || done.State != idemhook.StateCompleted {
		return fmt.Errorf("memstore: Complete wants a completed record, got %v", stateOf(done))
	}
	if ttl <= 0 {
		return fmt.Errorf("memstore: record TTL is %v; want a positive duration", ttl)
	}
	var kbuf, ebuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, false)
	now := s.now().UnixNano()
	entry, err := newEntry(ebuf[:0], expiry(now, ttl), ck, done, s.epoch)
	if err != nil {
		return err
	}

	h := s.hasher.hash(ck)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	loc, err := sh.owned(h, ck, claim, now)
	if err != nil {
		return err
	}
	sh.replace(h, ck, loc, entry, now)
	return nil
}

// Release implements [idemhook.Store].
func (s *Store) Release(ctx context.Context, key string, claim *idemhook.Record) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkClaim(claim); err != nil {
		return err
	}
	var kbuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, false)
	now := s.now().UnixNano()

	h := s.hasher.hash(ck)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	loc, err := sh.owned(h, ck, claim, now)
	if err != nil {
		return err
	}
	sh.remove(h, loc)
	return nil
}

// Extend implements [idemhook.Store].
func (s *Store) Extend(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkClaim(claim); err != nil {
		return err
	}
	if lease <= 0 {
		return fmt.Errorf("memstore: claim lease is %v; want a positive duration", lease)
	}
	var kbuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, false)
	now := s.now().UnixNano()

	h := s.hasher.hash(ck)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	loc, err := sh.owned(h, ck, claim, now)
	if err != nil {
		return err
	}
	// The expiry is rewritten in place.
	e, _ := sh.entry(loc)
	putMeta(e, expiry(now, lease), false)
	sh.fullUntil = 0 // the first lease to end may be another one now
	return nil
}

// Get implements [idemhook.Store].
func (s *Store) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var kbuf, rbuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, false)
	now := s.now().UnixNano()

	h := s.hasher.hash(ck)
	rec, found := s.shards[h&s.mask].get(h, ck, now, rbuf[:0])
	if !found {
		return nil, nil
	}
	return decodeRecord(view(rec), s.epoch)
}

// get appends to rec the record of the live entry under ck, of hash h, and
// reports whether there is one.
func (sh *shard) get(h uint64, ck []byte, now int64, rec []byte) ([]byte, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	loc, ok := sh.find(h, ck)
	if !ok {
		return nil, false
	}
	e, klen := sh.entry(loc)
	if expired(e, now) {
		sh.remove(h, loc)
		return nil, false
	}
	return append(rec, e[entryHeader+klen:]...), true
}

// Delete implements [idemhook.Store].
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	var kbuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, false)
	now := s.now().UnixNano()

	h := s.hasher.hash(ck)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	loc, ok := sh.find(h, ck)
	if !ok {
		return false, nil
	}
	e, _ := sh.entry(loc)
	live := !expired(e, now)
	sh.remove(h, loc)
	return live, nil
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// owned returns the location of the live pending claim with claim's token
// that the shard holds under ck, of hash h, or ErrNotOwner. The caller
// holds sh.mu.
func (sh *shard) owned(h uint64, ck []byte, claim *idemhook.Record, now int64) (uint64, error) {
	if sh.index == nil {
		return 0, ErrClosed
	}
	loc, ok := sh.find(h, ck)
	if !ok {
		return 0, idemhook.ErrNotOwner
	}
	e, klen := sh.entry(loc)
	if expired(e, now) {
		sh.remove(h, loc)
		return 0, idemhook.ErrNotOwner
	}
	if completed(e) {
		return 0, idemhook.ErrNotOwner
	}
	// The token is compared in place: no decoding, no allocation.
	token, err := pendingToken(view(e[entryHeader+klen:]))
	if err != nil {
		return 0, err
	}
	if token != claim.Token {
		return 0, idemhook.ErrNotOwner
	}
	return loc, nil
}

// sweep removes every expired entry of the shard. The caller holds sh.mu.
func (sh *shard) sweep(now int64) {
	for h, loc := range sh.all {
		if e, _ := sh.entry(loc); expired(e, now) {
			sh.remove(h, loc)
		}
	}
	sh.sweepAt = max(sh.len()+sh.len()/2, minSweepAt)
}

// Eviction. A full shard frees 1/evictShare of its capacity at a time, so
// that the cost of looking through its index is shared by that many new
// keys: each entry looked at is a read at a random place of the arena, a
// cache miss. The records to evict are taken from the 1/evictPool of the
// shard closest to expiry, as judged from a sample of evictSample entries,
// so that a pass finds enough of them in about a quarter of the index.
// (Freeing 1/64 at a time, the exact 1/64 closest to expiry found by
// sorting every completed record, as this store did before, cost a first
// delivery 32µs on a full store of 1M keys: BenchmarkFirstDeliveryWhenFull.)
const (
	evictShare  = 16
	evictPool   = 4
	evictSample = 1024
)

// makeRoom frees about 1/16 of a full shard (at least one entry). When a
// quarter of evictLimit's sample is expired, it sweeps the whole shard,
// which frees about that quarter. Otherwise it goes through the index, from
// a random place, removing the expired entries and the completed records
// that expire no later than evictLimit says, until the shard is down to its
// target size. If that frees nothing (a shard of pending claims whose few
// completed records the sample missed), it looks at every entry. It reports
// false when no entry could be freed. The caller holds sh.mu.
func (s *Store) makeRoom(sh *shard, now int64) bool {
	target := s.perShard - max(1, s.perShard/evictShare)
	limit := evictLimit(sh, now)
	if limit == math.MinInt64 {
		sh.sweep(now)
	} else {
		for h, loc := range sh.all {
			if sh.len() <= target {
				break
			}
			if e, _ := sh.entry(loc); expired(e, now) || completed(e) && expiryOf(e) <= limit {
				sh.remove(h, loc)
			}
		}
		if sh.len() >= s.perShard {
			sh.sweep(now)
		}
	}
	return sh.len() < s.perShard || s.evictClosestToExpiry(sh, target)
}

// evictLimit returns the expiry at or below which makeRoom evicts completed
// records. In a sample of the shard's entries (the first evictSample of the
// index's iteration, which starts at a random place), the entries that
// would go first are the expired ones, then the completed records by
// expiry (pending claims never go); the limit is the expiry of the one a
// quarter of the way through the sample. It is math.MinInt64 when a
// quarter of the sample is expired entries, or when the sample holds no
// completed record. The caller holds sh.mu.
func evictLimit(sh *shard, now int64) int64 {
	var buf [evictSample]int64
	sample, seen := buf[:0], 0
	for _, loc := range sh.all {
		if seen == evictSample {
			break
		}
		seen++
		e, _ := sh.entry(loc)
		switch {
		case expired(e, now):
			sample = append(sample, math.MinInt64)
		case completed(e):
			sample = append(sample, expiryOf(e))
		}
	}
	if len(sample) == 0 {
		return math.MinInt64
	}
	slices.Sort(sample)
	return sample[min(len(sample), max(1, seen/evictPool))-1]
}

// evictClosestToExpiry evicts the completed records of the shard that are
// closest to expiry until it is down to target entries, looking at every
// one. It reports false when the shard holds none, and then fails the
// shard's claims fast until its first lease ends. The caller holds sh.mu.
func (s *Store) evictClosestToExpiry(sh *shard, target int) bool {
	type candidate struct {
		exp    int64
		h, loc uint64
	}
	var done []candidate
	firstEnd := int64(maxExpiry)
	for h, loc := range sh.all {
		e, _ := sh.entry(loc)
		if completed(e) {
			done = append(done, candidate{expiryOf(e), h, loc})
		} else {
			firstEnd = min(firstEnd, expiryOf(e))
		}
	}
	if len(done) == 0 {
		sh.fullUntil = firstEnd
		return false
	}
	n := min(sh.len()-target, len(done))
	if n < len(done) {
		slices.SortFunc(done, func(a, b candidate) int { return cmpInt64(a.exp, b.exp) })
	}
	// Removing frees no slot but the ones removed: the other locations
	// stay good.
	for _, c := range done[:n] {
		sh.remove(c.h, c.loc)
	}
	return sh.len() < s.perShard
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func checkClaim(claim *idemhook.Record) error {
	if claim == nil || claim.State != idemhook.StatePending {
		return fmt.Errorf("memstore: want a pending claim, got %v", stateOf(claim))
	}
	if claim.Token == "" {
		return errors.New("memstore: claim has no owner token")
	}
	return nil
}

func stateOf(r *idemhook.Record) string {
	if r == nil {
		return "nil"
	}
	return "a record in state " + r.State.String()
}

// expiry returns now+d in Unix nanoseconds, saturating far in the future.
func expiry(now int64, d time.Duration) int64 {
	if int64(d) > maxExpiry-now {
		return maxExpiry
	}
	return now + int64(d)
}

// maxExpiry is the latest expiry an entry can hold: the top bit of its meta
// word holds the completed flag.
const maxExpiry = math.MaxInt64 >> 1
