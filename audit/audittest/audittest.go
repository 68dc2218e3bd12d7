// Package audittest is the conformance suite of the audit trail's
// [audit.Querier] and [audit.Counter] contracts and of the retention of the
// sinks that prune. Every queryable sink in this module runs it from its
// tests ([audit.Ring], sqliteaudit, pgaudit, redisaudit), and a third-party
// sink should too:
//
//	func TestConformance(t *testing.T) {
//		audittest.Run(t, audittest.Harness{
//			New: func(t *testing.T, now func() time.Time) audittest.Trail { return newSink(t, now) },
//		})
//	}
//
// The suite writes entries over several sources, outcomes, routes and
// times (some sharing one microsecond, a few out of order) and checks every
// filter, sub-microsecond time bounds, pagination with the cursor (every
// entry exactly once, also while entries are written between pages), page
// sizes, malformed cursors, the counts per source and outcome (for an
// [audit.Counter]) and pruning at the retention's exact boundary (for a sink
// with a Prune method).
//
// Its data and checks are exported too ([Dataset], [Expected],
// [SameEntries], [QueryAll]), for a sink's own tests.
package audittest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
)

// Trail is what the suite needs of a sink.
type Trail interface {
	audit.Sink
	audit.Querier
}

// pruner is what the SQL sinks add.
type pruner interface {
	Prune(ctx context.Context) (int64, error)
}

// Harness tells the suite how to make a sink.
type Harness struct {
	// New returns an empty trail for one subtest. A trail with a
	// retention decides what is old with now. The suite moves that clock
	// to check Prune. New may register cleanup with t.Cleanup. Required.
	New func(t *testing.T, now func() time.Time) Trail

	// AppendOrder says that the trail returns entries newest appended
	// first, not sorted by time (the Redis stream). Default: false, sorted
	// by time then ID, newest first.
	AppendOrder bool
}

// Run runs the conformance suite against the trails h makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("audittest: Harness.New is nil")
	}
	for _, st := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Query", h.testQuery},
		{"PaginationWhileWriting", h.testPaginationWhileWriting},
		{"QueryLimits", h.testQueryLimits},
		{"BadCursor", h.testBadCursor},
		{"Prune", h.testPrune},
		{"Counts", h.testCounts},
	} {
		t.Run(st.name, st.test)
	}
}

// expectedFor is expected in the order of the harness's trail.
func (h Harness) expectedFor(written []audit.Entry, f audit.Filter) []audit.Entry {
	if !h.AppendOrder {
		return Expected(written, f)
	}
	var out []audit.Entry
	for i := len(written) - 1; i >= 0; i-- {
		if e := written[i]; len(Expected([]audit.Entry{e}, f)) == 1 {
			out = append(out, Expected([]audit.Entry{e}, f)[0])
		}
	}
	return out
}

// Base is the time around which [Dataset] spreads its entries.
var Base = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Dataset returns n entries over sources, outcomes and routes, several
// sharing one time (so the order falls back to the ID), in write order.
func Dataset(n int) []audit.Entry {
	sources := []string{"stone", "stripe", "whatsapp"}
	outcomes := []string{"processed", "replayed", "failed_released", "in_flight_proceeded"}
	out := make([]audit.Entry, n)
	for i := range out {
		out[i] = audit.Entry{
			// Times go forward, three entries per instant. A few go
			// back, as entries from concurrent requests do.
			Time:          Base.Add(time.Duration(i/3)*time.Second + time.Duration(i%5/4)*time.Microsecond - time.Duration(i%7/6)*time.Minute),
			Route:         "/webhooks/" + sources[i%3],
			Source:        sources[i%3],
			Key:           fmt.Sprintf("sha256:%064x", i),
			Outcome:       outcomes[i%4],
			Status:        []int{200, 200, 502, 200}[i%4],
			Duration:      time.Duration(i+1) * 1234567 * time.Nanosecond,
			RequestBytes:  int64(100 + i),
			ResponseBytes: int64(i % 10),
			Reason:        []string{"", "", "upstream answered 502", ""}[i%4],
			Instance:      fmt.Sprintf("gw-%d", i%2),
		}
	}
	return out
}

// Expected returns the entries of written (in write order) matching f,
// newest first, as a Querier sorted by time must order them: time
// descending, then the later write first. Times are truncated to the
// microsecond, as the sinks store them.
func Expected(written []audit.Entry, f audit.Filter) []audit.Entry {
	var out []audit.Entry
	for i := len(written) - 1; i >= 0; i-- {
		e := written[i]
		e.Time = time.UnixMicro(e.Time.UnixMicro()).UTC()
		if (f.Source != "" && e.Source != f.Source) || (f.Outcome != "" && e.Outcome != f.Outcome) ||
			(f.Route != "" && e.Route != f.Route) || (!f.Since.IsZero() && e.Time.Before(f.Since)) ||
			(!f.Until.IsZero() && !e.Time.Before(f.Until)) {
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b audit.Entry) int { return b.Time.Compare(a.Time) })
	return out
}

// SameEntries fails the test unless got and want hold the same entries in
// the same order. Every entry of got must have an ID, but IDs are not compared.
func SameEntries(t testing.TB, what string, got, want []audit.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		g := got[i]
		if g.ID == 0 {
			t.Fatalf("%s: entry %d has no ID", what, i)
		}
		g.ID = 0
		if g != want[i] {
			t.Fatalf("%s: entry %d:\n got %+v\nwant %+v", what, i, g, want[i])
		}
	}
}

// QueryAll follows the cursor from the first page to the last and returns
// the entries and the number of pages. It fails the test when a page is
// larger than f.Limit, an entry comes twice, an empty page has a cursor, or
// the pages don't end.
func QueryAll(t testing.TB, q audit.Querier, f audit.Filter) (all []audit.Entry, pages int) {
	t.Helper()
	seen := map[int64]bool{}
	for {
		p, err := q.Query(t.Context(), f)
		if err != nil {
			t.Fatalf("Query(%+v): %v", f, err)
		}
		pages++
		if len(p.Entries) > f.Limit && f.Limit > 0 {
			t.Fatalf("page %d has %d entries, limit %d", pages, len(p.Entries), f.Limit)
		}
		for _, e := range p.Entries {
			if seen[e.ID] {
				t.Fatalf("entry %d returned twice", e.ID)
			}
			seen[e.ID] = true
		}
		all = append(all, p.Entries...)
		if p.Next == "" {
			return all, pages
		}
		if len(p.Entries) == 0 {
			t.Fatal("an empty page with a Next cursor")
		}
		f.Cursor = p.Next
		if pages > 1000 {
			t.Fatal("pagination does not end")
		}
	}
}

// Fill writes n entries to s in batches of 1000, for benchmarks: each batch
// is Dataset(1000) with its times moved to follow the previous batch's,
// one millisecond apart from Base on.
func Fill(tb testing.TB, s audit.Sink, n int) {
	tb.Helper()
	batch := Dataset(1000)
	for i := 0; i*len(batch) < n; i++ {
		for j := range batch {
			batch[j].Time = Base.Add(time.Duration(i*1000+j) * time.Millisecond)
		}
		if err := s.Write(tb.Context(), batch[:min(len(batch), n-i*len(batch))]); err != nil {
			tb.Fatal(err)
		}
	}
}
