package memstore

import (
	"encoding/binary"

	"github.com/idemhook/idemhook"
)

// An entry is one string: an 8-byte meta word (big endian: the completed
// flag in the top bit, the expiry in Unix nanoseconds below it), the compact
// key, and the record in idemhook's binary encoding. The map key is a
// substring of the entry, so key and value take one allocation.
const entryHeader = 8

const completedBit = 1 << 63

// newEntry appends to b the entry of rec under the compact key ck, expiring
// at exp.
func newEntry(b []byte, exp int64, ck []byte, rec *idemhook.Record) ([]byte, error) {
	b = append(b, make([]byte, entryHeader)...)
	putMeta(b, exp, rec.State == idemhook.StateCompleted)
	b = append(b, ck...)
	return rec.AppendBinary(b)
}

func putMeta(b []byte, exp int64, completed bool) {
	meta := uint64(exp)
	if completed {
		meta |= completedBit
	}
	binary.BigEndian.PutUint64(b, meta)
}

func meta(e string) uint64 {
	_ = e[7]
	return uint64(e[0])<<56 | uint64(e[1])<<48 | uint64(e[2])<<40 | uint64(e[3])<<32 |
		uint64(e[4])<<24 | uint64(e[5])<<16 | uint64(e[6])<<8 | uint64(e[7])
}

func expiryOf(e string) int64 { return int64(meta(e) &^ completedBit) }

func completed(e string) bool { return meta(e)&completedBit != 0 }

// expired reports whether e's lifetime is over at now.
func expired(e string, now int64) bool { return now >= expiryOf(e) }

// decode returns the record of e, whose compact key has length klen. The
// record is freshly allocated: it shares nothing with the store.
func decode(e string, klen int) (*idemhook.Record, error) {
	return decodeRecord([]byte(e[entryHeader+klen:]))
}

// Compact keys: a key that ends in 64 lowercase hex digits (a SHA-256, as in
// the middleware's body-hash keys "idem:<source>:sha256:<hex>") is held as
// its prefix, the 32 bytes the digits spell, and the tag byte tagHashed; any
// other key as itself and the tag byte tagRaw. The tag makes the mapping
// one-to-one: two keys share a compact key only if they are equal.
const (
	tagRaw    = 0
	tagHashed = 1
	hexDigits = 64
)

// compactKey appends the compact form of key to b.
func compactKey(b []byte, key string) []byte {
	if len(key) < hexDigits || !lowerHex(key[len(key)-hexDigits:]) {
		b = append(b, key...)
		return append(b, tagRaw)
	}
	cut := len(key) - hexDigits
	b = append(b, key[:cut]...)
	for i := cut; i < len(key); i += 2 {
		b = append(b, unhex(key[i])<<4|unhex(key[i+1]))
	}
	return append(b, tagHashed)
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// decodeRecord decodes a stored value into a new record.
func decodeRecord(data []byte) (*idemhook.Record, error) {
	r := new(idemhook.Record)
	if err := r.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return r, nil
}
