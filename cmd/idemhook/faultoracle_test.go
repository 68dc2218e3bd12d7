package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// DrainBound is how soon after its backend is back a failing route must
// have run every event it was sent (and a queue-backed route must hold
// nothing queued, retrying or running): generous for a loaded 2-core
// machine under the race detector, where a correct gateway takes about a
// second (a breaker probe a second; the provider's retries every 200ms).
// It is well below an attempt's lease (attempt_timeout plus 15s), so an
// attempt left running until its lease ends fails it.
const DrainBound = 10 * time.Second

// Documented503 are the titles of the gateway's own 503 answers that its
// documentation gives a reason for: a queue past max_queued, a disk
// almost full, the memory budget for bodies spent. Any other 503 of the
// gateway's (an event "not accepted" because a claim failed) is a refusal
// the provider was not promised.
var Documented503 = []string{"queue full", "disk almost full", "Overloaded"}

// BesideBound is how soon after its accept each event must have run at the
// healthy destination beside the failing one on the same route (mode
// destinations): a lane's attempts are claimed within a poll (250ms) of
// being due, so a second is generous on a loaded machine, and half the
// cells' fault (2s), so the events of its first second must run while the
// other destination is still failing.
const BesideBound = time.Second

// Observed is what one cell of the fault matrix saw: the events sent to
// the failing route and to the healthy route beside it on the same store,
// every answer the providers got, and what each backend ran.
type Observed struct {
	Cell        string
	Failing     []string // events sent to the failing route
	Healthy     []string // events sent to the healthy route (each twice)
	Answers     []Answer // of both routes
	Runs        map[string]int
	FirstRuns   map[string]time.Time
	HealthyRuns map[string]int
	Recovered   time.Time // the backend was back
	Drained     time.Time // every event run (and a queue empty) from then on; zero: not within the wait
	Redriven    int       // dead events queued again once the backend was back (4xx, a redirect)

	// Filtered are the events sent to the failing route that its filter
	// refuses (mode queue-filter), each sent twice: answered 2xx by the
	// gateway, the second copy a replay, neither ever reaching the backend
	// (Requests, any behaviour). They are not in Failing.
	Filtered []string
	Requests map[string]int // the failing route's backend's requests per event
	// Beside are the events the healthy destination beside the failing
	// one on the same route must run (mode destinations): each exactly
	// once, within BesideBound of its accept; BesideRuns and
	// BesideFirstRuns are that destination's backend's.
	Beside          []string
	BesideRuns      map[string]int
	BesideFirstRuns map[string]time.Time
	// Keys and BesideKeys are the distinct Idempotency-Keys of each
	// event's runs at the failing destination f and at ok (mode
	// destinations): one each, "<store key>#f" and "<store key>#ok".
	Keys, BesideKeys map[string][]string
}

// Row is a cell's line of the table, and what the oracles judge.
type Row struct {
	Cell                         string
	Sent, Accepted, Delivered    int
	Twice, Lost                  int
	Gateway503, Undocumented503  int
	Undocumented                 []string // the titles of the undocumented 503s
	HealthySent, HealthyTwice    int
	HealthyLost                  int
	Drain                        time.Duration // -1: not drained within the wait
	Redriven                     int
	FirstAnswers, RefusedAnswers int // the failing route's answers: in all, and not 2xx
	// FilteredSent events the route's filter refuses; of them, FilteredRan
	// reached the backend, FilteredWrong were not answered 2xx twice by the
	// gateway with exactly one of the two a replay.
	FilteredSent, FilteredRan, FilteredWrong int
	// BesideSent events the healthy destination must run; of them,
	// BesideTwice ran more than once, BesideLost were accepted and never
	// ran, BesideLate ran more than BesideBound after their accept.
	// BesideMaxLag is the longest time from accept to run. BesideKeyWrong
	// events ran at f or ok with other than one Idempotency-Key each,
	// "<store key>#f" and "<store key>#ok" of one store key.
	BesideSent, BesideTwice, BesideLost, BesideLate, BesideKeyWrong int
	BesideMaxLag                                                    time.Duration
	Note                                                            string
	DrainBoundOverride                                              time.Duration // 0: DrainBound
}

