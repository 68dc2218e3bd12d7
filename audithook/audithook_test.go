package audithook

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/audit"
)

// entries is a Recorder that keeps what it is given.
type entries []audit.Entry

func (es *entries) Record(e audit.Entry) { *es = append(*es, e) }

func TestNewNeedsARecorder(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Recorder: nil error")
	}
}

// TestOnDelivery: the entry holds the delivery, starts when the delivery
// started, names the route by the request's pattern (or Config.Route), and
// its reason and decision use the route's settings (Config.Settings).
func TestOnDelivery(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	req := httptest.NewRequest(http.MethodPost, "/webhooks/stone", nil)
	req.Pattern = "/webhooks/"
	tooLarge := idemhook.DeliveryInfo{Request: req, Source: "stone", Key: "k1", Scope: "acme", Outcome: idemhook.OutcomeTooLarge,
		Status: 413, Duration: 2 * time.Second, RequestBytes: 11, ResponseBytes: 22}
	for _, tt := range []struct {
		name string
		cfg  Config
		d    idemhook.DeliveryInfo
		want audit.Entry
	}{
		{"pattern and settings", Config{Instance: "i1", Settings: func(route string) idemhook.Route {
			if route != "/webhooks/" {
				t.Errorf("settings of %q, want the pattern", route)
			}
			return idemhook.Route{MaxBodyBytes: 10}
		}}, tooLarge, audit.Entry{Time: now.Add(-2 * time.Second), Route: "/webhooks/", Source: "stone", Key: "k1", Scope: "acme",
			Outcome: "too_large", Status: 413, Duration: 2 * time.Second, RequestBytes: 11, ResponseBytes: 22,
			Reason: "request body over max_body (10 bytes)", Instance: "i1"}},
		{"own route name, no settings, decisions", Config{Route: func(*http.Request) string { return "stone" }, Decisions: true},
			idemhook.DeliveryInfo{Request: req, Source: "stone", Outcome: idemhook.OutcomeFailedReleased, Status: 502, Err: errors.New("upstream down")},
			audit.Entry{Time: now, Route: "stone", Source: "stone", Outcome: "failed_released", Status: 502,
				Reason: "upstream down", Decision: "claimed the key, forwarded, released the claim: upstream down"}},
		{"a batch with a failed item", Config{}, idemhook.DeliveryInfo{Source: "whatsapp", Outcome: idemhook.OutcomeFailedReleased, Status: 503,
			Items: &idemhook.ItemsInfo{Total: 50, Processed: 48, Failed: 2}},
			audit.Entry{Time: now, Source: "whatsapp", Outcome: "failed_released", Status: 503,
				Reason: "batch of 50 items: 48 processed, 0 replayed, 2 failed, 0 in flight; the failed items were released: the provider's retry runs only them"}},
		{"a batch done before", Config{}, idemhook.DeliveryInfo{Source: "whatsapp", Outcome: idemhook.OutcomeReplayed, Status: 200,
			Items: &idemhook.ItemsInfo{Total: 3, Replayed: 3}},
			audit.Entry{Time: now, Source: "whatsapp", Outcome: "replayed", Status: 200, Reason: "batch of 3 items: 0 processed, 3 replayed, 0 failed, 0 in flight"}},
		{"no request", Config{}, idemhook.DeliveryInfo{Source: "stone", Outcome: idemhook.OutcomeProcessed, Status: 200},
			audit.Entry{Time: now, Source: "stone", Outcome: "processed", Status: 200}},
	} {
		var got entries
		tt.cfg.Recorder = &got
		tt.cfg.Now = func() time.Time { return now }
		h, err := New(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		h.Instrument(idemhook.Options{}).OnDelivery(tt.d)
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s: entries %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

// TestInstrumentKeepsOnDelivery: an OnDelivery already set still runs,
// before the entry is recorded.
func TestInstrumentKeepsOnDelivery(t *testing.T) {
	var order []string
	h, err := New(Config{Recorder: recorderFunc(func(audit.Entry) { order = append(order, "audit") })})
	if err != nil {
		t.Fatal(err)
	}
	opts := h.Instrument(idemhook.Options{OnDelivery: func(idemhook.DeliveryInfo) { order = append(order, "own") }})
	opts.OnDelivery(idemhook.DeliveryInfo{Outcome: idemhook.OutcomeProcessed})
	if len(order) != 2 || order[0] != "own" || order[1] != "audit" {
		t.Errorf("hooks ran %v, want [own audit]", order)
	}
}

type recorderFunc func(audit.Entry)

func (f recorderFunc) Record(e audit.Entry) { f(e) }
