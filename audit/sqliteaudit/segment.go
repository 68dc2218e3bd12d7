package sqliteaudit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/varint"
)

// A segment is the unit of the trail on disk: one row of audit_segments
// holding up to segMaxEntries entries written together (one Write, or
// small Writes appended up to tailMax), encoded in a blob (data), a small
// blob (summary) counting them per source, route and outcome, and the sets
// of their sources and outcomes.
//
// data is, with every integer a varint (unsigned: uvarint; signed: the
// zigzag varint of encoding/binary):
//
//	byte    segFormat
//	uvarint the number of strings, then each string as uvarint length + bytes
//	uvarint the number of entries, then each entry:
//	    uvarint idx - previous idx - 1   (idx: the entry's place in the segment, from 0)
//	    varint  time_us - previous time_us (the first: from 0)
//	    uvarint route, source, outcome, reason, instance, scope: indexes into the strings
//	    uvarint length of key, then its bytes
//	    varint  status, duration_ns, request_bytes, response_bytes
//
// Entries are in write order (idx increasing). An entry's ID is the
// segment's id << idxBits | idx: IDs grow with the write order across
// segments (the id is AUTOINCREMENT) and inside one, and an entry keeps
// its ID when Prune rewrites its segment without its older neighbours.
//
// summary is a uvarint count of triples, then each triple as source,
// route, outcome (uvarint length + bytes each) and the uvarint number of
// the segment's entries having them.
//
// sources and outcomes are the segment's distinct sources (outcomes), in
// the order of the strings, each followed by a NUL byte, after a leading
// one: "\x00stone\x00stripe\x00". Query finds a filter's source in it with
// instr (see among) without reading the summary.

const (
	segFormat = 1

	// idxBits is the bits of an entry's ID holding its place in its
	// segment.
	idxBits = 16

	// segMaxEntries is the most entries one segment (one INSERT) holds.
	// The Recorder hands batches of up to 256 entries, one segment each.
	segMaxEntries = 1024
)

// errCorrupt is wrapped by the errors of a blob that doesn't decode.
var errCorrupt = errors.New("audit: corrupt segment")

// entryID is the ID of the entry at idx of segment seg.
func entryID(seg int64, idx uint64) int64 { return seg<<idxBits | int64(idx) }

// encoder encodes segments. Its buffers and dictionary are reused from one
// segment to the next. It can also add entries to the segment it encoded
// last without encoding that one's again (Write's appends to its last
// segment). It is not safe for concurrent use.
type encoder struct {
	dict     map[string]uint64
	strs     []string
	body     []byte // the entries so far
	data     []byte
	summary  []byte
	sources  []byte   // the distinct sources, each between NUL bytes (see among)
	outcomes []byte   // and outcomes
	idx      []uint64 // set's
	counts   map[[3]uint64]uint64
	n        int   // entries so far
	minUS    int64 // their oldest time
	maxUS    int64 // and newest
	prevUS   int64 // the last entry's time
	prevIdx  int64 // and place
}

func newEncoder() *encoder {
	c := &encoder{dict: map[string]uint64{}, counts: map[[3]uint64]uint64{}}
	c.reset()
	return c
}

// reset starts a new segment.
func (c *encoder) reset() {
	clear(c.dict)
	clear(c.counts)
	c.strs, c.body, c.n = c.strs[:0], c.body[:0], 0
	c.minUS, c.maxUS, c.prevUS, c.prevIdx = math.MaxInt64, math.MinInt64, 0, -1
}

// str returns the index of s in the segment's strings, adding it.
func (c *encoder) str(s string) uint64 {
	if i, ok := c.dict[s]; ok {
		return i
	}
	i := uint64(len(c.strs))
	c.dict[s] = i
	c.strs = append(c.strs, s)
	return i
}

// encode encodes a segment of entries, whose places in the segment are
// idx (nil: 0, 1, 2...; increasing), into c.data, c.summary, c.minUS and
// c.maxUS. The slices stay valid until the next call.
func (c *encoder) encode(entries []audit.Entry, idx []uint64) {
	c.reset()
	c.add(entries, idx)
	c.finish()
}

