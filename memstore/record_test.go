package memstore

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// sharedRoundTrip is r after idemhook's binary encoding and back: what the
// other stores return for r, and so what memstore must return.
func sharedRoundTrip(t testing.TB, r *idemhook.Record) *idemhook.Record {
	t.Helper()
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: %v", err)
	}
	var out idemhook.Record
	if err := out.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	return &out
}

// checkRoundTrip encodes r with epoch and checks that decoding gives what
// idemhook's encoding does.
func checkRoundTrip(t testing.TB, r *idemhook.Record, epoch int64) []byte {
	t.Helper()
	enc, err := appendRecord(nil, r, epoch)
	if err != nil {
		t.Fatalf("appendRecord(%+v): %v", r, err)
	}
	got, err := decodeRecord(string(enc), epoch)
	if err != nil {
		t.Fatalf("decodeRecord(%x): %v", enc, err)
	}
	if want := sharedRoundTrip(t, r); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip of %+v:\ngot  %+v\nwant %+v", r, got, want)
	}
	again, err := appendRecord(nil, got, epoch)
	if err != nil || string(again) != string(enc) {
		t.Fatalf("encoding the decoded record: %x, %v; want %x", again, err, enc)
	}
	return enc
}

func TestRecordRoundTrip(t *testing.T) {
	now := time.Date(2026, 12, 1, 13, 0, 0, 123456789, time.UTC)
	epoch := now.Add(-time.Hour).UnixMilli()
	fp := [idemhook.FingerprintSize]byte{1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}
	var many http.Header = http.Header{}
	for i := range 40 {
		many.Add(strings.Repeat("X", i%5+1)+"-Name", strings.Repeat("v", i))
	}
	tests := []struct {
		name string
		rec  idemhook.Record
	}{
		{"pending", idemhook.Record{State: idemhook.StatePending, Token: "tok-1", CreatedAt: now}},
		{"pending, fingerprint", idemhook.Record{State: idemhook.StatePending, Token: "ABCDEFGHIJKLMNOPQRSTUVWXYZ", CreatedAt: now, Fingerprint: fp}},
		{"pending, empty token", idemhook.Record{State: idemhook.StatePending}},
		{"pending, binary token", idemhook.Record{State: idemhook.StatePending, Token: "\x00\xff\x80 tok"}},
		{"pending, response fields dropped", idemhook.Record{State: idemhook.StatePending, Token: "t", Status: 200, Body: []byte("x"), Header: http.Header{"A": {"b"}}}},
		{"typical", *TypicalAnswer(now)},
		{"empty body, no header", idemhook.Record{State: idemhook.StateCompleted, CreatedAt: now, Status: 204}},
		{"empty header map and body", idemhook.Record{State: idemhook.StateCompleted, Status: 204, Header: http.Header{}, Body: []byte{}}},
		{"name without values", idemhook.Record{State: idemhook.StateCompleted, Status: 200, Header: http.Header{"X-Empty": {}, "Vary": {"Origin"}}}},
		{"body omitted", idemhook.Record{State: idemhook.StateCompleted, Status: 500, BodyOmitted: true, Fingerprint: fp}},
		{"token dropped", idemhook.Record{State: idemhook.StateCompleted, Status: 200, Token: "t"}},
		{"status bounds", idemhook.Record{State: idemhook.StateCompleted, Status: 100}},
		{"status 999", idemhook.Record{State: idemhook.StateCompleted, Status: 999}},
		{"unusual headers", idemhook.Record{State: idemhook.StateCompleted, Status: 201, CreatedAt: now, Header: http.Header{
			"Content-Type": {"application/vnd.api+json; profile=\"x\""},
			"Set-Cookie":   {"a=1; Path=/", "", "b=2; Path=/", strings.Repeat("c", 300)},
			"":             {"empty name"},
			"x-lower":      {"not canonical", "\x00\xff"},
			"Gzip":         {"gzip"}, // a dictionary value as a name
			"Etag":         {`"abc"`},
		}, Body: []byte("\n\x00\xff")}},
		{"many header values", idemhook.Record{State: idemhook.StateCompleted, Status: 200, Header: many, Body: []byte("b")}},
		{"large body", idemhook.Record{State: idemhook.StateCompleted, Status: 200, Body: []byte(strings.Repeat("z", 70_000))}},
		{"created before the epoch", idemhook.Record{State: idemhook.StateCompleted, Status: 200, CreatedAt: now.Add(-48 * time.Hour)}},
		{"created at the epoch", idemhook.Record{State: idemhook.StatePending, Token: "t", CreatedAt: time.UnixMilli(epoch)}},
		{"created at the Unix epoch", idemhook.Record{State: idemhook.StatePending, Token: "t", CreatedAt: time.Unix(0, 0)}},
		{"created before 1970", idemhook.Record{State: idemhook.StatePending, Token: "t", CreatedAt: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"created far ahead", idemhook.Record{State: idemhook.StatePending, Token: "t", CreatedAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, ep := range []int64{epoch, 0, -epoch} {
				checkRoundTrip(t, &tt.rec, ep)
			}
		})
	}
}

// TestTypicalEntrySize: the typical entry (a body-hash key of an interned
// prefix, the benchmark's answer) takes at most 64 bytes, also in a store
// a year old, whose created-at differences take 5 bytes.
func TestTypicalEntrySize(t *testing.T) {
	now := time.Now()
	done := TypicalAnswer(now)
	var pt prefixTable
	key := "idem:stone:sha256:" + strings.Repeat("0123456789abcdef", 4)
	ck := pt.compactKey(nil, key, true)
	for _, age := range []time.Duration{0, time.Hour, 365 * 24 * time.Hour} {
		e, err := newEntry(nil, now.Add(time.Hour).UnixNano(), ck, done, now.Add(-age).UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if len(e) > 64 {
			t.Errorf("store %v old: typical entry takes %d bytes, want at most 64", age, len(e))
		}
	}
}

func TestRecordRefusesBadRecords(t *testing.T) {
	for _, r := range []idemhook.Record{
		{State: 0, Token: "t"},
		{State: 3},
		{State: idemhook.StateCompleted, Status: 0},
		{State: idemhook.StateCompleted, Status: 99},
		{State: idemhook.StateCompleted, Status: 1000},
		{State: idemhook.StateCompleted, Status: -200},
	} {
		if b, err := appendRecord(nil, &r, 0); err == nil {
			t.Errorf("appendRecord(%+v) = %x, want an error", r, b)
		}
	}
}

func TestDecodeRecordRefusesCorrupt(t *testing.T) {
	for _, data := range []string{
		"",
		"\x20",                 // unknown head bit
		"\x18",                 // no created-at and created before
		"\x01\x80",             // truncated created-at
		"\x0b\x00",             // fingerprint truncated
		"\x09",                 // completed, no status
		"\x09\xff\x07",         // status too large
		"\x09\x64\x01",         // one header entry, nothing after
		"\x09\x64\x01\x07ab",   // literal longer than what is left
		"\x09\x64\x01\x00\x7e", // dictionary index out of range
		"\x09\x64\x03\x03a\x01\x03b\x01\x03a\x01",          // names out of order
		"\x09\x64\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", // uvarint over 64 bits
	} {
		if r, err := decodeRecord(data, 0); !errors.Is(err, idemhook.ErrCorruptRecord) {
			t.Errorf("decodeRecord(%q) = %+v, %v; want ErrCorruptRecord", data, r, err)
		}
	}
}

// FuzzRecord: any record the fuzzer builds round-trips as through idemhook's
// own encoding, and any bytes decode without a panic.
func FuzzRecord(f *testing.F) {
	f.Add(true, "tok", int64(1_764_590_000_000), int64(1_764_590_000_000), 200, "Content-Type", "application/json", "Set-Cookie", "a=1", []byte(`{"ok":true}`), false, byte(0))
	f.Add(false, "", int64(0), int64(5), 100, "", "", "", "", []byte{}, true, byte(7))
	f.Add(true, "\xff", int64(-1), int64(1<<62), 999, "X", "gzip", "X", "", []byte{0}, false, byte(1))
	f.Fuzz(func(t *testing.T, completed bool, token string, created, epoch int64, status int,
		k1, v1, k2, v2 string, body []byte, omitted bool, fp byte) {
		r := &idemhook.Record{State: idemhook.StatePending, Token: token, BodyOmitted: omitted}
		if created != 0 {
			r.CreatedAt = time.UnixMilli(created)
		}
		r.Fingerprint[0] = fp
		if completed {
			r.State = idemhook.StateCompleted
			r.Status = minStatus + (status%900+900)%900
			r.Header = http.Header{}
			r.Header.Add(k1, v1)
			r.Header.Add(k2, v2)
			r.Body = body
		}
		checkRoundTrip(t, r, epoch)
		// Arbitrary bytes: an error or a record, never a panic.
		decodeRecord(string(body), epoch)
		pendingToken(string(body))
	})
}

func TestPendingToken(t *testing.T) {
	fp := [idemhook.FingerprintSize]byte{9}
	for _, r := range []idemhook.Record{
		{State: idemhook.StatePending, Token: "abc", CreatedAt: time.Now()},
		{State: idemhook.StatePending, Token: "abc", Fingerprint: fp},
		{State: idemhook.StatePending, Token: "", CreatedAt: time.Now().Add(-time.Hour)},
	} {
		enc, err := appendRecord(nil, &r, time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if tok, err := pendingToken(string(enc)); err != nil || tok != r.Token {
			t.Errorf("pendingToken(%+v) = %q, %v", r, tok, err)
		}
	}
	done, _ := appendRecord(nil, &idemhook.Record{State: idemhook.StateCompleted, Status: 200}, 0)
	if _, err := pendingToken(string(done)); !errors.Is(err, idemhook.ErrCorruptRecord) {
		t.Errorf("pendingToken(completed) = %v, want ErrCorruptRecord", err)
	}
}

func BenchmarkRecord(b *testing.B) {
	done := TypicalAnswer(time.Now())
	epoch := time.Now().Add(-time.Hour).UnixMilli()
	b.Run("encode", func(b *testing.B) {
		var buf [256]byte
		for b.Loop() {
			appendRecord(buf[:0], done, epoch)
		}
	})
	b.Run("decode", func(b *testing.B) {
		enc, _ := appendRecord(nil, done, epoch)
		s := string(enc)
		b.ReportAllocs()
		for b.Loop() {
			decodeRecord(s, epoch)
		}
	})
}
