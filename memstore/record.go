package memstore

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/headerdict"
	"github.com/idemhook/idemhook/internal/varint"
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
	d := decoder{varint.NewReader(data)}
	head := d.Byte()
	if d.Err() != nil || head&^headKnown != 0 || (head&headNoCreated != 0 && head&headCreatedBefore != 0) {
		return nil, errCorrupt
	}
	r := &idemhook.Record{State: idemhook.StatePending, BodyOmitted: head&headBodyOmitted != 0}
	if head&headCompleted != 0 {
		r.State = idemhook.StateCompleted
	}
	if head&headNoCreated == 0 {
		delta := d.Uvarint()
		ms := epoch + int64(delta)
		if head&headCreatedBefore != 0 {
			ms = epoch - int64(delta)
		}
		r.CreatedAt = time.UnixMilli(ms)
	}
	if head&headFingerprint != 0 {
		copy(r.Fingerprint[:], d.Next(idemhook.FingerprintSize))
	}
	if d.Err() != nil {
		return nil, errCorrupt
	}
	if r.State == idemhook.StatePending {
		r.Token = strings.Clone(d.Rest())
		return r, nil
	}
	status := d.Uvarint()
	if status > maxStatus-minStatus {
		return nil, errCorrupt
	}
	r.Status = int(status) + minStatus
	n := d.Uvarint()
	if n > uint64(len(d.Rest())/2) { // an entry takes at least two bytes
		return nil, errCorrupt
	}
	if n > 0 {
		r.Header = d.header(int(n))
	}
	if d.Err() != nil {
		return nil, errCorrupt
	}
	if len(d.Rest()) > 0 {
		r.Body = []byte(d.Rest())
	}
	return r, nil
}

// pendingToken returns the token of data, the encoding of a pending record,
// without decoding the rest: it is the bytes after the created-at and the
// fingerprint.
func pendingToken(data string) (string, error) {
	d := decoder{varint.NewReader(data)}
	head := d.Byte()
	if head&headNoCreated == 0 {
		d.Uvarint()
	}
	if head&headFingerprint != 0 {
		d.Next(idemhook.FingerprintSize)
	}
	if d.Err() != nil || head&headCompleted != 0 {
		return "", errCorrupt
	}
	return d.Rest(), nil
}

// decoder reads an entry's encoding, keeping the first error.
type decoder struct{ varint.Reader[string] }

// token reads a token. A dictionary string is returned as s; a literal one
// as its start and end in region, of which the unread input is a suffix.
func (d *decoder) token(region string) (s string, start, end int) {
	t := d.Uvarint()
	if d.Err() != nil {
		return "", 0, 0
	}
	s, n, ok := headerdict.Token(t)
	switch {
	case !ok:
		d.Fail(errCorrupt)
		return "", 0, 0
	case s != "":
		return s, -1, -1
	}
	start = len(region) - len(d.Rest())
	if d.Next(n); d.Err() != nil {
		return "", 0, 0
	}
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
	region := d.Rest()
	literal := 0
	for range n {
		var e entry
		e.k.s, e.k.start, e.k.end = d.token(region)
		e.v.s, e.v.start, e.v.end = d.token(region)
		if d.Err() != nil {
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
			d.Fail(errCorrupt) // names out of order: not written by appendRecord
			return nil
		}
	}
	return h
}
