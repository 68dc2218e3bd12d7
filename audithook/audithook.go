// Package audithook turns the middleware's deliveries into audit entries:
// its OnDelivery hook feeds an audit.Recorder, which writes them to a sink
// (audit.Ring, audit.Log, sqliteaudit, pgaudit, redisaudit) in the
// background. It is the idemhook gateway's audit trail, for a Go service
// that uses the middleware directly, beside promhook and otelhook:
//
//	rec := audit.NewRecorder(sink, audit.RecorderConfig{})
//	defer rec.Close(ctx)
//	hook, err := audithook.New(audithook.Config{Recorder: rec})
//	mw, err := idemhook.New(store, hook.Instrument(idemhook.Options{}))
//
// An entry holds the delivery's route, source, key, scope, outcome, status,
// duration and sizes, and why it was refused, unprotected or released
// (Reason). The hook never blocks: a full recorder drops the entry and
// counts it (audit.Recorder.Dropped).
package audithook

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/hookchain"
)

// Recorder takes the entries: an *audit.Recorder. Record must not block.
type Recorder interface {
	Record(audit.Entry)
}

// Config configures the hook. Recorder is required.
type Config struct {
	Recorder Recorder
	// Instance names this process in the entries (e.g. the host name).
	Instance string
	// Route names a delivery's route. Default: the pattern the request
	// matched in its http.ServeMux (Request.Pattern).
	Route func(*http.Request) string
	// Settings returns the settings of a route named by Route, for the
	// reasons that name its limits (max body). Default: none.
	Settings func(route string) idemhook.Route
	// Decisions, if set, gives each entry its Decision: what decided the
	// delivery, in words (the gateway's log sink at level debug).
	Decisions bool
	// Now is the clock of the entries' times. Default: time.Now.
	Now func() time.Time
}

// Hook is the OnDelivery hook that records a delivery's entry.
type Hook struct{ cfg Config }

