package gateway

import (
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/gateway/filter"
	"github.com/idemhook/idemhook/queue"
)

// A queued route with destinations (docs/destinations.md) keeps each event
// once per destination that wants it: one event of the queue per lane
// (config.Route.Lanes), all written with the key's completion in one step
// of the engine (queue.Engine.AcceptAll). From there each lane is a queue
// of its own, with its own attempts, backoff, breaker, dead events, pause
// and rate, so a destination that is down or slow holds back only its own.
//
// Which destinations get an event is decided once, here, after the
// signature check and the claim, and kept in the store with the event: a
// reload that changes a filter, or removes or adds a destination, changes
// nothing for events already accepted.

// destinationKey is the Idempotency-Key of a destination's event: the
// event's store key, '#', the destination's name. Names can't hold '#', so
// the last '#' splits it whatever the provider's key holds. It is fixed at
// accept, so it stays the same across attempts, restarts, redrives and
// reloads, and no two destinations share one: a backend behind two
// destinations, or one dedup table behind both, runs each once.
func destinationKey(storeKey, destination string) string {
	return storeKey + "#" + destination
}

// fanOut is the handler of a queued route with destinations, behind the
// middleware: it decides which of lanes (the route's destinations, in
// their order) get the event, then keeps one event per lane with the key's
// completion in one step of the store, and only then lets the middleware
// answer the accept answer. An event no destination wants is answered the
// accept answer and stored (re-deliveries are replays) without being
// queued.
func (q *queues) fanOut(rc config.Route, lanes []*queuedRoute, trusted []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, claimed := idemhook.DeliveryFromContext(r.Context())
		if !claimed {
			refuseEvent(w, r, "5", "not accepted", "the event could not be claimed, so it is not queued: send it again")
			return
		}
		to := q.destinationsOf(r, d, rc, lanes)
		if len(to) == 0 {
			noteFiltered(r, errNoDestination)
			writeAnswer(w, rc.Accept.Status, rc.Accept.Header, rc.Accept.Body)
			return
		}
		if !q.admitAll(w, r, to) {
			return
		}
		// One request for all: the engine copies it into each lane's row.
		base := newEvent(rc, d, r, trusted)
		evs := make([]*queue.Event, len(to))
		for i, qr := range to {
			ev := *base
			ev.Route = qr.name
			ev.Key = destinationKey(base.Key, qr.destination)
			if by := qr.lane.Load().Queue.OrderBy; by != rc.Queue.OrderBy {
				ev.OrderKey = orderKey(by, r.Header, base.Body)
			}
			evs[i] = &ev
		}
		if err := q.keepAll(r, rc, to, d, evs); err != nil {
			q.logger.Warn("idemhook queue: the event could not be kept; the provider is answered 503 and sends it again", "route", rc.Path, "key", d.StoreKey(), "err", err)
			refuseEvent(w, r, "5", "not accepted", "the event could not be kept: send it again")
			return
		}
		for _, qr := range to {
			q.disp.Wake(qr.name)
		}
	})
}

// destinationsOf returns the lanes whose destination's filter matches the
// event of d. The body is parsed once, by the first filter that reads it. A
// filter that fails at run time lets its destination have the event and
// logs a WARN, as a route's filter does (docs/filters.md says why).
func (q *queues) destinationsOf(r *http.Request, d *idemhook.Delivery, rc config.Route, lanes []*queuedRoute) []*queuedRoute {
	var vars *filter.Vars
	to := make([]*queuedRoute, 0, len(lanes))
	for _, qr := range lanes {
		f := qr.lane.Load().Filter
		if f == nil {
			to = append(to, qr)
			continue
		}
		if vars == nil {
			vars = filter.NewVars(filter.Input{Body: d.Body(), Header: r.Header, Query: r.URL.Query(), Path: r.URL.Path})
		}
		ok, err := f.MatchVars(vars)
		if err != nil {
			q.logger.Warn("idemhook filter: a destination's filter failed on this event, which the destination gets", qr.logAttrs("key", d.StoreKey(), "err", err)...)
			ok = true
		}
		if ok {
			to = append(to, qr)
		}
	}
	return to
}

// admitAll runs admitNew's checks for an event going to every lane of to:
// the queue's disk, then each lane's max_queued, a place of which it
// reserves in each. An event one destination's full queue can't take is
// refused as a whole (503, Retry-After: the provider keeps it and sends it
// again): kept without that destination's delivery, it would be lost to
// it.
func (q *queues) admitAll(w http.ResponseWriter, r *http.Request, to []*queuedRoute) bool {
	if q.diskLow.Load() {
		refuseEvent(w, r, "60", "disk almost full",
			"the gateway's disk has too little free space to keep the event: send it again later")
		return false
	}
	for i, qr := range to {
		max := int64(qr.lane.Load().Queue.MaxQueued)
		if n, ok := qr.bound.reserve(max); !ok {
			for _, held := range to[:i] {
				held.bound.cancel()
			}
			refuseEvent(w, r, "60", "queue full",
				fmt.Sprintf("destination %s's queue holds %d events not yet delivered (max_queued %d): send the event again later", qr.destination, n, max))
			return false
		}
	}
	return true
}

// keepAll appends evs, one per lane of to, with the completion of d's claim
// by rc's accept answer, in one step of the engine, and counts them on
// their lanes, whose bounds must hold a place reserved for each. On error
// nothing is kept, the places are given back and the claim is still d's.
func (q *queues) keepAll(r *http.Request, rc config.Route, to []*queuedRoute, d *idemhook.Delivery, evs []*queue.Event) error {
	err := idemhook.CompleteDelivery(d, rc.Accept.Status, rc.Accept.Header, rc.Accept.Body, func(key string, claim, done *idemhook.Record, ttl time.Duration) error {
		return q.engine.AcceptAll(r.Context(), queue.Completion{Key: key, Claim: claim, Done: done, TTL: ttl}, evs)
	})
	for _, qr := range to {
		if err != nil {
			qr.bound.cancel()
		} else {
			qr.bound.commit()
		}
	}
	if err != nil {
		return err
	}
	// As in keep: the engine's transaction committed.
	_ = idemhook.DeliveryCommitted(d)
	for i, qr := range to {
		qr.history.add(evs[i].ReceivedAt, func(m *minute) { m.Accepted++ })
	}
	return nil
}
