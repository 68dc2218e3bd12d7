package audit

import (
	"cmp"
	"context"
	"slices"

	"github.com/idemhook/idemhook/internal/auditpage"
)

// Count is the number of entries of the trail with one source and one
// outcome.
type Count struct {
	Source  string
	Outcome string
	N       int64
}

// Counter counts entries of the trail. Every sink but Log is one. The
// gateway's GET /admin/stats (the console's per-source table) is built on
// it.
type Counter interface {
	// Counts returns the number of entries matching f per source and
	// outcome, ordered by source then outcome. Pairs with no entry are
	// left out. f.Limit and f.Cursor are ignored.
	Counts(ctx context.Context, f Filter) ([]Count, error)
}

// Tally counts entries per source and outcome for a [Counter] that reads
// its entries one by one, as [Ring] and the Redis stream sink do. Create it
// with [NewTally].
type Tally struct {
	f            Filter
	since, until int64 // f's bounds in Unix microseconds, 0 when unset
	n            map[[2]string]int64
}

// NewTally returns an empty tally of the entries matching f's field and
// time filters. f.Limit and f.Cursor are ignored.
func NewTally(f Filter) *Tally {
	t := &Tally{f: f, n: map[[2]string]int64{}}
	t.since, t.until = auditpage.Window(f.Since, f.Until)
	return t
}

// Add counts e if it matches the tally's filter. Times are compared to the
// microsecond, as the sinks store them.
func (t *Tally) Add(e Entry) {
	if matches(e, t.f, t.since, t.until) {
		t.n[[2]string{e.Source, e.Outcome}]++
	}
}

// Counts returns the counts of the entries added so far, ordered by source
// then outcome.
func (t *Tally) Counts() []Count {
	out := make([]Count, 0, len(t.n))
	for k, n := range t.n {
		out = append(out, Count{Source: k[0], Outcome: k[1], N: n})
	}
	slices.SortFunc(out, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Outcome, b.Outcome))
	})
	return out
}

// matches applies f's field and time filters (not its cursor) to e. since
// and until are f's bounds in microseconds, 0 when unset.
func matches(e Entry, f Filter, since, until int64) bool {
	us := e.Time.UnixMicro()
	return (f.Source == "" || e.Source == f.Source) && (f.Outcome == "" || e.Outcome == f.Outcome) &&
		(f.Route == "" || e.Route == f.Route) && (since == 0 || us >= since) && (until == 0 || us < until)
}
