package idemhook

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhook/idemhook/internal/headerdict"
	"github.com/idemhook/idemhook/internal/varint"
)

// State says what a [Record] holds.
type State uint8

const (
	// StatePending is a claim: a delivery of the event is running.
	StatePending State = 1
	// StateCompleted is the stored response of a delivery that finished.
	StateCompleted State = 2
)

func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateCompleted:
		return "completed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// FingerprintSize is the length of a request fingerprint.
const FingerprintSize = 16

// Record is what a [Store] keeps under a key: either a pending claim or a
// completed response.
type Record struct {
	State State

	// Token identifies the owner of a pending claim (unique per claim: the
	// middleware's tokens are a random per-process prefix and a counter).
	// Empty in a completed record.
	Token string

	// Fingerprint identifies the request body (the first bytes of the
	// SHA-256 of its canonical form) where the key doesn't derive from the
	// body (header keys); zero when not recorded.
	Fingerprint [FingerprintSize]byte

	// CreatedAt is when the claim was taken or the response stored,
	// truncated to the millisecond by the encoding.
	CreatedAt time.Time

	// The response, in a completed record.
	Status int
	Header http.Header // only the allowed headers
	Body   []byte

	// BodyOmitted reports that the response body exceeded the storage cap:
	// the record holds the status and headers only and a replay has an
	// empty body.
	BodyOmitted bool
}

const (
	// Version 1 writes header names and values as length and bytes, version
	// 2 as tokens of package headerdict (one byte for the common ones).
	// Pending records, which hold no header, are still written in version 1:
	// the stores compare a claim's bytes with the held ones, so a claim
	// taken before an upgrade can still be completed after it.
	recordVersion1 = 1
	recordVersion2 = 2

	flagFingerprint = 1 << 0
	flagBodyOmitted = 1 << 1

	// maxHeaderEntries bounds decoding work on corrupt input.
	maxHeaderEntries = 1024
)

// MarshalBinary encodes r in idemhook's versioned binary format. The encoding
// is deterministic: equal records give equal bytes, so a store may compare
// encoded claims to implement compare-and-set.
func (r *Record) MarshalBinary() ([]byte, error) {
	return r.AppendBinary(make([]byte, 0, r.encodedSizeHint()))
}

func (r *Record) encodedSizeHint() int {
	n := 3 + binary.MaxVarintLen64 + FingerprintSize + 2*binary.MaxVarintLen32 + len(r.Token) + len(r.Body)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 2*binary.MaxVarintLen32
		}
	}
	return n
}

var (
	_ encoding.BinaryAppender    = (*Record)(nil)
	_ encoding.BinaryMarshaler   = (*Record)(nil)
	_ encoding.BinaryUnmarshaler = (*Record)(nil)
)