// Tally computes the row of what o observed.
func Tally(o Observed) Row {
	r := Row{Cell: o.Cell, Sent: len(o.Failing), HealthySent: len(o.Healthy), Redriven: o.Redriven, Drain: -1}
	accepted := map[string]bool{}
	undoc := map[string]int{}
	for _, a := range o.Answers {
		if a.Route == "failing" {
			r.FirstAnswers++
			if a.Status < 200 || a.Status >= 300 {
				r.RefusedAnswers++
			}
		}
		if a.Status >= 200 && a.Status < 300 && a.Route == "failing" {
			for _, e := range a.Events {
				accepted[e] = true
			}
		}
		if a.Status == 503 && !a.FromBackend {
			r.Gateway503++
			if !slices.Contains(Documented503, a.Title) {
				r.Undocumented503++
				undoc[fmt.Sprintf("%s %q", a.Route, a.Title)]++
			}
		}
	}
	for k, n := range undoc {
		r.Undocumented = append(r.Undocumented, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(r.Undocumented)
	for _, e := range o.Failing {
		n := o.Runs[e]
		if accepted[e] {
			r.Accepted++
			if n == 0 {
				r.Lost++
			}
		}
		if n > 0 {
			r.Delivered++
		}
		if n > 1 {
			r.Twice++
		}
	}
	for _, e := range o.Healthy {
		switch n := o.HealthyRuns[e]; {
		case n == 0:
			r.HealthyLost++
		case n > 1:
			r.HealthyTwice++
		}
	}
	r.FilteredSent = len(o.Filtered)
	for _, e := range o.Filtered {
		if o.Requests[e] > 0 || o.Runs[e] > 0 {
			r.FilteredRan++
		}
		var ok, replayed int
		for _, a := range o.Answers {
			if a.Route == "failing" && slices.Contains(a.Events, e) && a.Status >= 200 && a.Status < 300 && !a.FromBackend {
				ok++
				if a.Replayed {
					replayed++
				}
			}
		}
		if ok != 2 || replayed != 1 {
			r.FilteredWrong++
		}
	}
	r.BesideSent = len(o.Beside)
	for _, e := range o.Beside {
		n := o.BesideRuns[e]
		if n > 1 {
			r.BesideTwice++
		}
		if !destinationKeysRight(o.Keys[e], o.BesideKeys[e], n > 0 && o.Runs[e] > 0) {
			r.BesideKeyWrong++
		}
		var acceptAt time.Time
		for _, a := range o.Answers {
			if a.Route == "failing" && slices.Contains(a.Events, e) && a.Status >= 200 && a.Status < 300 && (acceptAt.IsZero() || a.At.Before(acceptAt)) {
				acceptAt = a.At
			}
		}
		if acceptAt.IsZero() { // never accepted: the oracles on 503s and lost events judge it
			continue
		}
		if n == 0 {
			r.BesideLost++
			continue
		}
		lag := max(o.BesideFirstRuns[e].Sub(acceptAt), 0) // the run may come before the answer is read
		r.BesideMaxLag = max(r.BesideMaxLag, lag)
		if lag > BesideBound {
			r.BesideLate++
		}
	}
	if !o.Drained.IsZero() {
		r.Drain = max(o.Drained.Sub(o.Recovered), 0)
	}
	return r
}

// destinationKeysRight reports whether an event's runs at destinations f
// and ok carried their own keys: each at most one key, "<K>#f" and
// "<K>#ok" of one non-empty store key K; both present when both ran.
func destinationKeysRight(f, ok []string, bothRan bool) bool {
	if len(f) > 1 || len(ok) > 1 || bothRan && (len(f) == 0 || len(ok) == 0) {
		return false
	}
	var stores []string
	for _, k := range []struct {
		keys []string
		dest string
	}{{f, "f"}, {ok, "ok"}} {
		for _, key := range k.keys {
			store, found := strings.CutSuffix(key, "#"+k.dest)
			if !found || store == "" {
				return false
			}
			stores = append(stores, store)
		}
	}
	return len(stores) < 2 || stores[0] == stores[1]
}

// Oracle is one check of a cell.
type Oracle struct {
	Name  string
	Check func(Row) error
}

// Oracles are the checks every cell must pass.
var Oracles = []Oracle{
	{"lost", func(r Row) error {
		if r.Lost > 0 {
			return fmt.Errorf("%d events answered 2xx had not run at the backend by the end of the cell", r.Lost)
		}
		return nil
	}},
	{"twice", func(r Row) error {
		if r.Twice > 0 {
			return fmt.Errorf("%d events ran more than once, with no process crashed", r.Twice)
		}
		return nil
	}},
	{"healthy", func(r Row) error {
		if r.HealthyTwice > 0 || r.HealthyLost > 0 {
			return fmt.Errorf("the healthy route beside: %d of %d events ran twice, %d never ran; each must run exactly once", r.HealthyTwice, r.HealthySent, r.HealthyLost)
		}
		return nil
	}},
	{"503", func(r Row) error {
		if r.Undocumented503 > 0 {
			return fmt.Errorf("%d answers were the gateway's own 503 for no documented reason (only %s are): %s",
				r.Undocumented503, strings.Join(Documented503, ", "), strings.Join(r.Undocumented, "; "))
		}
		return nil
	}},
	{"filtered", func(r Row) error {
		if r.FilteredRan > 0 || r.FilteredWrong > 0 {
			return fmt.Errorf("of %d events the route's filter refuses, %d reached the backend (must be none) and %d were not answered 2xx by the gateway twice, the second a replay", r.FilteredSent, r.FilteredRan, r.FilteredWrong)
		}
		return nil
	}},
	{"beside", func(r Row) error {
		if r.BesideTwice > 0 || r.BesideLost > 0 || r.BesideLate > 0 || r.BesideKeyWrong > 0 {
			return fmt.Errorf("the healthy destination beside the failing one: of %d events, %d ran twice, %d accepted never ran, %d ran more than %v after their accept (the longest %v), %d ran without their own keys (<store key>#f, <store key>#ok); each must run once, promptly, whatever the other destination does",
				r.BesideSent, r.BesideTwice, r.BesideLost, r.BesideLate, BesideBound, r.BesideMaxLag.Round(time.Millisecond), r.BesideKeyWrong)
		}
		return nil
	}},
	{"drain", func(r Row) error {
		bound := DrainBound
		if r.DrainBoundOverride > 0 {
			bound = r.DrainBoundOverride
		}
		switch {
		case r.Drain < 0:
			return fmt.Errorf("not drained within %v of the backend's return: %d of %d events ran (%d accepted)", bound, r.Delivered, r.Sent, r.Accepted)
		case r.Drain > bound:
			return fmt.Errorf("drained %v after the backend's return; the bound is %v", r.Drain.Round(time.Millisecond), bound)
		}
		return nil
	}},
}

// Check applies every oracle to r and returns the failures, each named.
func (r Row) Check() []error {
	var errs []error
	for _, o := range Oracles {
		if err := o.Check(r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.Name, err))
		}
	}
	return errs
}

