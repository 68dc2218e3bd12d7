package audittest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/fakeclock"
)

// testQuery: every filter returns the matching entries in order, on one
// page and followed through pages of 1, 7 and 20.
func (h Harness) testQuery(t *testing.T) {
	s := h.New(t, time.Now)
	written := Dataset(60)
	// Several batches, as the Recorder writes them.
	for i := 0; i < len(written); i += 25 {
		if err := s.Write(t.Context(), written[i:min(i+25, len(written))]); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		give audit.Filter
	}{
		{"all", audit.Filter{}},
		{"source", audit.Filter{Source: "stripe"}},
		{"outcome", audit.Filter{Outcome: "replayed"}},
		{"route", audit.Filter{Route: "/webhooks/stone"}},
		{"source and outcome", audit.Filter{Source: "stone", Outcome: "processed"}},
		{"since", audit.Filter{Since: Base.Add(10 * time.Second)}},
		{"until", audit.Filter{Until: Base.Add(5 * time.Second)}},
		{"since and until", audit.Filter{Since: Base.Add(3 * time.Second), Until: Base.Add(9*time.Second + 2*time.Microsecond)}},
		{"sub-microsecond bounds", audit.Filter{Since: Base.Add(3*time.Second + 500), Until: Base.Add(9*time.Second + 1500)}},
		{"all filters", audit.Filter{Source: "stone", Outcome: "processed", Route: "/webhooks/stone", Since: Base.Add(-time.Hour), Until: Base.Add(time.Hour)}},
		{"no match", audit.Filter{Source: "shopify"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := h.expectedFor(written, tt.give)
			p, err := s.Query(t.Context(), tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if p.Next != "" {
				t.Errorf("Next = %q on a page holding everything", p.Next)
			}
			SameEntries(t, "one page", p.Entries, want)

			for _, limit := range []int{1, 7, 20} {
				f := tt.give
				f.Limit = limit
				all, pages := QueryAll(t, s, f)
				SameEntries(t, fmt.Sprintf("pages of %d", limit), all, want)
				if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
					t.Errorf("pages of %d: %d pages for %d entries", limit, pages, len(want))
				}
			}
		})
	}
}

// testPaginationWhileWriting checks that entries written between pages
// don't disturb the cursor, because they are newer than it. Every entry
// present at the first page is returned exactly once.
func (h Harness) testPaginationWhileWriting(t *testing.T) {
	s := h.New(t, time.Now)
	written := Dataset(40)
	if err := s.Write(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	want := h.expectedFor(written, audit.Filter{})
	var got []audit.Entry
	f := audit.Filter{Limit: 6}
	for i := 0; ; i++ {
		p, err := s.Query(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Entries...)
		if p.Next == "" {
			break
		}
		f.Cursor = p.Next
		more := Dataset(1)
		more[0].Time = Base.Add(time.Hour + time.Duration(i)*time.Second)
		if err := s.Write(t.Context(), more); err != nil {
			t.Fatal(err)
		}
	}
	SameEntries(t, "pages", got, want)
}

func (h Harness) testQueryLimits(t *testing.T) {
	s := h.New(t, time.Now)
	written := Dataset(audit.MaxLimit + 50)
	if err := s.Write(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give     int
		wantLen  int
		wantNext bool
	}{
		{0, audit.DefaultLimit, true},
		{-5, audit.DefaultLimit, true},
		{10, 10, true},
		{audit.MaxLimit, audit.MaxLimit, true},
		{audit.MaxLimit + 500, audit.MaxLimit, true},
	}
	for _, tt := range tests {
		p, err := s.Query(t.Context(), audit.Filter{Limit: tt.give})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) != tt.wantLen || (p.Next != "") != tt.wantNext {
			t.Errorf("Limit %d: got %d entries, next %q; want %d, next %t", tt.give, len(p.Entries), p.Next, tt.wantLen, tt.wantNext)
		}
	}
	// The last page of exactly Limit entries ends the listing.
	p, err := s.Query(t.Context(), audit.Filter{Limit: 50, Cursor: mustCursorAfter(t, s, audit.MaxLimit)})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 50 || p.Next != "" {
		t.Errorf("last page: %d entries, next %q; want 50 and no next", len(p.Entries), p.Next)
	}
}

