package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/idemhook/idemhook"
)

// Diff describes how got differs from want, one difference per line. It
// returns "" when they are equal as a store must round-trip them. CreatedAt
// is compared to the millisecond (the encoding's resolution), and a nil
// Header or Body equals an empty one.
func Diff(got, want *idemhook.Record) string {
	switch {
	case got == nil && want == nil:
		return ""
	case got == nil:
		return fmt.Sprintf("got no record, want %s", Describe(want))
	case want == nil:
		return fmt.Sprintf("got %s, want no record", Describe(got))
	}
	var d []string
	add := func(format string, args ...any) { d = append(d, fmt.Sprintf(format, args...)) }
	if got.State != want.State {
		add("State: got %v, want %v", got.State, want.State)
	}
	if got.Token != want.Token {
		add("Token: got %q, want %q", got.Token, want.Token)
	}
	if got.Fingerprint != want.Fingerprint {
		add("Fingerprint: got %x, want %x", got.Fingerprint, want.Fingerprint)
	}
	if g, w := millis(got), millis(want); g != w {
		add("CreatedAt: got %s, want %s (compared to the millisecond)", formatMillis(got), formatMillis(want))
	}
	if got.Status != want.Status {
		add("Status: got %d, want %d", got.Status, want.Status)
	}
	d = append(d, headerDiff(got, want)...)
	if !bytes.Equal(got.Body, want.Body) {
		add("Body: %s", bodyDiff(got.Body, want.Body))
	}
	if got.BodyOmitted != want.BodyOmitted {
		add("BodyOmitted: got %t, want %t", got.BodyOmitted, want.BodyOmitted)
	}
	return strings.Join(d, "\n")
}

// Describe summarizes r on one line for test messages.
func Describe(r *idemhook.Record) string {
	if r == nil {
		return "<nil>"
	}
	if r.State == idemhook.StatePending {
		return fmt.Sprintf("pending{token %q, fingerprint %x, created %s}", r.Token, r.Fingerprint, formatMillis(r))
	}
	return fmt.Sprintf("%v{status %d, %d header names, %d-byte body, omitted %t, fingerprint %x, created %s}",
		r.State, r.Status, len(r.Header), len(r.Body), r.BodyOmitted, r.Fingerprint, formatMillis(r))
}

func millis(r *idemhook.Record) int64 {
	if r.CreatedAt.IsZero() {
		return 0
	}
	return r.CreatedAt.UnixMilli()
}

func formatMillis(r *idemhook.Record) string {
	if r.CreatedAt.IsZero() {
		return "zero"
	}
	return r.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z")
}

func headerDiff(got, want *idemhook.Record) []string {
	names := make([]string, 0, len(got.Header)+len(want.Header))
	for k := range got.Header {
		names = append(names, k)
	}
	for k := range want.Header {
		if _, ok := got.Header[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var d []string
	for _, k := range names {
		g, gok := got.Header[k]
		w, wok := want.Header[k]
		switch {
		case !wok:
			d = append(d, fmt.Sprintf("Header[%q]: got %q, want no such name", k, g))
		case !gok:
			d = append(d, fmt.Sprintf("Header[%q]: missing, want %q", k, w))
		case !slices.Equal(g, w):
			d = append(d, fmt.Sprintf("Header[%q]: got %q, want %q", k, g, w))
		}
	}
	return d
}

func bodyDiff(got, want []byte) string {
	n := min(len(got), len(want))
	i := 0
	for i < n && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("got %d bytes, want %d; first difference at offset %d: got %s, want %s",
		len(got), len(want), i, excerpt(got, i), excerpt(want, i))
}

func excerpt(b []byte, at int) string {
	if at >= len(b) {
		return "end of body"
	}
	end := min(at+16, len(b))
	return fmt.Sprintf("%q", b[at:end])
}
