package memstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/headerdict"
)

// Records are held in an encoding of memstore's own, smaller than
// idemhook's binary one (which the other stores persist, and whose
// versions therefore can't change). Entries never leave the process, so this
// encoding may change from one version to the next.
//
// Layout: a head byte (the flags below), then, unless headNoCreated, the
// created-at as a uvarint of milliseconds from the store's epoch (before it
// when headCreatedBefore), then the fingerprint when headFingerprint. A
// pending record then holds its token: the rest of the bytes. A completed
// one holds its status minus 100 (uvarint), the number of header entries
// (uvarint), each entry as a name and a value (tokens, below; one entry per
// value, names sorted), and the body: the rest of the bytes.
//
// Header strings are tokens of package headerdict: a dictionary string
// takes one byte.
//
// The typical answer (status 200, Content-Type: application/json, an
// 11-byte body) takes 1+5+1+1+2+11 = 21 bytes this way at most (the
// created-at takes 5 bytes in a store up to a year old, fewer before),
// against 26 in idemhook's binary encoding.
const (
	headCompleted     = 1 << 0
	headFingerprint   = 1 << 1
	headBodyOmitted   = 1 << 2
	headNoCreated     = 1 << 3
	headCreatedBefore = 1 << 4
	headKnown         = headCompleted | headFingerprint | headBodyOmitted | headNoCreated | headCreatedBefore

	minStatus, maxStatus = 100, 999
)

// errCorrupt is what decoding an entry the package did not write returns.
// Entries are only written by this package, so it means a bug.
var errCorrupt = fmt.Errorf("memstore: %w", idemhook.ErrCorruptRecord)

// appendRecord appends the encoding of r to b; epoch is the store's epoch
// in Unix milliseconds. The encoding is deterministic: equal records give
// equal bytes.
func appendRecord(b []byte, r *idemhook.Record, epoch int64) ([]byte, error) {
	var head byte
	switch r.State {
	case idemhook.StatePending:
	case idemhook.StateCompleted:
		head |= headCompleted
		if r.Status < minStatus || r.Status > maxStatus {
			return nil, fmt.Errorf("memstore: status %d out of range %d-%d", r.Status, minStatus, maxStatus)
		}
	default:
		return nil, fmt.Errorf("memstore: cannot store a record in %v", r.State)
	}
	if r.Fingerprint != ([idemhook.FingerprintSize]byte{}) {
		head |= headFingerprint
	}
	if r.BodyOmitted {
		head |= headBodyOmitted
	}
	// As in idemhook's encoding, the zero time and the Unix epoch are both
	// "no created-at".
	var ms int64
	if !r.CreatedAt.IsZero() {
		ms = r.CreatedAt.UnixMilli()
	}
	var delta uint64
	switch {
	case ms == 0:
		head |= headNoCreated
	case ms < epoch:
		head |= headCreatedBefore
		delta = uint64(epoch) - uint64(ms) // no overflow in uint64
	default:
		delta = uint64(ms) - uint64(epoch)
	}
	b = append(b, head)
	if head&headNoCreated == 0 {
		b = binary.AppendUvarint(b, delta)
	}
	if head&headFingerprint != 0 {
		b = append(b, r.Fingerprint[:]...)
	}
	if r.State == idemhook.StatePending {
		return append(b, r.Token...), nil
	}
	b = binary.AppendUvarint(b, uint64(r.Status-minStatus))
	var namesBuf [8]string // a typical answer has a few headers: no allocation
	names := namesBuf[:0]
	n := 0
	for k, vs := range r.Header {
		if len(vs) > 0 {
			names = append(names, k)
			n += len(vs)
		}
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(n))
	for _, k := range names {
		for _, v := range r.Header[k] {
			b = headerdict.AppendToken(b, k)
			b = headerdict.AppendToken(b, v)
		}
	}
	return append(b, r.Body...), nil
}

// decodeRecord decodes data written by appendRecord with the same epoch.
// The record shares no memory with data.
func decodeRecord(data string, epoch int64) (*idemhook.Record, error) {
	d := decoder{buf: data}
	head := d.byte()
	if d.err != nil || head&^headKnown != 0 || (head&headNoCreated != 0 && head&headCreatedBefore != 0) {
		return nil, errCorrupt
	}
	r := &idemhook.Record{State: idemhook.StatePending, BodyOmitted: head&headBodyOmitted != 0}
	if head&headCompleted != 0 {
		r.State = idemhook.StateCompleted
	}
	if head&headNoCreated == 0 {
		delta := d.uvarint()
		ms := epoch + int64(delta)
		if head&headCreatedBefore != 0 {
			ms = epoch - int64(delta)
		}
		r.CreatedAt = time.UnixMilli(ms)
	}
	if head&headFingerprint != 0 {
		copy(r.Fingerprint[:], d.bytes(idemhook.FingerprintSize))
	}
	if d.err != nil {
		return nil, errCorrupt
	}
	if r.State == idemhook.StatePending {
		r.Token = strings.Clone(d.buf)
		return r, nil
	}
	status := d.uvarint()
	if status > maxStatus-minStatus {
		return nil, errCorrupt
	}
	r.Status = int(status) + minStatus
	n := d.uvarint()
	if n > uint64(len(d.buf)/2) { // an entry takes at least two bytes
		return nil, errCorrupt
	}
	if n > 0 {
		r.Header = d.header(int(n))
	}
	if d.err != nil {
		return nil, errCorrupt
	}
	if len(d.buf) > 0 {
		r.Body = []byte(d.buf)
	}
	return r, nil
}

