package idemhook_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/headerdict"
)

func TestRecordRoundTrip(t *testing.T) {
	fp := [idemhook.FingerprintSize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	created := time.UnixMilli(1_764_000_000_123)
	tests := []struct {
		name string
		give idemhook.Record
	}{
		{"pending", idemhook.Record{State: idemhook.StatePending, Token: "0123456789abcdef", Fingerprint: fp, CreatedAt: created}},
		{"pending without fingerprint", idemhook.Record{State: idemhook.StatePending, Token: "t", CreatedAt: created}},
		{"completed", idemhook.Record{
			State: idemhook.StateCompleted, Fingerprint: fp, CreatedAt: created, Status: 201,
			Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}},
			Body:   []byte(`{"ok":true}`),
		}},
		{"completed empty", idemhook.Record{State: idemhook.StateCompleted, Status: 204}},
		{"body omitted", idemhook.Record{State: idemhook.StateCompleted, Status: 200, BodyOmitted: true, CreatedAt: created}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.give.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.give) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", *got, tt.give)
			}
			again, _ := got.MarshalBinary()
			if !bytes.Equal(again, b) {
				t.Fatal("encoding is not deterministic")
			}
		})
	}
}

// The layout of both versions, byte by byte: what other stores' records
// hold must not change by accident.
func TestRecordEncodingLayout(t *testing.T) {
	created := time.UnixMilli(1_764_000_000_123)
	ms := binary.AppendVarint(nil, created.UnixMilli())
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	typical := idemhook.Record{State: idemhook.StateCompleted, CreatedAt: created, Status: 200,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"ok":true}`)}
	pending := idemhook.Record{State: idemhook.StatePending, CreatedAt: created, Token: "tok"}

	// Version 2: Content-Type and application/json are dictionary strings
	// 0 and 13 (tokens 0 and 26); X-Custom and "v" are literals.
	v2 := cat([]byte{2, 2, 0}, ms, []byte{0xc8, 0x01, 1, 0, 26, 11}, []byte(`{"ok":true}`))
	custom := typical
	custom.Header = http.Header{"X-Custom": {"v"}}
	v2custom := cat([]byte{2, 2, 0}, ms, []byte{0xc8, 0x01, 1, 2*8 + 1}, []byte("X-Custom"), []byte{2*1 + 1, 'v', 11}, []byte(`{"ok":true}`))
	v1pending := cat([]byte{1, 1, 0}, ms, []byte{3}, []byte("tok"))
	for _, tt := range []struct {
		name string
		give idemhook.Record
		want []byte
	}{
		{"typical answer, version 2", typical, v2},
		{"literal header, version 2", custom, v2custom},
		{"pending, version 1", pending, v1pending},
	} {
		got, err := tt.give.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, tt.want) {
			t.Errorf("%s: encoded as %x, want %x", tt.name, got, tt.want)
		}
	}
	if len(v2) != 26 {
		t.Errorf("the typical answer takes %d bytes, want the 26 the docs give", len(v2))
	}

	// Version 1, as completed records were written before version 2, still
	// decodes to the same record.
	v1 := cat([]byte{1, 2, 0}, ms, []byte{0xc8, 0x01, 1, 12}, []byte("Content-Type"), []byte{16}, []byte("application/json"), []byte{11}, []byte(`{"ok":true}`))
	got, err := decodeRecord(v1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, typical) {
		t.Fatalf("version 1 decoded as %+v, want %+v", *got, typical)
	}
}

// Every dictionary string round-trips as a header name and as a value, and
// takes one byte.
func TestRecordDictionaryStrings(t *testing.T) {
	for _, s := range headerdict.Strings {
		give := idemhook.Record{State: idemhook.StateCompleted, Status: 200, Header: http.Header{s: {s}}}
		b, err := give.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("%q is written out in %x", s, b)
		}
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, give) {
			t.Errorf("%q: round trip gave %+v", s, *got)
		}
	}
}

func TestRecordDecodeRejectsCorruptValues(t *testing.T) {
	good, _ := (&idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: []byte("hello")}).MarshalBinary()
	tests := []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"json left by another writer", []byte(`{"statusCode":200,"body":{"ok":true}}`)},
		{"unknown version", append([]byte{9}, good[1:]...)},
		{"unknown state", append([]byte{1, 7}, good[2:]...)},
		{"unknown flag", append([]byte{1, 2, 0x80}, good[3:]...)},
		{"truncated", good[:len(good)-2]},
		{"trailing bytes", append(append([]byte{}, good...), 0)},
		{"bad status", []byte{1, 2, 0, 0, 5, 0, 0}},
		{"header token past the dictionary", []byte{2, 2, 0, 0, 0xc8, 0x01, 1, 0, 2 * byte(len(headerdict.Strings)), 0}},
		{"header literal past the end", []byte{2, 2, 0, 0, 0xc8, 0x01, 1, 0, 2*5 + 1, 'a', 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeRecord(tt.give)
			if !errors.Is(err, idemhook.ErrCorruptRecord) {
				t.Fatalf("err = %v, want ErrCorruptRecord", err)
			}
		})
	}
}

func TestRecordMarshalRejectsUnknownState(t *testing.T) {
	if _, err := (&idemhook.Record{}).MarshalBinary(); err == nil {
		t.Fatal("encoded a record without a state")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []idemhook.Record{
		{State: idemhook.StatePending, Token: "tok", CreatedAt: time.UnixMilli(5)},
		{State: idemhook.StateCompleted, Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("x")},
		{State: idemhook.StateCompleted, Status: 200, BodyOmitted: true, Fingerprint: [16]byte{1}},
	} {
		b, _ := r.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{1, 2, 0, 0, 0xc8, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f})
	// Version 1 of a completed record, as written before version 2.
	f.Add([]byte{1, 2, 0, 0, 0xc8, 0x01, 1, 1, 'A', 1, 'b', 1, 'x'})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, idemhook.ErrCorruptRecord) {
				t.Fatalf("decode error does not wrap ErrCorruptRecord: %v", err)
			}
			return
		}
		b, err := rec.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		back, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(rec, back) {
			t.Fatalf("decode(encode(decode(x))) != decode(x):\n%+v\n%+v", rec, back)
		}
	})
}

// A header whose names are out of order is not what MarshalBinary writes,
// but decodes to the values each name was given.
func TestRecordDecodesHeaderNamesOutOfOrder(t *testing.T) {
	for _, version := range []byte{1, 2} {
		// A one-byte string: its length in version 1, a literal token
		// (2*length+1) in version 2.
		str := func(c byte) []byte { return []byte{1, c} }
		if version == 2 {
			str = func(c byte) []byte { return []byte{2*1 + 1, c} }
		}
		b := []byte{version, 2, 0, 0, 0xc8, 0x01, 4}
		for _, e := range []string{"A1", "B2", "A3", "A4"} {
			b = append(append(b, str(e[0])...), str(e[1])...)
		}
		b = append(b, 0) // empty body
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		if want := (http.Header{"A": {"1", "3", "4"}, "B": {"2"}}); !reflect.DeepEqual(got.Header, want) {
			t.Errorf("version %d: header %v, want %v", version, got.Header, want)
		}
	}
}

// The decoded header's value slices share one array: each is capped at its
// own values, so appending to one leaves the others as they were.
func TestRecordDecodedHeaderValuesAreIndependent(t *testing.T) {
	give := idemhook.Record{State: idemhook.StateCompleted, Status: 200,
		Header: http.Header{"A": {"1", "2"}, "B": {"3"}, "C": {"4"}}}
	b, err := give.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	got.Header["A"] = append(got.Header["A"], "x")
	got.Header["B"] = append(got.Header["B"], "y")
	want := http.Header{"A": {"1", "2", "x"}, "B": {"3", "y"}, "C": {"4"}}
	if !reflect.DeepEqual(got.Header, want) {
		t.Fatalf("after appends: %v, want %v", got.Header, want)
	}
}

// BenchmarkRecord encodes and decodes the typical stored answer, as the
// SQLite, PostgreSQL and Redis stores do on each first delivery and replay.
func BenchmarkRecord(b *testing.B) {
	rec := idemhook.Record{State: idemhook.StateCompleted, CreatedAt: time.UnixMilli(1_764_000_000_123), Status: 200,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"ok":true}`)}
	enc, err := rec.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rec.MarshalBinary(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(enc)), "bytes/record")
	})
	b.Run("Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		var got idemhook.Record
		for b.Loop() {
			if err := got.UnmarshalBinary(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// decodeRecord decodes b into a new record, as a store does with a value it
// read.
func decodeRecord(b []byte) (*idemhook.Record, error) {
	r := new(idemhook.Record)
	if err := r.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return r, nil
}