func (h Harness) testBadCursor(t *testing.T) {
	s := h.New(t, time.Now)
	for _, cursor := range []string{"%%%", "aGVsbG8", "djE6MTp4", "djI6MTox"} {
		if _, err := s.Query(t.Context(), audit.Filter{Cursor: cursor}); !errors.Is(err, audit.ErrBadCursor) {
			t.Errorf("cursor %q: got %v, want ErrBadCursor", cursor, err)
		}
	}
}

// testPrune: Prune deletes exactly the entries older than the default
// retention at the sink's clock.
func (h Harness) testPrune(t *testing.T) {
	clk := fakeclock.New(Base)
	s, ok := h.New(t, clk.Now).(pruner)
	if !ok {
		t.Skip("keeps a bounded number of entries, not a retention")
	}
	ages := []time.Duration{8 * 24 * time.Hour, audit.DefaultRetention + time.Microsecond, audit.DefaultRetention, audit.DefaultRetention - time.Hour, time.Minute}
	var written []audit.Entry
	for i, age := range ages {
		written = append(written, audit.Entry{Time: Base.Add(-age), Source: "stone", Outcome: "processed", Status: 200, Key: fmt.Sprint(i)})
	}
	if err := s.(audit.Sink).Write(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance  time.Duration
		wantGone int64
		wantLeft int
	}{
		{0, 2, 3}, // older than 7 days; the one exactly 7 days old stays
		{0, 0, 3},
		{time.Microsecond, 1, 2},
		{time.Hour, 1, 1},
		{24 * time.Hour, 0, 1},
		{7 * 24 * time.Hour, 1, 0},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		n, err := s.Prune(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.(audit.Querier).Query(t.Context(), audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if n != st.wantGone || len(p.Entries) != st.wantLeft {
			t.Errorf("step %d: pruned %d, %d left; want %d, %d", i, n, len(p.Entries), st.wantGone, st.wantLeft)
		}
	}
}

func (h Harness) testCounts(t *testing.T) {
	s := h.New(t, time.Now)
	written := Dataset(90)
	if err := s.Write(t.Context(), written); err != nil {
		t.Fatal(err)
	}
	c, ok := s.(audit.Counter)
	if !ok {
		t.Skip("not an audit.Counter")
	}
	tests := []struct {
		name string
		give audit.Filter
	}{
		{"all", audit.Filter{}},
		{"since", audit.Filter{Since: Base.Add(10 * time.Second)}},
		{"since and until", audit.Filter{Since: Base.Add(3 * time.Second), Until: Base.Add(9*time.Second + 2*time.Microsecond)}},
		{"source", audit.Filter{Source: "stripe"}},
		{"outcome and route", audit.Filter{Outcome: "replayed", Route: "/webhooks/stone"}},
		{"limit and cursor ignored", audit.Filter{Limit: 1, Cursor: "garbage"}},
		{"no match", audit.Filter{Source: "shopify"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Counts(t.Context(), tt.give)
			if err != nil {
				t.Fatal(err)
			}
			want := expectedCounts(written, tt.give)
			if !slices.Equal(got, want) {
				t.Errorf("Counts(%+v)\n got %v\nwant %v", tt.give, got, want)
			}
		})
	}
}

// mustCursorAfter returns the cursor following the first n entries.
func mustCursorAfter(t *testing.T, q audit.Querier, n int) string {
	t.Helper()
	p, err := q.Query(t.Context(), audit.Filter{Limit: n})
	if err != nil || p.Next == "" {
		t.Fatalf("Query(Limit %d): next %q, %v", n, p.Next, err)
	}
	return p.Next
}

// expectedCounts counts the entries of written matching f as a Counter
// must: per source and outcome, ordered by source then outcome.
func expectedCounts(written []audit.Entry, f audit.Filter) []audit.Count {
	n := map[[2]string]int64{}
	for _, e := range Expected(written, f) {
		n[[2]string{e.Source, e.Outcome}]++
	}
	var out []audit.Count
	for k, v := range n {
		out = append(out, audit.Count{Source: k[0], Outcome: k[1], N: v})
	}
	slices.SortFunc(out, func(a, b audit.Count) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Outcome, b.Outcome))
	})
	return out
}
