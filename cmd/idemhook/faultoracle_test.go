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
	Note                         string
	DrainBoundOverride           time.Duration // 0: DrainBound
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
	if !o.Drained.IsZero() {
		r.Drain = max(o.Drained.Sub(o.Recovered), 0)
	}
	return r
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
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n",
			r.Cell, r.Sent, r.Accepted, r.Delivered, r.Twice, r.Lost, s503, drain, healthy, r.Note)
	}
	return b.String()
}
