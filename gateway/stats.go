package gateway

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
)

// Every outcome falls in one class of the console's per-source table, so
// that its columns add up to the total.
//
//   - processed: the first delivery of its event. The upstream ran and its
//     answer is stored (outcome processed), or the route's filter did not
//     match it: answered the route's success, stored, and neither
//     forwarded nor queued (the gateway's filtered).
//   - replayed: a duplicate answered with the stored answer, without
//     calling the upstream. Its outcomes are replayed and in_flight_waited
//     (it waited for the first delivery and got its answer).
//   - refused: answered with an error by the gateway itself, or not at
//     all, without calling the upstream. Its outcomes are
//     in_flight_rejected (409), mismatch (422), signature_invalid (401),
//     too_large (413), overloaded (503: the memory budget for bodies was
//     spent), store_error_closed (503), in_flight_abandoned (a
//     duplicate whose sender hung up while it waited: nothing sent) and
//     the gateway's not_queued (503 from a queued route: its queue full,
//     its disk almost full, or the event could not be claimed or kept).
//   - failed: the upstream was called and its answer was not one to store
//     (a 5xx, a 4xx, 502 unreachable, 504 too slow, or cut short): the
//     claim was released, so the provider's retry is forwarded again.
//     Its outcome is failed_released.
//   - unprotected: forwarded to the upstream without a claim, so nothing
//     stops the event running twice. Its outcomes are in_flight_proceeded
//     (in_flight: proceed), store_error_open (on_store_error: open) and
//     key_error. key_error also covers a body that could not be read and a
//     missing key on a require_key route, both answered 400 without
//     calling the upstream; the outcome doesn't tell them apart.
//   - other: an outcome this build doesn't know (a newer gateway writing
//     to a shared PostgreSQL trail). The console shows its column only
//     when it is not zero.
//
// A duplicate is a delivery whose key was already claimed. Its outcomes are
// replayed, in_flight_waited, in_flight_proceeded, in_flight_rejected and
// in_flight_abandoned.
// The duplicate rate is duplicates / all deliveries.
const (
	classProcessed   = "processed"
	classReplayed    = "replayed"
	classRefused     = "refused"
	classFailed      = "failed"
	classUnprotected = "unprotected"
	classOther       = "other"
)

var outcomeClass = map[idemhook.Outcome]string{
	idemhook.OutcomeProcessed:         classProcessed,
	outcomeFiltered:                   classProcessed,
	idemhook.OutcomeReplayed:          classReplayed,
	idemhook.OutcomeInFlightWaited:    classReplayed,
	idemhook.OutcomeInFlightRejected:  classRefused,
	idemhook.OutcomeInFlightAbandoned: classRefused,
	idemhook.OutcomeMismatch:          classRefused,
	idemhook.OutcomeSignatureInvalid:  classRefused,
	idemhook.OutcomeTooLarge:          classRefused,
	idemhook.OutcomeOverloaded:        classRefused,
	idemhook.OutcomeStoreErrorClosed:  classRefused,
	outcomeNotQueued:                  classRefused,
	idemhook.OutcomeFailedReleased:    classFailed,
	idemhook.OutcomeInFlightProceeded: classUnprotected,
	idemhook.OutcomeStoreErrorOpen:    classUnprotected,
	idemhook.OutcomeKeyError:          classUnprotected,
}

var duplicateOutcomes = []idemhook.Outcome{
	idemhook.OutcomeReplayed, idemhook.OutcomeInFlightWaited,
	idemhook.OutcomeInFlightProceeded, idemhook.OutcomeInFlightRejected, idemhook.OutcomeInFlightAbandoned,
}

// deliveryOutcomes returns the outcomes of the provider's deliveries: the
// middleware's and the gateway's own not_queued and filtered.
func deliveryOutcomes() []idemhook.Outcome {
	return append(idemhook.Outcomes(), outcomeNotQueued, outcomeFiltered)
}

// addOutcome counts n deliveries of outcome in w, in its class.
func addOutcome(w *adminapi.Window, outcome string, n int64) {
	w.Total += n
	w.Outcomes[outcome] += n
	switch outcomeClass[idemhook.Outcome(outcome)] {
	case classProcessed:
		w.Processed += n
	case classReplayed:
		w.Replayed += n
	case classRefused:
		w.Refused += n
	case classFailed:
		w.Failed += n
	case classUnprotected:
		w.Unprotected += n
	default: // an outcome this build doesn't know
		w.Other += n
	}
	if slices.Contains(duplicateOutcomes, idemhook.Outcome(outcome)) {
		w.Duplicates += n
	}
	if w.Total > 0 {
		r := float64(w.Duplicates) / float64(w.Total)
		w.DuplicateRate = &r
	}
}

