package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook/gateway/adminapi"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/problem"
	"github.com/idemhook/idemhook/queue"
)

// The admin API of the delivery queue (deliver: queue routes), served by
// handleQueueAdmin behind the admin token:
//
//	GET  /admin/queue              per queued route: counts, oldest age, next attempt, paused, backend down, per-minute history (the data's span)
//	GET  /admin/queue/events       summaries (?route=&state=&reason=&after=&limit=)
//	GET  /admin/queue/events/{id}  one event and its attempts
//	POST /admin/queue/redrive      queue again, due now, the events a selection holds
//	POST /admin/queue/pause        stop delivering a route's events (accepting goes on)
//	POST /admin/queue/resume       deliver them again
//	POST /admin/queue/purge        delete the events a selection holds, once confirmed with their count

// Bounds of the queue's admin API.
const (
	queueMaxLimit = 1000    // ?limit= of /admin/queue/events
	queueMaxBody  = 1 << 20 // the JSON body of a POST
	// queuePurgeMax bounds the events one purge selects: a larger
	// selection is purged in several calls, each confirmed.
	queuePurgeMax = 100_000
)

// handleQueueAdmin adds the queue's endpoints to the admin mux.
func (g *Gateway) handleQueueAdmin(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("GET /admin/queue", auth(http.HandlerFunc(g.serveQueue)))
	mux.Handle("GET /admin/queue/events", auth(http.HandlerFunc(g.serveQueueEvents)))
	mux.Handle("GET /admin/queue/events/{id}", auth(http.HandlerFunc(g.serveQueueEvent)))
	mux.Handle("POST /admin/queue/redrive", auth(http.HandlerFunc(g.serveQueueRedrive)))
	mux.Handle("POST /admin/queue/pause", auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serveQueuePause(w, r, true) })))
	mux.Handle("POST /admin/queue/resume", auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serveQueuePause(w, r, false) })))
	mux.Handle("POST /admin/queue/purge", auth(http.HandlerFunc(g.serveQueuePurge)))
}

// queueOf returns the gateway's queues, or answers 404 and returns nil
// when no route of the configuration in use is a queued one.
func (g *Gateway) queueOf(w http.ResponseWriter) *queues {
	q := g.queues.Load()
	if q == nil || len(q.list()) == 0 {
		writeProblem(w, http.StatusNotFound, "no delivery queue", errNoQueue.Error()+": the queue's admin API has nothing to show (see docs/gateway.md, deliver: queue)")
		return nil
	}
	return q
}

// queuedRoute returns the queued route named path, or an error that names
// the queued routes.
func (q *queues) queuedRoute(path string) (*queuedRoute, error) {
	if path == "" {
		return nil, fmt.Errorf("route is required: one of %s", q.paths())
	}
	if qr := q.route(path); qr != nil {
		return qr, nil
	}
	return nil, fmt.Errorf("route %q is not a queued route (deliver: queue) nor a destination's queue: use one of %s", path, q.paths())
}

func (q *queues) paths() string {
	var out []string
	for _, qr := range q.list() {
		out = append(out, qr.name)
	}
	return strings.Join(out, ", ")
}

func (g *Gateway) serveQueue(w http.ResponseWriter, r *http.Request) {
	q := g.queueOf(w)
	if q == nil {
		return
	}
	now := time.Now()
	minutes := q.historySpan(now)
	if v := trimmed(r, "minutes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > historyMinutes {
			writeProblem(w, http.StatusBadRequest, "bad minutes", fmt.Sprintf("minutes: %q is not a number of minutes from 1 to %d", v, historyMinutes))
			return
		}
		minutes = n
	}
	out := adminapi.Queue{Now: now.UTC(), Minutes: minutes, Routes: []adminapi.QueueRoute{}}
	for _, qr := range q.list() {
		// Read the counts now rather than the last second's, so that an
		// operator sees the effect of a redrive or a pause at once.
		if err := q.countRoute(r.Context(), qr); err != nil {
			writeProblem(w, http.StatusServiceUnavailable, "queue unreadable", fmt.Sprintf("the counts of route %s could not be read from the store: %v", qr.name, err))
			return
		}
		st := *qr.stats.Load()
		rt := adminapi.QueueRoute{
			Path: qr.name, Route: qr.path, Destination: qr.destination, Queued: st.Queued, Retrying: st.Retrying, Running: st.Running, Dead: st.Dead,
			Paused: st.Paused, BackendDown: q.disp.BreakerOpen(qr.name), SettlesPending: q.disp.SettlesPending(qr.name),
			History: []adminapi.QueueMinute{},
		}
		if !st.Oldest.IsZero() {
			age := max(now.Sub(st.Oldest).Seconds(), 0)
			rt.OldestAgeSeconds = &age
		}
		if !st.NextAt.IsZero() {
			next := st.NextAt.UTC()
			rt.NextAttempt = &next
		}
		for _, m := range qr.history.last(now, minutes) {
			rt.History = append(rt.History, adminapi.QueueMinute{Start: time.Unix(m.Start, 0).UTC(),
				Accepted: m.Accepted, Delivered: m.Delivered, Retried: m.Retried, Dead: m.Dead})
		}
		out.Routes = append(out.Routes, rt)
	}
	writeJSON(w, http.StatusOK, out)
}