// pendingToken returns the token of data, the encoding of a pending record,
// without decoding the rest: it is the bytes after the created-at and the
// fingerprint.
func pendingToken(data string) (string, error) {
	d := decoder{buf: data}
	head := d.byte()
	if head&headNoCreated == 0 {
		d.uvarint()
	}
	if head&headFingerprint != 0 {
		d.bytes(idemhook.FingerprintSize)
	}
	if d.err != nil || head&headCompleted != 0 {
		return "", errCorrupt
	}
	return d.buf, nil
}

type decoder struct {
	buf string
	err error
}

var errTruncated = errors.New("truncated")

func (d *decoder) byte() byte {
	if d.err != nil || len(d.buf) < 1 {
		d.err = errTruncated
		return 0
	}
	c := d.buf[0]
	d.buf = d.buf[1:]
	return c
}

func (d *decoder) bytes(n int) string {
	if d.err != nil || len(d.buf) < n {
		d.err = errTruncated
		return ""
	}
	s := d.buf[:n]
	d.buf = d.buf[n:]
	return s
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	// A uvarint of this package's own: encoding/binary reads only byte
	// slices, and converting would copy.
	var v uint64
	for i := 0; i < binary.MaxVarintLen64 && i < len(d.buf); i++ {
		c := d.buf[i]
		if i == binary.MaxVarintLen64-1 && c > 1 {
			break // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			d.buf = d.buf[i+1:]
			return v
		}
	}
	d.err = errTruncated
	return 0
}

// token reads a token. A dictionary string is returned as s; a literal one
// as its start and end in region, of which d.buf is a suffix.
func (d *decoder) token(region string) (s string, start, end int) {
	t := d.uvarint()
	if d.err != nil {
		return "", 0, 0
	}
	s, n, ok := headerdict.Token(t)
	switch {
	case !ok:
		d.err = errTruncated
		return "", 0, 0
	case s != "":
		return s, -1, -1
	case n > uint64(len(d.buf)):
		d.err = errTruncated
		return "", 0, 0
	}
	start = len(region) - len(d.buf)
	d.buf = d.buf[n:]
	return "", start, start + int(n)
}

// header decodes n header entries. Literal names and values are substrings
// of one new string holding their bytes, dictionary ones the dictionary's
// own strings; the value slices share one array (each capped at its own
// values). A header takes at most four allocations, three when every string
// is in the dictionary.
func (d *decoder) header(n int) http.Header {
	type span struct {
		s          string
		start, end int
	}
	type entry struct{ k, v span }
	var buf [8]entry // a typical answer has a few headers: no allocation
	entries := buf[:0]
	region := d.buf
	literal := 0
	for range n {
		var e entry
		e.k.s, e.k.start, e.k.end = d.token(region)
		e.v.s, e.v.start, e.v.end = d.token(region)
		if d.err != nil {
			return nil
		}
		literal += max(e.k.end-e.k.start, 0) + max(e.v.end-e.v.start, 0)
		entries = append(entries, e)
	}
	var text string
	if literal > 0 {
		var sb strings.Builder
		sb.Grow(literal)
		for _, e := range entries {
			if e.k.start >= 0 {
				sb.WriteString(region[e.k.start:e.k.end])
			}
			if e.v.start >= 0 {
				sb.WriteString(region[e.v.start:e.v.end])
			}
		}
		text = sb.String()
	}
	at := 0
	str := func(sp span) string {
		if sp.start < 0 {
			return sp.s
		}
		s := text[at : at+sp.end-sp.start]
		at += sp.end - sp.start
		return s
	}
	values := make([]string, n)
	h := make(http.Header, n)
	first := 0 // the first entry of the current name
	prev := "" // the current name
	for i, e := range entries {
		k, v := str(e.k), str(e.v)
		values[i] = v
		if _, ok := h[k]; !ok {
			first, prev = i, k
			h[k] = values[i : i+1 : i+1]
		} else if k == prev {
			h[k] = values[first : i+1 : i+1] // names are sorted: the entries of one name are adjacent
		} else {
			d.err = errTruncated // names out of order: not written by appendRecord
			return nil
		}
	}
	return h
}