// statsMaxAge is how long an answer of GET /admin/stats is reused. However
// many consoles are open, the trail is counted at most once per period.
const statsMaxAge = 5 * time.Second

// statsHandler serves GET /admin/stats. Per source, it counts the
// deliveries of the last hour and of the last 24 hours by class and
// outcome, and gives the duplicate rate. The answer also holds the
// configured routes and the known outcomes, which the console offers as
// filters. Every configured source is listed, with
// zeros when it had no delivery, and so is a source found only in the trail
// (a removed route, or another gateway sharing a PostgreSQL trail). The
// answer is up to statsMaxAge old ("now" says when it was counted).
type statsHandler struct {
	g      *Gateway
	maxAge time.Duration // statsMaxAge

	mu   sync.Mutex // held while counting: concurrent requests wait for one count
	at   time.Time
	last adminapi.Stats
}

func (h *statsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	counter, ok := h.g.audit.querier.(audit.Counter)
	if !ok {
		writeProblem(w, http.StatusNotImplemented, "audit trail not queryable",
			fmt.Sprintf("the audit sink is %q; set audit.sink to sqlite or postgres for delivery statistics", h.g.audit.sink))
		return
	}
	if len(r.URL.Query()) > 0 {
		writeProblem(w, http.StatusBadRequest, "bad query", "GET /admin/stats takes no parameters")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at.IsZero() || time.Since(h.at) >= h.maxAge {
		s, err := h.g.countStats(r, counter)
		if err != nil {
			writeProblem(w, http.StatusServiceUnavailable, "audit query failed", err.Error())
			return
		}
		h.at, h.last = time.Now(), s
	}
	writeJSON(w, http.StatusOK, h.last)
}

func (g *Gateway) countStats(r *http.Request, counter audit.Counter) (adminapi.Stats, error) {
	now := time.Now().UTC()
	out := adminapi.Stats{Now: now, Sources: []adminapi.SourceStats{}}
	bySource := map[string]int{}
	source := func(name string) *adminapi.SourceStats {
		i, ok := bySource[name]
		if !ok {
			i = len(out.Sources)
			bySource[name] = i
			out.Sources = append(out.Sources, adminapi.SourceStats{Source: name,
				Hour: adminapi.Window{Outcomes: map[string]int64{}}, Day: adminapi.Window{Outcomes: map[string]int64{}}})
		}
		return &out.Sources[i]
	}
	// The routes in service: those of the last reload, not of the start.
	routes := slices.SortedFunc(maps.Values(*g.audit.routes.Load()), func(a, b config.Route) int { return cmp.Compare(a.Line, b.Line) })
	for _, rc := range routes {
		ar := adminapi.Route{Path: rc.Path, Source: rc.Route.Source}
		for _, t := range rc.Tenants {
			ar.Tenants = append(ar.Tenants, t.Name)
		}
		slices.Sort(ar.Tenants)
		out.Routes = append(out.Routes, ar)
		source(rc.Route.Source)
	}
	for _, win := range []struct {
		since time.Duration
		pick  func(*adminapi.SourceStats) *adminapi.Window
	}{
		{time.Hour, func(s *adminapi.SourceStats) *adminapi.Window { return &s.Hour }},
		{24 * time.Hour, func(s *adminapi.SourceStats) *adminapi.Window { return &s.Day }},
	} {
		counts, err := counter.Counts(r.Context(), audit.Filter{Since: now.Add(-win.since)})
		if err != nil {
			return adminapi.Stats{}, err
		}
		for _, c := range counts {
			if strings.HasPrefix(c.Outcome, queueOutcomePrefix) {
				continue // the queue's deliveries to the backend, not the provider's to the gateway
			}
			addOutcome(win.pick(source(c.Source)), c.Outcome, c.N)
		}
	}
	slices.SortFunc(out.Sources, func(a, b adminapi.SourceStats) int { return strings.Compare(a.Source, b.Source) })
	for _, o := range deliveryOutcomes() {
		out.Outcomes = append(out.Outcomes, adminapi.Outcome{Name: string(o), Class: outcomeClass[o]})
	}
	return out, nil
}