// parseStates reads a list of states: repeated, or separated by commas.
func parseStates(values []string) ([]queue.State, error) {
	var out []queue.State
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			st, ok := queue.ParseState(s)
			if !ok {
				return nil, fmt.Errorf("state: %q is not a state: use queued, running or dead", s)
			}
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		}
	}
	return out, nil
}

func (g *Gateway) serveQueueEvents(w http.ResponseWriter, r *http.Request) {
	q := g.queueOf(w)
	if q == nil {
		return
	}
	bad := func(msg string) { writeProblem(w, http.StatusBadRequest, "bad filter", msg) }
	query := r.URL.Query()
	f := queue.Filter{Route: config.LaneName(trimmed(r, "route"), trimmed(r, "destination")), Reason: query.Get("reason")}
	if f.Route != "" {
		if _, err := q.queuedRoute(f.Route); err != nil {
			bad(err.Error())
			return
		}
	}
	states, err := parseStates(query["state"])
	if err != nil {
		bad(err.Error())
		return
	}
	f.States = states
	if v := trimmed(r, "after"); v != "" {
		if f.AfterID, err = strconv.ParseInt(v, 10, 64); err != nil || f.AfterID < 0 {
			bad(fmt.Sprintf("after: %q is not an event id (the \"next\" of the previous page)", v))
			return
		}
	}
	f.Limit = 100
	if v := trimmed(r, "limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit < 1 || f.Limit > queueMaxLimit {
			bad(fmt.Sprintf("limit: %q is not a number from 1 to %d", v, queueMaxLimit))
			return
		}
	}
	for _, name := range []string{"received_from", "received_to"} {
		v := trimmed(r, name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			bad(fmt.Sprintf("%s: %q is not an RFC 3339 time (e.g. 2026-12-01T09:00:00Z)", name, v))
			return
		}
		if name == "received_from" {
			f.ReceivedFrom = t
		} else {
			f.ReceivedTo = t
		}
	}
	list, err := q.engine.List(r.Context(), f)
	if err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "queue unreadable", "the events could not be read from the store: "+err.Error())
		return
	}
	out := adminapi.QueueEvents{Events: make([]adminapi.QueueEvent, 0, len(list))}
	for i := range list {
		out.Events = append(out.Events, queueEventJSON(&list[i]))
	}
	if len(list) == f.Limit {
		out.Next = list[len(list)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func queueEventJSON(s *queue.Summary) adminapi.QueueEvent {
	_, dest, _ := strings.Cut(s.Route, "#")
	out := adminapi.QueueEvent{ID: s.ID, Route: s.Route, Destination: dest, Key: s.Key, OrderKey: s.OrderKey, State: s.State.String(),
		Attempt: s.Attempt, ReceivedAt: s.ReceivedAt.UTC(), Reason: s.Reason, LastStatus: s.LastStatus, LastError: s.LastError}
	if !s.NextAt.IsZero() && s.State != queue.Dead {
		next := s.NextAt.UTC()
		out.NextAt = &next
	}
	return out
}

func (g *Gateway) serveQueueEvent(w http.ResponseWriter, r *http.Request) {
	q := g.queueOf(w)
	if q == nil {
		return
	}
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		writeProblem(w, http.StatusBadRequest, "bad event id", fmt.Sprintf("%q is not an event id (a positive number, as /admin/queue/events lists them)", v))
		return
	}
	sum, attempts, err := q.engine.Get(r.Context(), id)
	switch {
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, "queue unreadable", "the event could not be read from the store: "+err.Error())
		return
	case sum == nil:
		writeProblem(w, http.StatusNotFound, "no such event", fmt.Sprintf("no event %d in the queue: it was delivered or purged, or never accepted", id))
		return
	}
	out := adminapi.QueueEventDetail{QueueEvent: queueEventJSON(sum), Attempts: make([]adminapi.QueueAttempt, 0, len(attempts))}
	for _, a := range attempts {
		out.Attempts = append(out.Attempts, adminapi.QueueAttempt{Attempt: a.Attempt, Time: a.Started.UTC(), Status: a.Status,
			LatencyMS: float64(a.Latency.Microseconds()) / 1000, Error: a.Error,
			BodyHead: strings.ToValidUTF8(string(a.BodyHead), "\uFFFD"), Worker: a.Worker})
	}
	writeJSON(w, http.StatusOK, out)
}

