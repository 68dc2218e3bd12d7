package memstore

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idemhook/idemhook"
)

// An entry holds a 7-byte meta word, the compact key, and the record in
// memstore's own encoding (see appendRecord); it lives in a slot of its
// shard's arena (see arena). The meta word is big endian, with the
// completed flag in the top bit and, below it, the expiry in Unix
// microseconds, rounded up. The typical entry (a body-hash key of an
// interned prefix and a small JSON answer) takes 7+33+21 = 61 bytes at
// most. 55 bits of microseconds hold any expiry an int64 of nanoseconds can
// (up to the year 2262).
const entryHeader = 7

const completedBit = 1 << 55

// newEntry appends to b the entry of rec under the compact key ck, expiring
// at exp (Unix nanoseconds); epoch is the store's, in Unix milliseconds.
func newEntry(b []byte, exp int64, ck []byte, rec *idemhook.Record, epoch int64) ([]byte, error) {
	b = append(b, make([]byte, entryHeader)...)
	putMeta(b[len(b)-entryHeader:], exp, rec.State == idemhook.StateCompleted)
	b = append(b, ck...)
	return appendRecord(b, rec, epoch)
}

// putMeta writes the meta word of an entry expiring at exp (Unix
// nanoseconds) into b[:7]. The expiry is kept in whole microseconds,
// rounded up: an entry lives at most 999ns longer than asked, never less.
func putMeta(b []byte, exp int64, completed bool) {
	us := uint64((exp + 999) / 1000)
	if exp <= 0 {
		us = 0
	}
	meta := us &^ completedBit
	if completed {
		meta |= completedBit
	}
	_ = b[6]
	b[0], b[1], b[2], b[3] = byte(meta>>48), byte(meta>>40), byte(meta>>32), byte(meta>>24)
	b[4], b[5], b[6] = byte(meta>>16), byte(meta>>8), byte(meta)
}

func meta(e []byte) uint64 {
	_ = e[6]
	return uint64(e[0])<<48 | uint64(e[1])<<40 | uint64(e[2])<<32 | uint64(e[3])<<24 |
		uint64(e[4])<<16 | uint64(e[5])<<8 | uint64(e[6])
}

// expiryOf is e's expiry in Unix nanoseconds.
func expiryOf(e []byte) int64 { return int64(meta(e)&^completedBit) * 1000 }

func completed(e []byte) bool { return meta(e)&completedBit != 0 }

// expired reports whether e's lifetime is over at now.
func expired(e []byte, now int64) bool { return now >= expiryOf(e) }

// Compact keys. A key that ends in 64 lowercase hex digits (a SHA-256, as in
// the middleware's body-hash keys "idem:<source>:sha256:<hex>") is held as
// the 32 bytes the digits spell and the part before them, its prefix. The
// store interns prefixes (see prefixTable): an interned prefix is held as
// the tag byte tagInterned+id, any other as itself followed by the tag
// byte tagHashed. Any other key is held as itself and the tag byte tagRaw.
// The tag is the last byte; it makes the mapping one-to-one (a prefix has
// one id for the store's life, and one form: see prefixTable), so two keys
// share a compact key only if they are equal.
const (
	tagRaw      = 0
	tagHashed   = 1
	tagInterned = 2
	hexDigits   = 64
)

// compactKey appends the compact form of key to b. With intern set (Claim,
// the only call that adds keys), a new prefix is interned if the table has
// room.
func (t *prefixTable) compactKey(b []byte, key string, intern bool) []byte {
	if len(key) >= hexDigits {
		// One pass decodes the digits and checks that they are lowercase hex.
		cut := len(key) - hexDigits
		var sum [hexDigits / 2]byte
		bad := byte(0)
		for i := range sum {
			hi, lo := hexValue[key[cut+2*i]], hexValue[key[cut+2*i+1]]
			bad |= hi | lo
			sum[i] = hi<<4 | lo
		}
		if bad&0xf0 == 0 {
			if id, ok := t.id(key[:cut], intern); ok {
				b = append(b, sum[:]...)
				return append(b, tagInterned+id)
			}
			b = append(b, key[:cut]...)
			b = append(b, sum[:]...)
			return append(b, tagHashed)
		}
	}
	b = append(b, key...)
	return append(b, tagRaw)
}

// A prefixTable interns the prefixes of hashed keys: the part before the
// digits repeats for every key of a source. It holds at most maxPrefixes
// of them, each at most maxPrefixLen bytes long, so that keys an attacker
// shapes can't grow it without bound; a prefix that doesn't make it in is
// held in full in its keys.
//
// A prefix is only added, never removed, and only while the table has room:
// so a prefix is interned before any key of it is stored, or never. Either
// way all its keys have one form, whatever the order of the calls.
//
// Lookups read an immutable prefixSet through an atomic pointer, without a
// lock; an addition copies it under mu.
type prefixTable struct {
	set atomic.Pointer[prefixSet]
	mu  sync.Mutex
}

const (
	maxPrefixes  = 256 - tagInterned // one tag byte each
	maxPrefixLen = 64
	// scanPrefixes is the size up to which a lookup compares the prefixes
	// one by one: faster than hashing for the usual few sources.
	scanPrefixes = 8
)

// A prefixSet is a snapshot of the table, never modified once published.
type prefixSet struct {
	byID []string        // the prefixes, by id
	ids  map[string]byte // id by prefix, once there are more than scanPrefixes
}

func (p *prefixSet) find(prefix string) (byte, bool) {
	if p == nil {
		return 0, false
	}
	if p.ids == nil {
		for i, s := range p.byID {
			if s == prefix {
				return byte(i), true
			}
		}
		return 0, false
	}
	id, ok := p.ids[prefix]
	return id, ok
}

func (p *prefixSet) len() int {
	if p == nil {
		return 0
	}
	return len(p.byID)
}

// id returns the id of prefix, interning it when add is set and the table
// has room. ok is false when prefix is held in full.
func (t *prefixTable) id(prefix string, add bool) (id byte, ok bool) {
	p := t.set.Load()
	if id, ok := p.find(prefix); ok {
		return id, true
	}
	if !add || len(prefix) > maxPrefixLen || p.len() >= maxPrefixes {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p = t.set.Load()
	if id, ok := p.find(prefix); ok {
		return id, true
	}
	n := p.len()
	if n >= maxPrefixes {
		return 0, false
	}
	next := &prefixSet{byID: make([]string, n, n+1)}
	if p != nil {
		copy(next.byID, p.byID)
	}
	next.byID = append(next.byID, strings.Clone(prefix))
	if len(next.byID) > scanPrefixes {
		next.ids = make(map[string]byte, len(next.byID))
		for i, s := range next.byID {
			next.ids[s] = byte(i)
		}
	}
	t.set.Store(next)
	return byte(n), true
}

// len is the number of interned prefixes.
func (t *prefixTable) len() int { return t.set.Load().len() }

// hexValue maps a lowercase hex digit to its value and any other byte to
// 0xff.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
	}
	return t
}()
