package sqliteaudit

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
)

// oddEntries are entries at the edges of what a segment encodes.
func oddEntries() []audit.Entry {
	return []audit.Entry{
		{Time: time.UnixMicro(1796000000000000), Route: "/webhooks/stone", Source: "stone", Key: "sha256:9f86", Outcome: "processed", Status: 200,
			Duration: 1234567, RequestBytes: 100, ResponseBytes: 9, Instance: "gw-1"},
		{}, // every field empty or zero, the zero time
		{Time: time.UnixMicro(-5), Route: "/wh", Source: "stone", Key: strings.Repeat("k", 300), Outcome: "failed_released", Status: -1,
			Duration: math.MaxInt64, RequestBytes: math.MinInt64, ResponseBytes: math.MaxInt64, Reason: "upstream answered 502",
			Instance: "gw-é", Scope: "/t/acme/orders"},
		{Time: time.UnixMicro(math.MaxInt64 / 2), Source: "stone", Key: "sha256:9f86", Outcome: "processed", Scope: "stone"}, // a string in several fields
		{Time: time.UnixMicro(1796000000000000), Route: "/webhooks/stone", Source: "stone", Key: "\x00\xff", Outcome: "processed"},
	}
}

// decodeAll decodes every entry of a segment.
func decodeAll(t *testing.T, seg int64, data []byte) (entries []audit.Entry, idx []uint64) {
	t.Helper()
	err := decodeSegment(seg, data, window{f: &audit.Filter{}, lo: math.MinInt64, hi: math.MaxInt64}, func(i uint64, e audit.Entry) bool {
		entries, idx = append(entries, e), append(idx, i)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return entries, idx
}

// TestSegmentRoundTrip: every field of every entry comes back, with its ID
// made of the segment's id and the entry's place; the summary counts
// them; the times bound them.
func TestSegmentRoundTrip(t *testing.T) {
	in := oddEntries()
	enc := newEncoder()
	for range 2 { // the encoder's reuse leaves nothing of the first
		enc.encode(in, nil)
		got, idx := decodeAll(t, 7, enc.data)
		if len(got) != len(in) {
			t.Fatalf("decoded %d entries, want %d", len(got), len(in))
		}
		for i := range in {
			want := in[i]
			want.Time = time.UnixMicro(want.Time.UnixMicro()).UTC()
			want.ID = 7<<idxBits | int64(i)
			if got[i] != want || idx[i] != uint64(i) {
				t.Errorf("entry %d (idx %d):\n got %+v\nwant %+v", i, idx[i], got[i], want)
			}
		}
		if enc.minUS != (time.Time{}).UnixMicro() || enc.maxUS != math.MaxInt64/2 {
			t.Errorf("times %d to %d", enc.minUS, enc.maxUS)
		}
		if string(enc.sources) != "\x00stone\x00\x00" || string(enc.outcomes) != "\x00processed\x00\x00failed_released\x00" {
			t.Errorf("sources %q, outcomes %q", enc.sources, enc.outcomes)
		}
		n := map[[3]string]int64{}
		if err := eachTriple(enc.summary, func(tr summaryTriple) {
			n[[3]string{string(tr.source), string(tr.route), string(tr.outcome)}] += tr.n
		}); err != nil {
			t.Fatal(err)
		}
		want := map[[3]string]int64{{"stone", "/webhooks/stone", "processed"}: 2, {"", "", ""}: 1,
			{"stone", "/wh", "failed_released"}: 1, {"stone", "", "processed"}: 1}
		if len(n) != len(want) {
			t.Errorf("summary %v, want %v", n, want)
		}
		for k, v := range want {
			if n[k] != v {
				t.Errorf("summary %v, want %v", n, want)
			}
		}
	}

	// Added in two steps (an append to the last segment), the segment is
	// the one encoded at once.
	whole := newEncoder()
	whole.encode(in, nil)
	enc.reset()
	enc.add(in[:2], nil)
	enc.finish()
	enc.add(in[2:], nil)
	enc.finish()
	if string(enc.data) != string(whole.data) || enc.n != len(in) || enc.minUS != whole.minUS || enc.maxUS != whole.maxUS {
		t.Errorf("added in two steps: %d entries, %x\nat once: %x", enc.n, enc.data, whole.data)
	}

	// Given places (a rewrite without some entries): the IDs stay.
	enc.encode(in[2:4], []uint64{2, 3})
	got, idx := decodeAll(t, 7, enc.data)
	if len(got) != 2 || got[0].ID != 7<<idxBits|2 || got[1].ID != 7<<idxBits|3 || idx[1] != 3 || got[1].Key != in[3].Key {
		t.Errorf("rewritten: %+v, %v", got, idx)
	}
}

// TestSegmentFilter: decodeSegment keeps the entries of the filter's
// fields, times and cursor only.
func TestSegmentFilter(t *testing.T) {
	enc := newEncoder()
	in := oddEntries()
	enc.encode(in, nil)
	keys := func(w window) (out []string) {
		err := decodeSegment(1, enc.data, w, func(_ uint64, e audit.Entry) bool {
			out = append(out, e.Key)
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := window{lo: math.MinInt64, hi: math.MaxInt64}
	tests := []struct {
		name string
		w    window
		want string
	}{
		{"source", window{f: &audit.Filter{Source: "stone"}}, "sha256:9f86 kkk sha256:9f86 \x00\xff"},
		{"source not in the segment", window{f: &audit.Filter{Source: "stripe"}}, ""},
		{"route and outcome", window{f: &audit.Filter{Route: "/webhooks/stone", Outcome: "processed"}}, "sha256:9f86 \x00\xff"},
		{"a string of another field", window{f: &audit.Filter{Outcome: "stone"}}, ""},
		{"times", window{f: &audit.Filter{}, lo: -5, hi: 0}, "kkk"},
		{"cursor", window{f: &audit.Filter{}, after: &position{us: 1796000000000000, id: 1<<idxBits | 4}}, "sha256:9f86  kkk"},
	}
	for _, tt := range tests {
		w := tt.w
		if w.lo == 0 && w.hi == 0 {
			w.lo, w.hi = all.lo, all.hi
		}
		got := strings.ReplaceAll(strings.Join(keys(w), " "), strings.Repeat("k", 300), "kkk")
		if got != tt.want {
			t.Errorf("%s: keys %q, want %q", tt.name, got, tt.want)
		}
	}
}

// FuzzDecodeSegment: a blob that isn't a segment is an error wrapping
// errCorrupt, never a panic; a segment's blob cut short or altered
// decodes or errs.
func FuzzDecodeSegment(f *testing.F) {
	enc := newEncoder()
	enc.encode(oddEntries(), nil)
	f.Add(enc.data)
	f.Add(enc.data[:len(enc.data)/2])
	f.Add([]byte{segFormat})
	f.Add([]byte{segFormat, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		w := window{f: &audit.Filter{}, lo: math.MinInt64, hi: math.MaxInt64}
		err := decodeSegment(1, data, w, func(uint64, audit.Entry) bool { return true })
		if err != nil && !errors.Is(err, errCorrupt) {
			t.Fatalf("error %v does not wrap errCorrupt", err)
		}
		if err := eachTriple(data, func(summaryTriple) {}); err != nil && !errors.Is(err, errCorrupt) {
			t.Fatalf("summary error %v does not wrap errCorrupt", err)
		}
	})
}