// readSelect reads the JSON body of a POST into v, or answers 400.
func readSelect(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, queueMaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := "the body is not the JSON object this endpoint takes: " + err.Error()
		if errors.Is(err, io.EOF) {
			msg = `the body is empty: send a JSON object, e.g. {"route":"/webhooks/stripe"}`
		}
		writeProblem(w, http.StatusBadRequest, "bad body", msg)
		return false
	}
	return true
}

// queueFilter turns a selection into the engine's filter: events of a
// queued route (or a destination's queue), in states other than running
// (redrive and purge leave running events alone). With removed, the
// queue may be one the configuration no longer names (a destination
// removed by a reload, whose events stay in the store): a purge clears
// them.
func (q *queues) queueFilter(s adminapi.QueueSelect, removed bool) (queue.Filter, error) {
	lane := config.LaneName(s.Route, s.Destination)
	if _, err := q.queuedRoute(lane); err != nil && !(removed && strings.Contains(lane, "#")) {
		return queue.Filter{}, err
	}
	f := queue.Filter{Route: lane, IDs: s.IDs, Reason: s.Reason, States: []queue.State{queue.Queued, queue.Dead}}
	if s.State != "" {
		st, ok := queue.ParseState(s.State)
		if !ok || st == queue.Running {
			return queue.Filter{}, fmt.Errorf("state: %q is not a state this selects: use queued or dead (running events are left alone)", s.State)
		}
		f.States = []queue.State{st}
	}
	if s.ReceivedFrom != nil {
		f.ReceivedFrom = *s.ReceivedFrom
	}
	if s.ReceivedTo != nil {
		f.ReceivedTo = *s.ReceivedTo
	}
	return f, nil
}

// logFilter is a selection as log attributes.
func logFilter(f queue.Filter) []any {
	attrs := []any{"route", f.Route}
	if len(f.IDs) > 0 {
		attrs = append(attrs, "ids", f.IDs)
	}
	var states []string
	for _, s := range f.States {
		states = append(states, s.String())
	}
	attrs = append(attrs, "states", strings.Join(states, ","))
	if f.Reason != "" {
		attrs = append(attrs, "reason", f.Reason)
	}
	if !f.ReceivedFrom.IsZero() {
		attrs = append(attrs, "received_from", f.ReceivedFrom.UTC().Format(time.RFC3339Nano))
	}
	if !f.ReceivedTo.IsZero() {
		attrs = append(attrs, "received_to", f.ReceivedTo.UTC().Format(time.RFC3339Nano))
	}
	return attrs
}

func (g *Gateway) serveQueueRedrive(w http.ResponseWriter, r *http.Request) {
	q := g.queueOf(w)
	if q == nil {
		return
	}
	var s adminapi.QueueSelect
	if !readSelect(w, r, &s) {
		return
	}
	if s.Confirm != nil {
		writeProblem(w, http.StatusBadRequest, "bad body", "confirm is for /admin/queue/purge; a redrive needs none")
		return
	}
	f, err := q.queueFilter(s, false)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "bad filter", err.Error())
		return
	}
	n, err := q.engine.Redrive(r.Context(), f)
	if err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "redrive failed", "the store could not queue the events again: "+err.Error())
		return
	}
	q.logger.Info("idemhook queue: events redriven by the admin API", append(logFilter(f), "redriven", n, "remote", r.RemoteAddr)...)
	q.readStats()
	q.disp.Wake(f.Route)
	writeJSON(w, http.StatusOK, adminapi.QueueRedriven{Redriven: n})
}