// AppendBinary appends the encoding of r to b: [encoding.BinaryAppender],
// for a store that encodes records into buffers of its own.
//
// Layout: version byte, state byte, flags byte, created-at as a varint of
// Unix milliseconds, the fingerprint (when flagged), then for a pending
// record the token (uvarint length, bytes) and for a completed one the
// status (uvarint), the header count (uvarint), each header as name and
// value (one entry per value, names sorted) and the body (uvarint length,
// bytes). A pending record is written in version 1, a completed one in
// version 2. In version 1 a header name or value is a uvarint length and
// the bytes; in version 2 it is a token: a uvarint t followed, when t is
// odd, by the (t-1)/2 bytes of the string, where an even t stands for
// string t/2 of a fixed dictionary of common names and values
// (Content-Type, application/json, ...). The typical answer (status 200,
// Content-Type: application/json, an 11-byte body) takes 26 bytes in
// version 2 and 54 in version 1. UnmarshalBinary reads both.
func (r *Record) AppendBinary(b []byte) ([]byte, error) {
	if r.State != StatePending && r.State != StateCompleted {
		return nil, fmt.Errorf("idemhook: cannot encode record in %v", r.State)
	}
	var flags byte
	if r.Fingerprint != ([FingerprintSize]byte{}) {
		flags |= flagFingerprint
	}
	if r.BodyOmitted {
		flags |= flagBodyOmitted
	}
	version := byte(recordVersion2)
	if r.State == StatePending {
		version = recordVersion1
	}
	b = append(b, version, byte(r.State), flags)
	var ms int64
	if !r.CreatedAt.IsZero() {
		ms = r.CreatedAt.UnixMilli()
	}
	b = binary.AppendVarint(b, ms)
	if flags&flagFingerprint != 0 {
		b = append(b, r.Fingerprint[:]...)
	}
	if r.State == StatePending {
		return appendString(b, r.Token), nil
	}
	b = binary.AppendUvarint(b, uint64(r.Status))
	var namesBuf [8]string // a typical stored answer has a few headers: no allocation
	names := appendSortedHeaderNames(namesBuf[:0], r.Header)
	var n int
	for _, k := range names {
		n += len(r.Header[k])
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, k := range names {
		for _, v := range r.Header[k] {
			b = headerdict.AppendToken(b, k)
			b = headerdict.AppendToken(b, v)
		}
	}
	return appendString(b, string(r.Body)), nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// UnmarshalBinary decodes data written by MarshalBinary. It never panics on
// bad input: anything it can't decode is an error wrapping ErrCorruptRecord.
// The decoded record does not alias data.
func (r *Record) UnmarshalBinary(data []byte) error {
	d := decoder{varint.NewReader(data)}
	*r = Record{}
	version := d.Byte()
	state := State(d.Byte())
	flags := d.Byte()
	if d.Err() != nil {
		return corrupt("truncated header")
	}
	if version != recordVersion1 && version != recordVersion2 {
		return corrupt(fmt.Sprintf("unknown version %d", version))
	}
	if state != StatePending && state != StateCompleted {
		return corrupt(fmt.Sprintf("unknown state %d", state))
	}
	if flags&^(flagFingerprint|flagBodyOmitted) != 0 {
		return corrupt(fmt.Sprintf("unknown flags %#x", flags))
	}
	r.State = state
	r.BodyOmitted = flags&flagBodyOmitted != 0
	if ms := d.Varint(); ms != 0 {
		r.CreatedAt = time.UnixMilli(ms)
	}
	if flags&flagFingerprint != 0 {
		copy(r.Fingerprint[:], d.Next(FingerprintSize))
	}
	if state == StatePending {
		r.Token = string(d.Bytes())
	} else {
		status := d.Uvarint()
		if d.Err() == nil && (status < 100 || status > 999) {
			return corrupt(fmt.Sprintf("status %d", status))
		}
		r.Status = int(status)
		n := d.Uvarint()
		if n > maxHeaderEntries {
			return corrupt(fmt.Sprintf("%d header entries", n))
		}
		if n > 0 {
			r.Header = d.header(int(n), version == recordVersion2)
		}
		if body := d.Bytes(); len(body) > 0 {
			r.Body = bytes.Clone(body)
		}
	}
	if d.Err() != nil {
		return corrupt(d.Err().Error())
	}
	if len(d.Rest()) != 0 {
		return corrupt(fmt.Sprintf("%d trailing bytes", len(d.Rest())))
	}
	return nil
}

// header decodes n header entries, their strings as tokens of package
// headerdict when tokens is set (version 2). The literal names and values
// are substrings of one string holding the entries' bytes, the dictionary
// ones the dictionary's own strings, and the value slices share one array
// (each capped at its own values), so that a header takes a few
// allocations whatever its number of entries.
func (d *decoder) header(n int, tokens bool) http.Header {
	type entry struct{ k, v span }
	var buf [8]entry // a typical stored answer has a few headers: no allocation
	entries := buf[:0]
	region := d.Rest()
	literal := false
	for range n {
		var e entry
		e.k = d.span(region, tokens)
		e.v = d.span(region, tokens)
		if d.Err() != nil {
			return nil
		}
		literal = literal || e.k.s == "" || e.v.s == ""
		entries = append(entries, e)
	}
	var text string
	if literal {
		text = string(region[:len(region)-len(d.Rest())])
	}
	str := func(sp span) string {
		if sp.s != "" {
			return sp.s
		}
		return text[sp.start:sp.end]
	}
	values := make([]string, n)
	h := make(http.Header, n)
	first := 0 // the first entry of the current name
	prev := "" // the current name
	for i, e := range entries {
		k, v := str(e.k), str(e.v)
		values[i] = v
		switch old, ok := h[k]; {
		case ok && i > 0 && k == prev:
			h[k] = values[first : i+1 : i+1] // names are sorted: the entries of one name are adjacent
		case ok:
			h[k] = append(old, v) // not from MarshalBinary, but valid: copies
		default:
			first, prev = i, k
			h[k] = values[i : i+1 : i+1]
		}
	}
	return h
}

// span is a string of a header entry: a dictionary string s, or the bytes
// from start to end of the region being decoded.
type span struct {
	s          string
	start, end int
}

// span reads a header string, a token when tokens is set and a
// length-prefixed string otherwise, and returns where its bytes lie in
// region, of which the unread input is a suffix.
func (d *decoder) span(region []byte, tokens bool) span {
	n := d.Uvarint()
	if d.Err() != nil {
		return span{}
	}
	if tokens {
		s, lit, ok := headerdict.Token(n)
		if !ok {
			d.Fail(fmt.Errorf("header token %d", n))
			return span{}
		}
		if s != "" {
			return span{s: s}
		}
		n = lit
	}
	start := len(region) - len(d.Rest())
	if d.Next(n); d.Err() != nil {
		return span{}
	}
	return span{start: start, end: start + int(n)}
}

func corrupt(why string) error { return fmt.Errorf("%w: %s", ErrCorruptRecord, why) }

// decoder reads a record's encoding, keeping the first error.
type decoder struct{ varint.Reader[[]byte] }
