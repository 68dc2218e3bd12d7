package varint_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/idemhook/idemhook/internal/varint"
)

func TestUvarintMatchesEncodingBinary(t *testing.T) {
	inputs := [][]byte{
		nil,
		{0},
		{0x7f},
		{0x80},                   // truncated
		{0x80, 0x01},             // 128
		{0xff, 0xff, 0xff, 0xff}, // truncated
		binary.AppendUvarint(nil, math.MaxUint64),
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},       // overflows in the 10th byte
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // 11 bytes
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},       // 10 continuation bytes
		{0x96, 0x01, 0xff}, // 150 and a byte after
	}
	for _, in := range inputs {
		wv, wn := binary.Uvarint(in)
		if v, n := varint.Uvarint(in); v != wv || n != wn {
			t.Errorf("Uvarint(%x) = %d, %d; binary.Uvarint gives %d, %d", in, v, n, wv, wn)
		}
		if v, n := varint.Uvarint(string(in)); v != wv || n != wn {
			t.Errorf("Uvarint(%q) = %d, %d; binary.Uvarint gives %d, %d", in, v, n, wv, wn)
		}
	}
}

func TestReaderRoundTrip(t *testing.T) {
	var b []byte
	b = append(b, 7)
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = binary.AppendVarint(b, math.MinInt64)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = append(b, "xy"...)
	check := func(t *testing.T, c byte, u uint64, v1, v2 int64, s, next, rest string, err error) {
		t.Helper()
		if c != 7 || u != 300 || v1 != -5 || v2 != math.MinInt64 || s != "abc" || next != "xy" || rest != "" || err != nil {
			t.Errorf("read %d %d %d %d %q %q, rest %q, err %v", c, u, v1, v2, s, next, rest, err)
		}
	}
	t.Run("bytes", func(t *testing.T) {
		r := varint.NewReader(b)
		check(t, r.Byte(), r.Uvarint(), r.Varint(), r.Varint(), string(r.Bytes()), string(r.Next(2)), string(r.Rest()), r.Err())
	})
	t.Run("string", func(t *testing.T) {
		r := varint.NewReader(string(b))
		check(t, r.Byte(), r.Uvarint(), r.Varint(), r.Varint(), r.Bytes(), r.Next(2), r.Rest(), r.Err())
	})
}

func TestReaderKeepsFirstError(t *testing.T) {
	overflow := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 5}
	tests := []struct {
		name string
		give []byte
		read func(r *varint.Reader[[]byte])
		want error
	}{
		{"empty byte", nil, func(r *varint.Reader[[]byte]) { r.Byte() }, varint.ErrTruncated},
		{"truncated uvarint", []byte{0x80}, func(r *varint.Reader[[]byte]) { r.Uvarint() }, varint.ErrTruncated},
		{"truncated varint", []byte{0xff, 0xff}, func(r *varint.Reader[[]byte]) { r.Varint() }, varint.ErrTruncated},
		{"overflowing uvarint", overflow, func(r *varint.Reader[[]byte]) { r.Uvarint() }, varint.ErrOverflow},
		{"overflowing varint", overflow, func(r *varint.Reader[[]byte]) { r.Varint() }, varint.ErrOverflow},
		{"length past the end", []byte{5, 'a', 'b'}, func(r *varint.Reader[[]byte]) { r.Bytes() }, varint.ErrTruncated},
		{"huge length", binary.AppendUvarint(nil, math.MaxUint64), func(r *varint.Reader[[]byte]) { r.Bytes() }, varint.ErrTruncated},
		{"next past the end", []byte{1, 2}, func(r *varint.Reader[[]byte]) { r.Next(3) }, varint.ErrTruncated},
		// The overflow comes first; the truncated byte after it does not
		// replace it.
		{"first of two", overflow, func(r *varint.Reader[[]byte]) { r.Uvarint(); r.Next(100); r.Byte() }, varint.ErrOverflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := varint.NewReader(tt.give)
			tt.read(&r)
			if !errors.Is(r.Err(), tt.want) {
				t.Fatalf("err = %v, want %v", r.Err(), tt.want)
			}
			// After an error every read gives the zero value and the
			// error stays.
			if c, u, v, s := r.Byte(), r.Uvarint(), r.Varint(), r.Bytes(); c != 0 || u != 0 || v != 0 || len(s) != 0 {
				t.Errorf("after the error: %d %d %d %q", c, u, v, s)
			}
			if len(r.Rest()) != 0 {
				t.Errorf("rest = %x after the error, want nothing", r.Rest())
			}
			if !errors.Is(r.Err(), tt.want) {
				t.Errorf("err became %v", r.Err())
			}
		})
	}
}

func TestReaderFailKeepsFirstError(t *testing.T) {
	mine := errors.New("mine")
	r := varint.NewReader("\x80")
	r.Fail(mine)
	r.Uvarint()
	if r.Err() != mine {
		t.Fatalf("err = %v, want %v", r.Err(), mine)
	}
	r = varint.NewReader("\x80")
	r.Uvarint()
	r.Fail(mine)
	if r.Err() != varint.ErrTruncated {
		t.Fatalf("err = %v, want %v", r.Err(), varint.ErrTruncated)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte{0x80, 0x01, 2, 'a', 'b'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		wv, wn := binary.Uvarint(b)
		if v, n := varint.Uvarint(b); v != wv || n != wn {
			t.Fatalf("Uvarint(%x) = %d, %d; binary.Uvarint gives %d, %d", b, v, n, wv, wn)
		}
		rb, rs := varint.NewReader(b), varint.NewReader(string(b))
		for rb.Err() == nil {
			x, y := rb.Bytes(), rs.Bytes()
			if string(x) != y || !errors.Is(rb.Err(), rs.Err()) {
				t.Fatalf("byte and string readers differ: %q, %v; %q, %v", x, rb.Err(), y, rs.Err())
			}
		}
	})
}