// add adds entries to the segment, at the places idx (nil: following the
// segment's last entry). Call finish for the blobs.
func (c *encoder) add(entries []audit.Entry, idx []uint64) {
	b := c.body
	for i := range entries {
		e := &entries[i]
		n := c.prevIdx + 1
		if idx != nil {
			n = int64(idx[i])
		}
		us := e.Time.UnixMicro()
		c.minUS, c.maxUS = min(c.minUS, us), max(c.maxUS, us)
		b = binary.AppendUvarint(b, uint64(n-c.prevIdx-1))
		b = binary.AppendVarint(b, us-c.prevUS)
		c.prevIdx, c.prevUS = n, us
		route, source, outcome := c.str(e.Route), c.str(e.Source), c.str(e.Outcome)
		c.counts[[3]uint64{source, route, outcome}]++
		b = binary.AppendUvarint(b, route)
		b = binary.AppendUvarint(b, source)
		b = binary.AppendUvarint(b, outcome)
		b = binary.AppendUvarint(b, c.str(e.Reason))
		b = binary.AppendUvarint(b, c.str(e.Instance))
		b = binary.AppendUvarint(b, c.str(e.Scope))
		b = binary.AppendUvarint(b, uint64(len(e.Key)))
		b = append(b, e.Key...)
		b = binary.AppendVarint(b, int64(e.Status))
		b = binary.AppendVarint(b, int64(e.Duration))
		b = binary.AppendVarint(b, e.RequestBytes)
		b = binary.AppendVarint(b, e.ResponseBytes)
	}
	c.body = b
	c.n += len(entries)
}

// finish builds c.data and c.summary of the segment's entries so far.
func (c *encoder) finish() {
	d := append(c.data[:0], segFormat)
	d = binary.AppendUvarint(d, uint64(len(c.strs)))
	for _, s := range c.strs {
		d = binary.AppendUvarint(d, uint64(len(s)))
		d = append(d, s...)
	}
	d = binary.AppendUvarint(d, uint64(c.n))
	c.data = append(d, c.body...)

	m := binary.AppendUvarint(c.summary[:0], uint64(len(c.counts)))
	for k, n := range c.counts {
		for _, s := range k {
			m = binary.AppendUvarint(m, uint64(len(c.strs[s])))
			m = append(m, c.strs[s]...)
		}
		m = binary.AppendUvarint(m, n)
	}
	c.summary = m

	// The sets, in the order of the strings.
	c.sources, c.outcomes = c.set(c.sources, 0), c.set(c.outcomes, 2)
}

// set returns, in b's memory, the set of the strings at place k (0:
// source, 2: outcome) of the keys of c.counts, in the order of the
// strings.
func (c *encoder) set(b []byte, k int) []byte {
	c.idx = c.idx[:0]
	for key := range c.counts {
		c.idx = append(c.idx, key[k])
	}
	slices.Sort(c.idx)
	b = append(b[:0], 0)
	for i, j := range c.idx {
		if i == 0 || j != c.idx[i-1] {
			b = append(append(b, c.strs[j]...), 0)
		}
	}
	return b
}

// row returns the columns min_time_us, max_time_us, entries, sources,
// outcomes, summary and data of the segment encoded last, as arguments.
func (c *encoder) row() []any {
	return []any{c.minUS, c.maxUS, c.n, c.sources, c.outcomes, c.summary, c.data}
}

// among returns what instr looks for in the column sources (or outcomes)
// of a segment holding s: s between NUL bytes, or nothing (found in any)
// when s is empty. A string holding a NUL byte may be found in a segment
// without it, never missed: the summary decides.
func among(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return append(append([]byte{0}, s...), 0)
}

// summaryTriple is one triple of a segment's summary. Its strings alias
// the blob.
type summaryTriple struct {
	source, route, outcome []byte
	n                      int64
}

// eachTriple calls fn for every triple of a summary blob.
func eachTriple(summary []byte, fn func(summaryTriple)) error {
	r := varint.NewReader(summary)
	k := r.Uvarint()
	for i := uint64(0); i < k && r.Err() == nil; i++ {
		var t summaryTriple
		t.source, t.route, t.outcome = r.Bytes(), r.Bytes(), r.Bytes()
		t.n = int64(r.Uvarint())
		if r.Err() == nil {
			fn(t)
		}
	}
	if r.Err() != nil {
		return errCorrupt
	}
	return nil
}

// matchesSummary reports whether a segment whose summary is summary may
// hold entries matching f's source, route and outcome.
func matchesSummary(summary []byte, f *audit.Filter) (bool, error) {
	if f.Source == "" && f.Route == "" && f.Outcome == "" {
		return true, nil
	}
	found := false
	err := eachTriple(summary, func(t summaryTriple) {
		found = found || tripleMatches(t, f)
	})
	return found, err
}

func tripleMatches(t summaryTriple, f *audit.Filter) bool {
	return (f.Source == "" || string(t.source) == f.Source) && (f.Route == "" || string(t.route) == f.Route) &&
		(f.Outcome == "" || string(t.outcome) == f.Outcome)
}

// window is what a decode keeps: entries matching the filter's source,
// route and outcome, with a time in [lo, hi] and, when after is set,
// after it in the newest-first order.
type window struct {
	f      *audit.Filter
	lo, hi int64
	after  *position
}

