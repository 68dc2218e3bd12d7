package audit_test

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/idemhook/idemhook/audit"
)

// expectedCounts counts the entries of written matching f as a Counter
// must: per source and outcome, ordered by source then outcome.
func expectedCounts(written []audit.Entry, f audit.Filter) []audit.Count {
	n := map[[2]string]int64{}
	for _, e := range expected(written, f) {
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

func TestCounts(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.new(t, time.Now)
			written := dataset(90)
			if err := s.Write(t.Context(), written); err != nil {
				t.Fatal(err)
			}
			c := s.(audit.Counter)
			tests := []struct {
				name string
				give audit.Filter
			}{
				{"all", audit.Filter{}},
				{"since", audit.Filter{Since: base.Add(10 * time.Second)}},
				{"since and until", audit.Filter{Since: base.Add(3 * time.Second), Until: base.Add(9*time.Second + 2*time.Microsecond)}},
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
		})
	}
}
