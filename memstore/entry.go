package memstore

import (
	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/recordio"
)

// An entry is one string. It holds a 7-byte meta word, the compact key, and
// the record in idemhook's binary encoding. The meta word is big endian,
// with the completed flag in the top bit and, below it, the expiry in Unix
// microseconds, rounded up. The
// map key is a substring of the entry, so key and value take one
// allocation. Seven bytes rather than eight put the typical entry (a
// body-hash key and a small JSON answer: 112 bytes) in Go's 112-byte size
// class instead of the 128-byte one. 55 bits of microseconds hold any
// expiry an int64 of nanoseconds can (up to the year 2262).
const entryHeader = 7

const completedBit = 1 << 55

// newEntry appends to b the entry of rec under the compact key ck, expiring
// at exp (Unix nanoseconds).
func newEntry(b []byte, exp int64, ck []byte, rec *idemhook.Record) ([]byte, error) {
	b = append(b, make([]byte, entryHeader)...)
	putMeta(b[len(b)-entryHeader:], exp, rec.State == idemhook.StateCompleted)
	b = append(b, ck...)
	return rec.AppendBinary(b)
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

func meta(e string) uint64 {
	_ = e[6]
	return uint64(e[0])<<48 | uint64(e[1])<<40 | uint64(e[2])<<32 | uint64(e[3])<<24 |
		uint64(e[4])<<16 | uint64(e[5])<<8 | uint64(e[6])
}

// expiryOf is e's expiry in Unix nanoseconds.
func expiryOf(e string) int64 { return int64(meta(e)&^completedBit) * 1000 }

func completed(e string) bool { return meta(e)&completedBit != 0 }

// expired reports whether e's lifetime is over at now.
func expired(e string, now int64) bool { return now >= expiryOf(e) }

// decode returns the record of e, whose compact key has length klen. The
// record is freshly allocated: it shares nothing with the store.
func decode(e string, klen int) (*idemhook.Record, error) {
	return recordio.Decode("", "", []byte(e[entryHeader+klen:]))
}

// Compact keys. A key that ends in 64 lowercase hex digits (a SHA-256, as in
// the middleware's body-hash keys "idem:<source>:sha256:<hex>") is held as
// its prefix, the 32 bytes the digits spell, and the tag byte tagHashed.
// Any other key is held as itself and the tag byte tagRaw. The tag makes
// the mapping one-to-one, so two keys share a compact key only if they are
// equal.
const (
	tagRaw    = 0
	tagHashed = 1
	hexDigits = 64
)

// compactKey appends the compact form of key to b.
func compactKey(b []byte, key string) []byte {
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
			b = append(b, key[:cut]...)
			b = append(b, sum[:]...)
			return append(b, tagHashed)
		}
	}
	b = append(b, key...)
	return append(b, tagRaw)
}

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