// position is an entry's place in the newest-first order.
type position struct{ us, id int64 }

// uv returns the uvarint at b[p:] and the position after it, or -1 at an
// error (and then for any p < 0).
func uv(b []byte, p int) (uint64, int) {
	if p >= 0 && p < len(b) && b[p] < 0x80 {
		return uint64(b[p]), p + 1
	}
	if p < 0 || p >= len(b) {
		return 0, -1
	}
	v, n := binary.Uvarint(b[p:])
	if n <= 0 {
		return 0, -1
	}
	return v, p + n
}

// sv is uv for a zigzag varint.
func sv(b []byte, p int) (int64, int) {
	u, p := uv(b, p)
	return int64(u>>1) ^ -int64(u&1), p
}

// skip returns the position after the n varints at b[p:], or -1.
func skip(b []byte, p, n int) int {
	for ; n > 0 && p >= 0; n-- {
		for p < len(b) && b[p] >= 0x80 {
			p++
		}
		if p >= len(b) {
			return -1
		}
		p++
	}
	return p
}

// decodeSegment calls keep for every entry of segment seg (data is its
// blob) in w. The entry's strings don't alias data. It stops at keep
// returning false.
func decodeSegment(seg int64, data []byte, w window, keep func(idx uint64, e audit.Entry) bool) error {
	corrupt := func() error { return fmt.Errorf("%w %d", errCorrupt, seg) }
	if len(data) == 0 || data[0] != segFormat {
		return corrupt()
	}
	b := data
	nstr, p := uv(b, 1)
	if p < 0 || nstr > uint64(len(b)) {
		return corrupt()
	}
	strs := make([]string, nstr)
	for i := range strs {
		var n uint64
		if n, p = uv(b, p); p < 0 || n > uint64(len(b)-p) {
			return corrupt()
		}
		strs[i] = string(b[p : p+int(n)])
		p += int(n)
	}
	// The filter's strings as indexes; a filter on a string the segment
	// doesn't have matches nothing.
	want := [3]int64{-1, -1, -1} // route, source, outcome; -1: any
	for i, v := range [3]string{w.f.Route, w.f.Source, w.f.Outcome} {
		if v == "" {
			continue
		}
		want[i] = -2
		for j, s := range strs {
			if s == v {
				want[i] = int64(j)
				break
			}
		}
		if want[i] == -2 {
			return nil
		}
	}
	n, p := uv(b, p)
	var us int64
	idx := int64(-1)
	for range n {
		var d uint64
		var dt int64
		d, p = uv(b, p)
		dt, p = sv(b, p)
		idx += int64(d) + 1
		us += dt
		var fields [6]uint64 // route, source, outcome, reason, instance, scope
		fields[0], p = uv(b, p)
		fields[1], p = uv(b, p)
		fields[2], p = uv(b, p)
		if p < 0 {
			return corrupt()
		}
		if (want[0] >= 0 && fields[0] != uint64(want[0])) || (want[1] >= 0 && fields[1] != uint64(want[1])) ||
			(want[2] >= 0 && fields[2] != uint64(want[2])) || us < w.lo || us > w.hi {
			p = skip(b, p, 3)
			var kl uint64
			if kl, p = uv(b, p); p < 0 || kl > uint64(len(b)-p) {
				return corrupt()
			}
			if p = skip(b, p+int(kl), 4); p < 0 {
				return corrupt()
			}
			continue
		}
		fields[3], p = uv(b, p)
		fields[4], p = uv(b, p)
		fields[5], p = uv(b, p)
		var kl uint64
		if kl, p = uv(b, p); p < 0 || kl > uint64(len(b)-p) {
			return corrupt()
		}
		key := b[p : p+int(kl)]
		p += int(kl)
		var status, dur, req, resp int64
		status, p = sv(b, p)
		dur, p = sv(b, p)
		req, p = sv(b, p)
		resp, p = sv(b, p)
		if p < 0 {
			return corrupt()
		}
		for _, f := range fields {
			if f >= uint64(len(strs)) {
				return corrupt()
			}
		}
		id := entryID(seg, uint64(idx))
		if w.after != nil && (us > w.after.us || (us == w.after.us && id >= w.after.id)) {
			continue
		}
		e := audit.Entry{
			ID: id, Time: time.UnixMicro(us).UTC(),
			Route: strs[fields[0]], Source: strs[fields[1]], Outcome: strs[fields[2]],
			Reason: strs[fields[3]], Instance: strs[fields[4]], Scope: strs[fields[5]],
			Key: string(key), Status: int(status), Duration: time.Duration(dur), RequestBytes: req, ResponseBytes: resp,
		}
		if !keep(uint64(idx), e) {
			return nil
		}
	}
	if p < 0 {
		return corrupt()
	}
	return nil
}
