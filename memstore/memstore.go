// Package memstore is an in-memory [idemhook.Store] for one process: the
// library's default, and the store of tests.
//
// Keys live in a sharded map, each shard behind its own mutex. A value is
// the record in an encoding of the package's own (smaller than idemhook's
// binary one, which the other stores persist: common header names and
// values take a byte each, the created-at a few), held in one allocation
// with its key and expiry. Keys that end in a lowercase hex SHA-256, the
// body-hash keys of the middleware, are held in 32 bytes instead of 64, and
// the part before the digits ("idem:<source>:sha256:"), which repeats for
// every key of a source, is held once per store and in each key as one
// byte (for up to 254 such prefixes of at most 64 bytes; others are held in
// full). A typical small response so takes a 64-byte allocation and its map
// slot: about 117 bytes per key (see BenchmarkMemoryPerKey).
//
// Expired entries are absent to every call. They are removed when a call
// meets them, and all at once when a shard has grown by half since it was
// last swept (amortized, three entries looked at per new key): under steady
// traffic a shard holds at most 1.5 times its live keys (or 1024 entries),
// so dead keys can't pile up. No goroutine runs in the background.
package memstore

import (
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
	seed     maphash.Seed
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
	m  map[string]string // compact key → entry (see newEntry)
	// sweepAt is the size at which the shard is swept in full: 1.5 times
	// its size after the previous sweep.
	sweepAt int
	// fullUntil is set when the shard was found full of pending claims:
	// until that time (the end of the first of their leases) or until an
	// entry is removed, Claim fails fast rather than scan the shard again.
	fullUntil int64
	_         [32]byte // keep shards on separate cache lines
}

// remove deletes the entry under k. The caller holds sh.mu.
func (sh *shard) remove(k string) {
	delete(sh.m, k)
	sh.fullUntil = 0
}

// minSweepAt is the smallest size that triggers a full sweep.
const minSweepAt = 1024

// New returns a Store configured by cfg.
func New(cfg Config) (*Store, error) {
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
		seed:     maphash.MakeSeed(),
		mask:     uint64(cfg.Shards - 1),
		perShard: cfg.MaxEntries / cfg.Shards,
		shards:   make([]shard, cfg.Shards),
		epoch:    cfg.Now().UnixMilli(),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]string)
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
		n += len(sh.m)
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
		sh.m = nil
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
	var kbuf, ebuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, true)
	now := s.now().UnixNano()
	entry, err := newEntry(ebuf[:0], expiry(now, lease), ck, claim, s.epoch)
	if err != nil {
		return nil, err
	}

	existing, err := s.claim(s.shard(ck), ck, entry, now)
	if err != nil || existing == "" {
		return nil, err
	}
	// Entries are immutable: decode outside the lock.
	return decode(existing, len(ck), s.epoch)
}

// claim stores entry under ck unless the shard holds a live entry there,
// which it returns ("" when entry was stored).
func (s *Store) claim(sh *shard, ck, entry []byte, now int64) (string, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		return "", ErrClosed
	}
	if e, ok := sh.m[string(ck)]; ok {
		if !expired(e, now) {
			return e, nil
		}
		sh.remove(string(ck))
	}
	if len(sh.m) >= s.perShard {
		if now < sh.fullUntil || !s.makeRoom(sh, now) {
			return "", ErrFull
		}
	} else if len(sh.m) >= sh.sweepAt {
		sh.sweep(now)
	}
	e := string(entry)
	sh.m[e[entryHeader:entryHeader+len(ck)]] = e
	return "", nil
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

	sh := s.shard(ck)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err := sh.owned(ck, claim, now); err != nil {
		return err
	}
	sh.replace(ck, string(entry))
	return nil
}

// replace puts e, an entry under ck, in place of the one the shard holds
// there. The caller holds sh.mu.
func (sh *shard) replace(ck []byte, e string) {
	// Assigning to a key the map holds overwrites its key too (Go does so
	// for string keys), so the map keeps a substring of the new entry and
	// the old one can be freed: one map operation instead of a delete,
	// which leaves a tombstone, and an insert. BenchmarkMemoryPerKey would
	// show the old entries kept alive if it did not.
	sh.m[e[entryHeader:entryHeader+len(ck)]] = e
	sh.fullUntil = 0 // as remove does: the shard may have room again
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

	sh := s.shard(ck)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err := sh.owned(ck, claim, now); err != nil {
		return err
	}
	sh.remove(string(ck))
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

	sh := s.shard(ck)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err := sh.owned(ck, claim, now); err != nil {
		return err
	}
	old := sh.m[string(ck)]
	b := make([]byte, len(old))
	putMeta(b, expiry(now, lease), false)
	copy(b[entryHeader:], old[entryHeader:])
	sh.replace(ck, string(b))
	return nil
}

