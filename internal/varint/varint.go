// Package varint reads the encodings that the stores and the queue write
// with encoding/binary's Append functions: bytes, uvarints, zigzag varints
// and length-prefixed strings, from a byte slice or a string (a string is
// read without a copy). A [Reader] keeps the first error, so that a decoder
// reads a whole value and checks once.
package varint

import (
	"encoding/binary"
	"errors"
)

// Errors of a [Reader], the first of which it keeps.
var (
	// ErrTruncated is input that ends inside a value.
	ErrTruncated = errors.New("truncated")
	// ErrOverflow is a varint of more than 64 bits.
	ErrOverflow = errors.New("varint overflows 64 bits")
)

// Uvarint decodes a uvarint from the start of b, as [binary.Uvarint] does
// (which reads only a byte slice): it returns the value and the number of
// bytes read, 0 when b ends inside the uvarint, or minus the number of
// bytes read when it overflows 64 bits.
func Uvarint[B ~[]byte | ~string](b B) (uint64, int) {
	var v uint64
	for i := 0; i < len(b); i++ {
		if i == binary.MaxVarintLen64 {
			return 0, -(i + 1)
		}
		c := b[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -(i + 1)
			}
			return v | uint64(c)<<(7*i), i + 1
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	return 0, 0
}

// Reader reads values from the front of its input. After an error, every
// read returns the zero value and Err the first error.
type Reader[B ~[]byte | ~string] struct {
	b   B
	err error
}

// NewReader returns a reader of b.
func NewReader[B ~[]byte | ~string](b B) Reader[B] { return Reader[B]{b: b} }

// Err returns the first error, or nil.
func (r *Reader[B]) Err() error { return r.err }

// Rest returns the input not read yet, which aliases the reader's input.
func (r *Reader[B]) Rest() B { return r.b }

// Fail sets the reader's error to err unless it has one already, and ends
// its input. A decoder calls it for input it finds wrong itself.
func (r *Reader[B]) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = r.b[:0]
}

// Byte reads one byte.
func (r *Reader[B]) Byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.Fail(ErrTruncated)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Next reads the next n bytes, which alias the reader's input.
func (r *Reader[B]) Next(n uint64) B {
	if r.err != nil || n > uint64(len(r.b)) {
		r.Fail(ErrTruncated)
		return r.b[:0]
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

// Uvarint reads a uvarint.
func (r *Reader[B]) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) > 0 && r.b[0] < 0x80 { // one byte, the most common
		v := r.b[0]
		r.b = r.b[1:]
		return uint64(v)
	}
	v, n := Uvarint(r.b)
	switch {
	case n == 0:
		r.Fail(ErrTruncated)
		return 0
	case n < 0:
		r.Fail(ErrOverflow)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a zigzag varint, as [binary.AppendVarint] writes it.
func (r *Reader[B]) Varint() int64 {
	u := r.Uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// Bytes reads a uvarint length and that many bytes, which alias the
// reader's input.
func (r *Reader[B]) Bytes() B { return r.Next(r.Uvarint()) }
