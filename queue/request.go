package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
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

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// DecodeRequest sets the request of ev from b, as EncodeRequest wrote it.
// The body is copied out of b.
func DecodeRequest(b []byte, ev *Event) error {
	d := decoder{b: b}
	if v := d.byte(); v != requestVersion {
		return fmt.Errorf("%w: request version %d", ErrCorruptEvent, v)
	}
	ev.Method = d.string()
	ev.Target = d.string()
	n := d.count()
	ev.Header = make(http.Header, n)
	for range n {
		name := d.string()
		values := make([]string, d.count())
		for i := range values {
			values[i] = d.string()
		}
		if d.err == nil {
			ev.Header[name] = values
		}
	}
	ev.Body = []byte(d.string())
	if d.err == nil && len(d.b) != 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptEvent, d.err)
	}
	return nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) count() int {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	d.b = d.b[k:]
	return int(n)
}

func (d *decoder) string() string {
	n := d.count()
	if d.err != nil || n > len(d.b) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errors.New("truncated")
	}
}
