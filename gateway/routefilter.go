package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/gateway/filter"
)

// outcomeFiltered is the outcome of the first delivery of an event that its
// route's filter did not match: claimed, answered the route's success (a
// queued route's accept answer) and stored, so that every re-delivery is a
// replay, but neither forwarded nor queued. In the class processed: the
// event is done with.
const outcomeFiltered idemhook.Outcome = "filtered"

type filteredKey struct{}

// filterMark is where a filter notes why it filtered a delivery.
type filterMark struct{ why atomic.Pointer[error] }

// markFiltered marks each delivery to a route with a filter (its own or a
// destination's), before the middleware, so that filterRoute and fanOut can
// note that they filtered one and the delivery's outcome says so
// (filteredOutcome).
func markFiltered(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), filteredKey{}, new(filterMark))))
	})
}

// hasFilter reports whether rc or one of its destinations has a filter.
func hasFilter(rc config.Route) bool {
	return rc.Filter != nil || slices.ContainsFunc(rc.Destinations, func(d config.Destination) bool { return d.Filter != nil })
}

// noteFiltered notes on r's delivery that it was filtered, and why. An item
// of a batch is not noted: the batch is one delivery, whose other items may
// be delivered; it counts the item processed.
func noteFiltered(r *http.Request, why error) {
	if _, item := idemhook.BatchFromContext(r.Context()); item {
		return
	}
	if m, ok := r.Context().Value(filteredKey{}).(*filterMark); ok {
		m.why.Store(&why)
	}
}

// writeAnswer writes a stored answer: status, a copy of header, body.
func writeAnswer(w http.ResponseWriter, status int, header http.Header, body []byte) {
	h := w.Header()
	for name, values := range header {
		h[name] = slices.Clone(values)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// filteredOutcome gives a first delivery that a filter kept from every
// backend the outcome filtered, with why as its error (the reason of its
// audit entry; a failure to store the answer follows it). A delivery
// without a claim keeps its own outcome (store_error_open, key_error,
// in_flight_proceeded): what the operator must see is that it ran
// unprotected.
func filteredOutcome(d idemhook.DeliveryInfo) idemhook.DeliveryInfo {
	if d.Request == nil || d.Outcome != idemhook.OutcomeProcessed {
		return d
	}
	m, ok := d.Request.Context().Value(filteredKey{}).(*filterMark)
	if !ok || m.why.Load() == nil {
		return d
	}
	why := *m.why.Load()
	d.Outcome = outcomeFiltered
	if d.Err != nil {
		d.Err = fmt.Errorf("%w; %w", why, d.Err)
	} else {
		d.Err = why
	}
	return d
}

// errFiltered is the reason of a delivery its route's filter did not match,
// errNoDestination of one no destination's filter matched.
var (
	errFiltered      = errors.New("the route's filter did not match the event: answered the route's success, neither forwarded nor queued")
	errNoDestination = errors.New("no destination's filter matched the event: answered the route's accept answer, not queued")
)

// filterRoute runs rc's filter on each delivery, behind the middleware (the
// signature was checked and the key claimed): a delivery it matches goes on
// to next, the proxy or the queue; one it does not is answered the route's
// success (filteredAnswer), which the middleware stores, and goes no
// further. A filter that fails at run time lets the delivery through and
// logs a WARN (docs/filters.md says why).
func filterRoute(rc config.Route, logger *slog.Logger, next http.Handler) http.Handler {
	f := rc.Filter
	status, header, body := filteredAnswer(rc)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, claimed := idemhook.DeliveryFromContext(r.Context())
		ok, err := f.Match(filter.Input{Body: requestBody(r, d, claimed), Header: r.Header, Query: r.URL.Query(), Path: r.URL.Path})
		if err != nil {
			key := ""
			if claimed {
				key = d.StoreKey()
			}
			logger.Warn("idemhook filter: the route's filter failed on this event, which is delivered", "route", rc.Path, "key", key, "err", err)
		}
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		noteFiltered(r, errFiltered)
		writeAnswer(w, status, header, body)
	})
}

// requestBody is the body the middleware read: the delivery's, or, without
// a claim, a copy from the request's GetBody, which the middleware sets.
func requestBody(r *http.Request, d *idemhook.Delivery, claimed bool) []byte {
	if claimed {
		return d.Body()
	}
	if r.GetBody == nil {
		return nil
	}
	rd, err := r.GetBody()
	if err != nil {
		return nil
	}
	defer rd.Close()
	b, _ := io.ReadAll(rd)
	return b
}

// filteredBody is the body of a filtered event's answer on a proxy route
// whose provider expects no body of its own.
const filteredBody = `{"status":"filtered"}` + "\n"

// filteredAnswer is what the provider gets for an event rc's filter does not
// match: on a queued route (deliver: queue, respond_within), its accept
// answer, the answer of every event it keeps; on a proxy route, the success
// its provider expects (the preset's SuccessStatus and SuccessBody, as the
// proxy makes a backend's 2xx), else 200 with {"status":"filtered"}.
func filteredAnswer(rc config.Route) (int, http.Header, []byte) {
	if rc.Queued() {
		return rc.Accept.Status, rc.Accept.Header, rc.Accept.Body
	}
	status := successOf(rc)
	if status == 0 {
		status = http.StatusOK
	}
	h := http.Header{}
	if p := rc.Route.Preset; p != nil && p.SuccessBody != "" {
		setSuccessBodyHeader(h, p.SuccessBody)
		return status, h, []byte(p.SuccessBody)
	}
	h.Set("Content-Type", "application/json")
	return status, h, []byte(filteredBody)
}
