package sqlitestore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync/atomic"
	"time"
)

// The key filter. A first delivery's Claim must know that the file holds no
// record of its key, and reading the file to learn it was about a tenth of
// the gateway's CPU on first deliveries. A store holding the file alone
// (Config.Lock) knows every way a key enters the file: it was there when the
// store opened it, or this store's Complete wrote it. So it keeps a Bloom
// filter of the file's keys, and a Claim of a key the filter has never seen
// takes the key without reading the file. A key the filter may have seen
// (every key of the file, and about 1% of the others) is read as before.
//
// The filter must never miss a key of the file, which these rules ensure:
//   - Complete adds its key in its write, on the writer's goroutine, before
//     the commit.
//   - A new filter is put in place by a write of its own, on the writer's
//     goroutine too, and only then is the file scanned into it. A record
//     committed before that write is in the scan. A Complete that runs
//     after it adds its key to the new filter.
//   - A Claim consults the filter only once it is ready (the scan done),
//     and under the lock of its key's shard after finding no claim there. A
//     Complete of the key would need that claim, and a record whose claim
//     has left the map was added to the filter before its commit.
//
// Deleted and expired rows stay in the filter until it is rebuilt: they
// only cost a read. The filter is sized for twice the keys the file seems
// to hold (from its size, or the keys the last filter took if more; at
// least filterMinKeys), with filterBitsPerKey bits per key: 10M stored
// keys took 28.7 MB (docs/benchmarks.md). The sweeper builds it again once
// it has taken more keys than it was sized for. A build scans the keys in
// key order; it is logged at INFO with the keys and the time it took.

const (
	filterBitsPerKey = 10 // about 1% false positives with filterHashes probes
	filterHashes     = 7
	filterMinKeys    = 1 << 20
	// filterRowBytes is an estimate of a row's bytes in the file (140.3 for
	// a typical record: docs/benchmarks.md), to size a filter from the
	// file's size before scanning it.
	filterRowBytes = 150
)

type bloom struct {
	words    []uint64 // the bits, set with atomic OR
	nbits    uint64
	capacity int64 // keys it was sized for
	added    atomic.Int64
	ready    atomic.Bool // every key of the file is in it
}

func newBloom(keys int64) *bloom {
	keys = max(keys, filterMinKeys)
	n := uint64(keys) * filterBitsPerKey
	return &bloom{words: make([]uint64, (n+63)/64), nbits: n, capacity: keys}
}

// probes calls f with the filterHashes bit positions of key.
func (b *bloom) probes(seed maphash.Seed, key string, f func(bit uint64) bool) bool {
	h1 := maphash.String(seed, key)
	h2 := mix64(h1) | 1
	for i := range uint64(filterHashes) {
		bit, _ := bits.Mul64(h1+i*h2, b.nbits) // in [0, nbits)
		if !f(bit) {
			return false
		}
	}
	return true
}

func (b *bloom) add(seed maphash.Seed, key string) {
	b.probes(seed, key, func(bit uint64) bool {
		atomic.OrUint64(&b.words[bit/64], 1<<(bit%64))
		return true
	})
	b.added.Add(1)
}

// mayHave reports false when key was certainly never added.
func (b *bloom) mayHave(seed maphash.Seed, key string) bool {
	return b.probes(seed, key, func(bit uint64) bool {
		return atomic.LoadUint64(&b.words[bit/64])&(1<<(bit%64)) != 0
	})
}

// mix64 is splitmix64's finalizer: a second hash from the first.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// keyFilter is the store's filter, replaced whole when rebuilt.
type keyFilter struct {
	seed    maphash.Seed
	current atomic.Pointer[bloom]
}

// absent reports whether key certainly has no row in the file: the filter
// is ready and has never seen it.
func (f *keyFilter) absent(key string) bool {
	b := f.current.Load()
	return b != nil && b.ready.Load() && !b.mayHave(f.seed, key)
}

// added records that key gets a row. It runs on the writer's goroutine, in
// the write that puts the row there.
func (f *keyFilter) added(key string) {
	if b := f.current.Load(); b != nil {
		b.add(f.seed, key)
	}
}

// filterStale reports whether the filter should be built again: it has
// taken more keys than it was sized for, or its initial build failed.
func (h *heldStore) filterStale() bool {
	if h.building == nil {
		return false // the store keeps no filter (Config.noKeyFilter)
	}
	select {
	case <-h.building:
	default:
		return false // the initial build is still running
	}
	b := h.filter.current.Load()
	return b == nil || !b.ready.Load() || b.added.Load() > b.capacity
}

// buildFilter puts a new filter in place, sized from the file, and scans
// the file's keys into it. Until the scan is done, Claims read the file.
func (h *heldStore) buildFilter(ctx context.Context) error {
	var pages, pageSize int64
	if err := h.readDB.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		return fmt.Errorf("sqlitestore: key filter: %w", err)
	}
	if err := h.readDB.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		return fmt.Errorf("sqlitestore: key filter: %w", err)
	}
	keys := pages * pageSize / filterRowBytes
	if old := h.filter.current.Load(); old != nil {
		keys = max(keys, old.added.Load())
	}
	b := newBloom(2 * keys)
	start := time.Now()
	// Put it in place on the writer's goroutine (see the rules above).
	if err := h.w.inOrder(ctx, func() { h.filter.current.Store(b) }); err != nil {
		return fmt.Errorf("sqlitestore: key filter: %w", err)
	}
	// In key order, filterScanRows at a time, so that the scan holds a
	// connection (db's only one, without Config.Reader) only briefly.
	after, scanned := "", 0
	for first := true; ; first = false {
		n, last, err := h.scanKeysAfter(ctx, b, first, after)
		scanned += n
		if err != nil {
			return fmt.Errorf("sqlitestore: key filter: %w", err)
		}
		if n < filterScanRows {
			break
		}
		after = last
	}
	b.ready.Store(true)
	if h.log != nil {
		h.log.Info("sqlitestore: key filter built: first deliveries of new keys no longer read the file",
			"keys", scanned, "sized_for", b.capacity, "bytes", len(b.words)*8, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// filterScanRows bounds the keys one step of the filter's scan reads.
const filterScanRows = 10_000

// scanKeysAfter adds to b the next keys of the file after the key after
// (from the first key when first, which "" can't say: it is a key too), and
// returns how many it read and the last one.
func (h *heldStore) scanKeysAfter(ctx context.Context, b *bloom, first bool, after string) (int, string, error) {
	stmt := h.scanKeys
	if first {
		stmt = h.scanFirstKeys
	}
	rows, err := stmt.QueryContext(ctx, after, filterScanRows)
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	n, key := 0, ""
	for rows.Next() {
		if err := rows.Scan(&key); err != nil {
			return n, key, err
		}
		b.add(h.filter.seed, key)
		n++
	}
	return n, key, rows.Err()
}