// New returns the hook of cfg.
func New(cfg Config) (*Hook, error) {
	if cfg.Recorder == nil {
		return nil, errors.New("audithook: Config.Recorder is nil")
	}
	if cfg.Route == nil {
		cfg.Route = func(r *http.Request) string {
			if r == nil {
				return ""
			}
			return r.Pattern
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Hook{cfg: cfg}, nil
}

// Instrument returns opts with the hook added to its OnDelivery (an
// OnDelivery already set still runs, first).
func (h *Hook) Instrument(opts idemhook.Options) idemhook.Options {
	return hookchain.Instrument(opts, hookchain.Hooks{OnDelivery: h.OnDelivery})
}

// OnDelivery records d's entry. It never blocks.
func (h *Hook) OnDelivery(d idemhook.DeliveryInfo) {
	route := h.cfg.Route(d.Request)
	var settings idemhook.Route
	if h.cfg.Settings != nil {
		settings = h.cfg.Settings(route)
	}
	e := audit.Entry{
		Time:          h.cfg.Now().Add(-d.Duration),
		Route:         route,
		Source:        d.Source,
		Key:           d.Key,
		Scope:         d.Scope,
		Outcome:       string(d.Outcome),
		Status:        d.Status,
		Duration:      d.Duration,
		RequestBytes:  d.RequestBytes,
		ResponseBytes: d.ResponseBytes,
		Reason:        Reason(d, settings),
		Instance:      h.cfg.Instance,
	}
	if h.cfg.Decisions {
		e.Decision = Decision(d, settings, e.Reason)
	}
	h.cfg.Recorder.Record(e)
}

// Reason says why a delivery was refused, or not protected, or why its
// claim was released: the entry's Reason. It is "" for an ordinary one. A
// batched delivery's (Route.Items) counts its items first.
// route is the delivery's route, whose limits some reasons name.
func Reason(d idemhook.DeliveryInfo, route idemhook.Route) string {
	if it := d.Items; it != nil {
		// A batched delivery (Route.Items): what became of its items.
		s := fmt.Sprintf("batch of %d items: %d processed, %d replayed, %d failed, %d in flight",
			it.Total, it.Processed, it.Replayed, it.Failed, it.InFlight)
		switch {
		case d.Outcome == idemhook.OutcomeFailedReleased && d.Err == nil:
			return s + "; the failed items were released: the provider's retry runs only them"
		case d.Err != nil:
			return s + "; " + d.Err.Error()
		}
		return s
	}
	switch d.Outcome {
	case idemhook.OutcomeTooLarge:
		return fmt.Sprintf("request body over max_body (%d bytes)", route.MaxBodyBytes)
	case idemhook.OutcomeOverloaded:
		return "the memory budget for request bodies was spent; the body was not read"
	case idemhook.OutcomeMismatch:
		return "the idempotency key was used before with a different body"
	case idemhook.OutcomeInFlightRejected:
		if d.Err != nil {
			return d.Err.Error()
		}
		return "a delivery of the same key is running (in_flight: reject)"
	case idemhook.OutcomeFailedReleased:
		if d.Err != nil {
			return d.Err.Error()
		}
		return fmt.Sprintf("the upstream answered %d: claim released, the provider's retry is processed afresh", d.Status)
	case idemhook.OutcomeReplayed, idemhook.OutcomeInFlightWaited, idemhook.OutcomeInFlightProceeded:
		return ""
	case idemhook.OutcomeInFlightAbandoned:
		return "the sender hung up while a delivery of the same key was running"
	}
	if d.Err != nil {
		return d.Err.Error() // signature_invalid, key_error, store_error_*, processed with a failed write
	}
	return ""
}

// Decision tells, in words, what decided a delivery: the entry's
// Decision. why is its Reason.
func Decision(d idemhook.DeliveryInfo, route idemhook.Route, why string) string {
	waited := ""
	if d.Waited > 0 {
		waited = fmt.Sprintf("waited %s for the running delivery of the key, then ", d.Waited.Round(time.Millisecond))
	}
	switch d.Outcome {
	case idemhook.OutcomeProcessed:
		if d.Err != nil {
			return waited + "claimed the key and forwarded; storing the answer failed: " + d.Err.Error()
		}
		if d.Waited > 0 {
			return waited + "took over the key (the running delivery released it), forwarded and stored the answer"
		}
		return "claimed the key, forwarded, stored the answer"
	case idemhook.OutcomeReplayed:
		return "found a stored answer: replayed it, not forwarded"
	case idemhook.OutcomeInFlightWaited:
		return waited + "replayed its stored answer"
	case idemhook.OutcomeInFlightProceeded:
		return waited + fmt.Sprintf("forwarded without a claim while another delivery of the key runs (in_flight: %s)", route.InFlight)
	case idemhook.OutcomeInFlightRejected:
		return waited + "refused with 409: " + why
	case idemhook.OutcomeInFlightAbandoned:
		return waited + "the sender hung up: nothing sent, not forwarded"
	case idemhook.OutcomeFailedReleased:
		return "claimed the key, forwarded, released the claim: " + why
	case idemhook.OutcomeMismatch:
		return "refused with 422: " + why
	case idemhook.OutcomeStoreErrorOpen:
		return "the store failed; forwarded unprotected (on_store_error: open): " + why
	case idemhook.OutcomeStoreErrorClosed:
		return "the store failed; refused with 503 (on_store_error: closed): " + why
	case idemhook.OutcomeKeyError:
		return "no key could be resolved; nothing claimed: " + why
	case idemhook.OutcomeSignatureInvalid:
		return "signature check failed; refused with 401, nothing claimed: " + why
	case idemhook.OutcomeTooLarge:
		return "refused with 413, nothing claimed: " + why
	case idemhook.OutcomeOverloaded:
		return "refused with 503 before the body was read, nothing claimed: " + why
	}
	return string(d.Outcome)
}