func (g *Gateway) serveQueuePause(w http.ResponseWriter, r *http.Request, paused bool) {
	q := g.queueOf(w)
	if q == nil {
		return
	}
	var s adminapi.QueueRoutePause
	if !readSelect(w, r, &s) {
		return
	}
	s.Route, s.Destination = config.LaneName(s.Route, s.Destination), ""
	if _, err := q.queuedRoute(s.Route); err != nil {
		writeProblem(w, http.StatusBadRequest, "bad route", err.Error())
		return
	}
	if err := q.engine.SetPaused(r.Context(), s.Route, paused); err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "not changed", "the store could not record the route's pause: "+err.Error())
		return
	}
	what := "resumed"
	if paused {
		what = "paused"
	}
	q.logger.Info("idemhook queue: route "+what+" by the admin API", "route", s.Route, "remote", r.RemoteAddr)
	q.readStats()
	if !paused {
		q.disp.Wake(s.Route)
	}
	writeJSON(w, http.StatusOK, adminapi.QueuePaused{Route: s.Route, Paused: paused})
}

// selectedIDs returns the ids of the events f selects, at most limit+1 of
// them (so that a selection over the limit shows).
func (q *queues) selectedIDs(r *http.Request, f queue.Filter, limit int) ([]int64, error) {
	var ids []int64
	page := f
	page.Limit = queueMaxLimit
	for {
		list, err := q.engine.List(r.Context(), page)
		if err != nil {
			return nil, err
		}
		for _, s := range list {
			ids = append(ids, s.ID)
		}
		if len(list) < page.Limit || len(ids) > limit {
			return ids, nil
		}
		page.AfterID = list[len(list)-1].ID
	}
}

// serveQueuePurge deletes the events a selection holds, the only way an
// accepted event leaves the queue undelivered. It takes two calls: the
// first, without confirm, answers 409 with the count; the second sends it
// back as confirm. It then purges exactly the events it counted, so that
// an event that died between the calls is not deleted unseen.
func (g *Gateway) serveQueuePurge(w http.ResponseWriter, r *http.Request) {
	q := g.queueOf(w)
	if q == nil {
		return
	}
	var s adminapi.QueueSelect
	if !readSelect(w, r, &s) {
		return
	}
	f, err := q.queueFilter(s, true)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "bad filter", err.Error())
		return
	}
	ids, err := q.selectedIDs(r, f, queuePurgeMax)
	if err != nil {
		writeProblem(w, http.StatusServiceUnavailable, "queue unreadable", "the events could not be counted: "+err.Error())
		return
	}
	if len(ids) > queuePurgeMax {
		writeProblem(w, http.StatusBadRequest, "selection too large", fmt.Sprintf("the selection holds more than %d events: narrow it (received_from, received_to, reason) and purge in parts", queuePurgeMax))
		return
	}
	count := int64(len(ids))
	if s.Confirm == nil || *s.Confirm != count {
		detail := fmt.Sprintf(`the selection holds %d events of %s; purging deletes them undelivered: send the same body with "confirm": %d to purge them`, count, f.Route, count)
		if s.Confirm != nil {
			detail = fmt.Sprintf("confirm is %d but the selection now holds %d events: ", *s.Confirm, count) + detail
		}
		p := adminapi.QueuePurgeConfirm{Problem: adminapi.Problem{Type: "about:blank", Title: "confirm the purge", Status: http.StatusConflict, Detail: detail}, Count: count}
		problem.Write(w, http.StatusConflict, problem.Extended(p))
		return
	}
	var keys []string
	if count > 0 {
		exact := f
		exact.IDs = ids
		if keys, err = q.engine.Purge(r.Context(), exact); err != nil {
			writeProblem(w, http.StatusServiceUnavailable, "purge failed", "the store could not delete the events: "+err.Error())
			return
		}
	}
	q.logger.Warn("idemhook queue: events purged undelivered by the admin API", append(logFilter(f), "purged", len(keys), "keys", firstKeys(keys, 20), "remote", r.RemoteAddr)...)
	q.readStats()
	writeJSON(w, http.StatusOK, adminapi.QueuePurged{Purged: int64(len(keys))})
}

// firstKeys returns at most n of keys, for a log record.
func firstKeys(keys []string, n int) []string {
	if len(keys) <= n {
		return keys
	}
	return append(slices.Clone(keys[:n]), fmt.Sprintf("... %d more", len(keys)-n))
}
