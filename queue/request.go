package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/idemhook/idemhook/internal/varint"
)

// requestVersion is the first byte of an encoded request.
const requestVersion = 1

// ErrCorruptEvent is wrapped by DecodeRequest's errors.
var ErrCorruptEvent = errors.New("queue: corrupt event")

// EncodeRequest appends the request of ev (method, target, header, body) to
// dst in the binary form engines store: a version byte, then each part as a
// length-prefixed string, the header as a count of names, each with its
// count of values.
func EncodeRequest(dst []byte, ev *Event) []byte {
	dst = append(dst, requestVersion)
	dst = appendString(dst, ev.Method)
	dst = appendString(dst, ev.Target)
	dst = binary.AppendUvarint(dst, uint64(len(ev.Header)))
	for name, values := range ev.Header {
		dst = appendString(dst, name)
		dst = binary.AppendUvarint(dst, uint64(len(values)))
		for _, v := range values {
			dst = appendString(dst, v)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(ev.Body)))
	return append(dst, ev.Body...)
}

// SameRequest reports whether a and b hold the same request (method,
// target, header and body), which EncodeRequest encodes the same: the
// events of one AcceptAll usually do (one event, a lane each), and an
// engine encodes and sends it once.
func SameRequest(a, b *Event) bool {
	return a.Method == b.Method && a.Target == b.Target && bytes.Equal(a.Body, b.Body) &&
		maps.EqualFunc(a.Header, b.Header, slices.Equal[[]string])
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeRequest sets the request of ev from b, as EncodeRequest wrote it.
// The body is copied out of b.
func DecodeRequest(b []byte, ev *Event) error {
	d := varint.NewReader(b)
	if v := d.Byte(); v != requestVersion {
		return fmt.Errorf("%w: request version %d", ErrCorruptEvent, v)
	}
	ev.Method = string(d.Bytes())
	ev.Target = string(d.Bytes())
	n := count(&d)
	ev.Header = make(http.Header, n)
	for range n {
		name := string(d.Bytes())
		values := make([]string, count(&d))
		for i := range values {
			values[i] = string(d.Bytes())
		}
		if d.Err() == nil {
			ev.Header[name] = values
		}
	}
	ev.Body = append([]byte{}, d.Bytes()...)
	if d.Err() == nil && len(d.Rest()) != 0 {
		d.Fail(errors.New("trailing bytes"))
	}
	if d.Err() != nil {
		return fmt.Errorf("%w: %v", ErrCorruptEvent, d.Err())
	}
	return nil
}

// count reads a number of entries that follow, each at least a byte long:
// more than the bytes left is corrupt (and would allocate too much).
func count(d *varint.Reader[[]byte]) int {
	n := d.Uvarint()
	if n > uint64(len(d.Rest())) {
		d.Fail(varint.ErrTruncated)
		return 0
	}
	return int(n)
}