// Get implements [idemhook.Store].
func (s *Store) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var kbuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, false)
	now := s.now().UnixNano()

	e := s.shard(ck).get(ck, now)
	if e == "" {
		return nil, nil
	}
	return decode(e, len(ck), s.epoch)
}

// get returns the live entry under ck, or "".
func (sh *shard) get(ck []byte, now int64) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[string(ck)]
	if !ok {
		return ""
	}
	if expired(e, now) {
		sh.remove(string(ck))
		return ""
	}
	return e
}

// Delete implements [idemhook.Store].
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	var kbuf [256]byte
	ck := s.prefixes.compactKey(kbuf[:0], key, false)
	now := s.now().UnixNano()

	sh := s.shard(ck)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[string(ck)]
	if !ok {
		return false, nil
	}
	sh.remove(string(ck))
	return !expired(e, now), nil
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

func (s *Store) shard(ck []byte) *shard {
	return &s.shards[maphash.Bytes(s.seed, ck)&s.mask]
}

// owned reports nil when the shard holds, under ck, a live pending claim
// with claim's token, and ErrNotOwner otherwise. The caller holds sh.mu.
func (sh *shard) owned(ck []byte, claim *idemhook.Record, now int64) error {
	if sh.m == nil {
		return ErrClosed
	}
	e, ok := sh.m[string(ck)]
	if !ok {
		return idemhook.ErrNotOwner
	}
	if expired(e, now) {
		sh.remove(string(ck))
		return idemhook.ErrNotOwner
	}
	if completed(e) {
		return idemhook.ErrNotOwner
	}
	// The token is read in place: no decoding, no allocation.
	token, err := pendingToken(e[entryHeader+len(ck):])
	if err != nil {
		return err
	}
	if token != claim.Token {
		return idemhook.ErrNotOwner
	}
	return nil
}

// sweep removes every expired entry of the shard. The caller holds sh.mu.
func (sh *shard) sweep(now int64) {
	for k, e := range sh.m {
		if expired(e, now) {
			sh.remove(k)
		}
	}
	sh.sweepAt = max(len(sh.m)+len(sh.m)/2, minSweepAt)
}

// Eviction. A full shard frees 1/evictShare of its capacity at a time, so
// that the cost of looking through its map is shared by that many new keys:
// the map's entries lie scattered in the heap, and each one looked at is a
// cache miss. The records to evict are taken from the 1/evictPool of the
// shard closest to expiry, as judged from a sample of evictSample entries,
// so that a pass finds enough of them in about a quarter of the map.
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
// which frees about that quarter. Otherwise it goes through the map, from
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
		for k, e := range sh.m {
			if len(sh.m) <= target {
				break
			}
			if expired(e, now) || completed(e) && expiryOf(e) <= limit {
				sh.remove(k)
			}
		}
		if len(sh.m) >= s.perShard {
			sh.sweep(now)
		}
	}
	return len(sh.m) < s.perShard || s.evictClosestToExpiry(sh, target)
}

// evictLimit returns the expiry at or below which makeRoom evicts completed
// records. In a sample of the shard's entries (the first evictSample of the
// map's iteration, which starts at a random place), the entries that would
// go first are the expired ones, then the completed records by expiry
// (pending claims never go); the limit is the expiry of the one a quarter
// of the way through the sample. It is math.MinInt64 when a quarter of the
// sample is expired entries, or when the sample holds no completed record.
// The caller holds sh.mu.
func evictLimit(sh *shard, now int64) int64 {
	var buf [evictSample]int64
	sample, seen := buf[:0], 0
	for _, e := range sh.m {
		if seen == evictSample {
			break
		}
		seen++
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
		exp int64
		key string
	}
	var done []candidate
	firstEnd := int64(maxExpiry)
	for k, e := range sh.m {
		if completed(e) {
			done = append(done, candidate{expiryOf(e), k})
		} else {
			firstEnd = min(firstEnd, expiryOf(e))
		}
	}
	if len(done) == 0 {
		sh.fullUntil = firstEnd
		return false
	}
	n := min(len(sh.m)-target, len(done))
	if n < len(done) {
		slices.SortFunc(done, func(a, b candidate) int { return cmpInt64(a.exp, b.exp) })
	}
	for _, c := range done[:n] {
		sh.remove(c.key)
	}
	return len(sh.m) < s.perShard
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
