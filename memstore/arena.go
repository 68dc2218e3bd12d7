package memstore

import (
	"encoding/binary"
	"unsafe"
)

// An arena holds a shard's entries in large byte slices, its segments, so
// that the garbage collector has a few thousand pointer-free objects to
// look at instead of one per key (the map that indexes them holds integers
// too: see shard). Entries are appended to the open segment; when it is
// full another is opened, and that is when the shard compacts (see
// shard.collect): the entries still indexed in a segment with much dead
// space are copied to the open one, and the segment is freed.
//
// An entry lives in a slot: the uvarint number of bytes after it (the
// slot's size, fixed for its life), the uvarint length of the entry and of
// its compact key, the entry (see newEntry), and unused bytes. A slot is
// rewritten in place when a new entry of its key fits (a completion,
// whose record is usually no longer than the claim's token), and a lease
// renewal rewrites the expiry alone, so the common flows write each key
// once.
//
// A location is a segment's number (high 32 bits) and a slot's offset in
// it (low 32 bits).
type arena struct {
	segs []segment
	// free lists the numbers of freed segments (their buf is nil), for
	// reuse.
	free []uint32
	// spare is a freed buffer of maxSegment bytes kept for the next
	// segment: under steady traffic segments are freed and opened at the
	// same pace.
	spare []byte
	open  uint32 // the segment appended to; meaningless while segs is empty
	// used is the capacity of the closed segments plus the length of the
	// open one; live is the size of the indexed slots. used-live is the
	// dead space compaction reclaims.
	used, live int
	next       int // the capacity of the next segment opened below maxSegment
}

type segment struct {
	buf  []byte // the slots written; cap is the segment's size
	live int    // bytes of its slots that the shard indexes
}

const (
	// Segments start small, so that the 64 shards of a store of a few keys
	// take little memory, and double up to maxSegment. A segment holds
	// about 3,500 typical slots: compacting one copies at most that many
	// under the shard's lock, once per segment or so of new writes (see
	// shard.collect).
	minSegment = 1 << 10
	maxSegment = 256 << 10
)

func location(seg uint32, off int) uint64 { return uint64(seg)<<32 | uint64(uint32(off)) }

func split(loc uint64) (seg uint32, off int) { return uint32(loc >> 32), int(uint32(loc)) }

// slotSize returns the number of bytes a slot of an entry of n bytes
// under a compact key of klen bytes takes, its size field included, and
// the size field's value.
func slotSize(n, klen int) (total, size int) {
	size = uvarintLen(n) + uvarintLen(klen) + n
	return uvarintLen(size) + size, size
}

func uvarintLen(v int) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// slot returns the slot at loc, its size field included.
func (a *arena) slot(loc uint64) []byte {
	seg, off := split(loc)
	return slotAt(a.segs[seg].buf[off:])
}

// slotAt returns the slot at the start of b, its size field included.
func slotAt(b []byte) []byte {
	size, n := binary.Uvarint(b)
	return b[: n+int(size) : n+int(size)]
}

// entry returns the entry in slot and its compact key's length.
func entryIn(slot []byte) (e []byte, klen int) {
	_, n := binary.Uvarint(slot)
	body := slot[n:]
	elen, n := binary.Uvarint(body)
	body = body[n:]
	kl, n := binary.Uvarint(body)
	return body[n : n+int(elen)], int(kl)
}

// fits reports whether slot can hold an entry of n bytes under a compact
// key of klen bytes.
func fits(slot []byte, n, klen int) bool {
	size, _ := binary.Uvarint(slot)
	return uvarintLen(n)+uvarintLen(klen)+n <= int(size)
}

// fill writes entry e, under a compact key of klen bytes, into slot after
// its size field, which it leaves as it is.
func fill(slot []byte, e []byte, klen int) {
	_, n := binary.Uvarint(slot)
	b := binary.AppendUvarint(slot[n:n], uint64(len(e)))
	b = binary.AppendUvarint(b, uint64(klen))
	_ = append(b, e...) // within slot: the caller checked that e fits
}

// put appends a slot holding entry e, under a compact key of klen bytes,
// and returns its location. opened reports that a segment was opened for
// it: the moment for the shard to compact.
func (a *arena) put(e []byte, klen int) (loc uint64, opened bool) {
	total, size := slotSize(len(e), klen)
	if len(a.segs) == 0 || cap(a.segs[a.open].buf)-len(a.segs[a.open].buf) < total {
		a.openSegment(total)
		opened = true
	}
	sg := &a.segs[a.open]
	off := len(sg.buf)
	sg.buf = binary.AppendUvarint(sg.buf, uint64(size))
	sg.buf = sg.buf[:off+total]
	fill(sg.buf[off:], e, klen)
	sg.live += total
	a.live += total
	a.used += total
	return location(a.open, off), opened
}

// openSegment closes the open segment and opens one with room for at
// least n bytes.
func (a *arena) openSegment(n int) {
	if len(a.segs) > 0 {
		old := &a.segs[a.open]
		a.used += cap(old.buf) - len(old.buf) // its unused end is dead space now
		if old.live == 0 {
			a.freeSegment(a.open)
		}
	}
	size := max(a.next, minSegment)
	a.next = min(2*size, maxSegment)
	var buf []byte
	switch {
	case n > size:
		buf = make([]byte, 0, n) // an entry larger than a segment has its own
	case size == maxSegment && a.spare != nil:
		buf, a.spare = a.spare[:0], nil
	default:
		buf = make([]byte, 0, size)
	}
	if k := len(a.free); k > 0 {
		a.open = a.free[k-1]
		a.free = a.free[:k-1]
		a.segs[a.open] = segment{buf: buf}
	} else {
		a.open = uint32(len(a.segs))
		a.segs = append(a.segs, segment{buf: buf})
	}
}

// release marks the slot at loc dead, and frees its segment when that was
// the segment's last live slot (unless it is the open one).
func (a *arena) release(loc uint64) {
	seg, _ := split(loc)
	n := len(a.slot(loc))
	sg := &a.segs[seg]
	sg.live -= n
	a.live -= n
	if sg.live == 0 && seg != a.open {
		a.freeSegment(seg)
	}
}

func (a *arena) freeSegment(seg uint32) {
	sg := &a.segs[seg]
	a.used -= cap(sg.buf)
	if cap(sg.buf) == maxSegment && a.spare == nil {
		a.spare = sg.buf
	}
	*sg = segment{}
	a.free = append(a.free, seg)
}

// victim returns the closed segment with the most dead space, if it is at
// least a quarter of the segment: copying its live slots then frees at
// least a third as much as it copies.
func (a *arena) victim() (seg uint32, ok bool) {
	best := 0
	for i := range a.segs {
		sg := &a.segs[i]
		if uint32(i) == a.open || sg.buf == nil {
			continue
		}
		if dead := cap(sg.buf) - sg.live; dead > best && 4*dead >= cap(sg.buf) {
			seg, best, ok = uint32(i), dead, true
		}
	}
	return seg, ok
}

// view returns b as a string without copying, for the package's decoders,
// which take strings. The caller holds the shard's lock while it uses the
// string, and keeps no part of it: decodeRecord and pendingToken's callers
// copy what they keep.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