// Table formats rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| cell | sent | accepted | delivered | twice | lost | 503s | drain | healthy beside | note |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		drain := "-"
		switch {
		case r.Cell == "" || r.Sent == 0:
		case r.Drain < 0:
			drain = "not drained"
		default:
			drain = r.Drain.Round(10 * time.Millisecond).String()
		}
		s503 := fmt.Sprint(r.Gateway503)
		if r.Undocumented503 > 0 {
			s503 += fmt.Sprintf(" (%d undocumented)", r.Undocumented503)
		}
		healthy := fmt.Sprintf("%d sent ×2, %d twice, %d lost", r.HealthySent, r.HealthyTwice, r.HealthyLost)
		if r.HealthySent == 0 {
			healthy = "-"
		}
		notes := []string{}
		if r.FilteredSent > 0 {
			notes = append(notes, fmt.Sprintf("filter refused %d ×2: %d reached the backend, %d not 2xx+replay", r.FilteredSent, r.FilteredRan, r.FilteredWrong))
		}
		if r.BesideSent > 0 {
			notes = append(notes, fmt.Sprintf("destination ok: %d sent, %d twice, %d lost, %d late, lag ≤ %v, %d wrong keys", r.BesideSent, r.BesideTwice, r.BesideLost, r.BesideLate, r.BesideMaxLag.Round(10*time.Millisecond), r.BesideKeyWrong))
		}
		if r.Note != "" {
			notes = append(notes, r.Note)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n",
			r.Cell, r.Sent, r.Accepted, r.Delivered, r.Twice, r.Lost, s503, drain, healthy, strings.Join(notes, "; "))
	}
	return b.String()
}
