package provider_test

// End to end through the real middleware and the memory store: for every
// preset, the deliveries a provider really sends.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/provider"
)

// server is a webhook endpoint behind the middleware, counting handler runs.
type server struct {
	srv  *httptest.Server
	runs atomic.Int64

	mu       sync.Mutex
	outcomes []idemhook.Outcome
}

// newServer serves handler status 201 and body "handled <n>" on a route of
// source with preset p (nil: none) and header (""": none).
func newServer(t *testing.T, source, header string, p *idemhook.Preset) *server {
	t.Helper()
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := &server{}
	m, err := idemhook.New(st, idemhook.Options{OnDelivery: func(d idemhook.DeliveryInfo) {
		s.mu.Lock()
		s.outcomes = append(s.outcomes, d.Outcome)
		s.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := m.Route(idemhook.Route{Source: source, Header: header, Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "handled %d", n)
	})))
	t.Cleanup(s.srv.Close)
	return s
}

// response is what the provider saw.
type response struct {
	status      int
	body        string
	replayed    bool
	contentType string
}

// send delivers r (built with httptest.NewRequest) to the server.
func (s *server) send(t *testing.T, r *http.Request) response {
	t.Helper()
	body, _ := io.ReadAll(r.Body)
	req, err := http.NewRequest(r.Method, s.srv.URL+r.URL.RequestURI(), strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.Header.Clone()
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{
		status:      resp.StatusCode,
		body:        string(b),
		replayed:    resp.Header.Get(idemhook.ReplayedHeader) == "true",
		contentType: resp.Header.Get("Content-Type"),
	}
}

func (s *server) lastOutcome() idemhook.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.outcomes) == 0 {
		return ""
	}
	return s.outcomes[len(s.outcomes)-1]
}

// TestEndToEnd: for every preset, through idemhook.New(memstore) and a Route
// with the preset, a first delivery runs the handler once, the provider's
// retry is replayed with the preset's duplicate status, another event runs
// it again, and a bad or stale signature is refused 401 without claiming
// anything (the valid delivery of that event is then processed first time).
func TestEndToEnd(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			s := newServer(t, f.name, "", newPreset(t, f.name, f.cfg, baseTime))
			first := baseTime.Add(-4 * time.Minute)

			expect := func(step string, got response, status int, replayed bool, runs int64, outcome idemhook.Outcome) {
				t.Helper()
				if got.status != status || got.replayed != replayed || s.runs.Load() != runs || s.lastOutcome() != outcome {
					t.Fatalf("%s: status %d replayed %v runs %d outcome %s (body %q); want %d %v %d %s",
						step, got.status, got.replayed, s.runs.Load(), s.lastOutcome(), got.body, status, replayed, runs, outcome)
				}
			}

			got := s.send(t, f.build(t, "1", first, f.secret()))
			expect("first delivery", got, 201, false, 1, idemhook.OutcomeProcessed)
			if got.body != "handled 1" {
				t.Fatalf("first delivery body %q", got.body)
			}

			// The provider's retry: same event; re-signed with a new
			// timestamp where the scheme signs one (Stone re-encrypts).
			dup := f.dupStatus
			if dup == 0 {
				dup = 201
			}
			got = s.send(t, f.build(t, "1", baseTime, f.secret()))
			expect("retry", got, dup, true, 1, idemhook.OutcomeReplayed)
			if got.body != "handled 1" {
				t.Fatalf("replayed body %q, want the first response's", got.body)
			}

			got = s.send(t, f.build(t, "2", baseTime, f.secret()))
			expect("another event", got, 201, false, 2, idemhook.OutcomeProcessed)

			// A forged delivery of event 3 claims nothing...
			got = s.send(t, f.build(t, "3", baseTime, f.wrongSecret))
			expect("bad signature", got, 401, false, 2, idemhook.OutcomeSignatureInvalid)
			checkProblem(t, got, f.name)
			// ...so the real one is processed first time.
			got = s.send(t, f.build(t, "3", baseTime, f.secret()))
			expect("event 3 after a forgery", got, 201, false, 3, idemhook.OutcomeProcessed)

			if f.timestamped {
				got = s.send(t, f.build(t, "4", baseTime.Add(-6*time.Minute), f.secret()))
				expect("stale signature", got, 401, false, 3, idemhook.OutcomeSignatureInvalid)
				checkProblem(t, got, f.name)
				got = s.send(t, f.build(t, "4", baseTime, f.secret()))
				expect("event 4 after a stale copy", got, 201, false, 4, idemhook.OutcomeProcessed)
			}
		})
	}
}

func checkProblem(t *testing.T, got response, preset string) {
	t.Helper()
	if got.contentType != "application/problem+json" {
		t.Fatalf("401 Content-Type %q, want application/problem+json", got.contentType)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(got.body), &p); err != nil || p.Status != 401 || !strings.HasPrefix(p.Detail, preset+": ") {
		t.Fatalf("problem body %q (%v), want status 401 and a detail naming %s", got.body, err, preset)
	}
}

// TestSeedStripeHeaderMissesRetries shows why the seed's Stripe route,
// keyed on the Stripe-Signature header, deduplicates nothing: Stripe signs
// every attempt with a new timestamp, so the retry has a new key and the
// handler runs twice. The stripe preset keys on the event id and runs it
// once.
func TestSeedStripeHeaderMissesRetries(t *testing.T) {
	var stripe fixture
	for _, f := range fixtures(t) {
		if f.name == "stripe" {
			stripe = f
		}
	}
	attempt1 := stripe.build(t, "1NnfJm2eZvKYlo2C", baseTime.Add(-time.Minute), stripe.secret())
	attempt2 := stripe.build(t, "1NnfJm2eZvKYlo2C", baseTime, stripe.secret()) // Stripe's retry
	if attempt1.Header.Get("Stripe-Signature") == attempt2.Header.Get("Stripe-Signature") {
		t.Fatal("the two attempts must carry different Stripe-Signature values, as Stripe sends them")
	}
	clone := func(r *http.Request) *http.Request {
		b := readBody(t, r)
		c := post(r.URL.String(), string(b))
		c.Header = r.Header.Clone()
		return c
	}

	t.Run("seed: Header stripe-signature", func(t *testing.T) {
		s := newServer(t, "stripe", "stripe-signature", nil)
		s.send(t, clone(attempt1))
		got := s.send(t, clone(attempt2))
		if s.runs.Load() != 2 || got.replayed {
			t.Fatalf("handler ran %d times (retry replayed: %v); the seed's key runs Stripe's retry again, want 2", s.runs.Load(), got.replayed)
		}
	})
	t.Run("preset stripe", func(t *testing.T) {
		s := newServer(t, "stripe", "", newPreset(t, "stripe", stripe.cfg, baseTime))
		s.send(t, clone(attempt1))
		got := s.send(t, clone(attempt2))
		if s.runs.Load() != 1 || !got.replayed {
			t.Fatalf("handler ran %d times (retry replayed: %v), want 1 and a replay", s.runs.Load(), got.replayed)
		}
	})
}

// TestEndToEndHandshakes: Meta's GET challenge and Slack's url_verification
// are answered by the preset and never reach the handler.
func TestEndToEndHandshakes(t *testing.T) {
	wa := newServer(t, "whatsapp", "", newPreset(t, "whatsapp-cloud",
		provider.Config{Secrets: []string{"app-secret"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt"}}, baseTime))
	got := wa.send(t, httptest.NewRequest(http.MethodGet, "/wa?hub.mode=subscribe&hub.verify_token=vt&hub.challenge=98765", nil))
	if got.status != 200 || got.body != "98765" || wa.runs.Load() != 0 {
		t.Fatalf("challenge: %d %q runs %d", got.status, got.body, wa.runs.Load())
	}
	got = wa.send(t, httptest.NewRequest(http.MethodGet, "/wa?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=98765", nil))
	if got.status != 403 || wa.runs.Load() != 0 {
		t.Fatalf("wrong verify token: %d %q runs %d", got.status, got.body, wa.runs.Load())
	}

	sl := newServer(t, "slack", "", newPreset(t, "slack", provider.Config{Secrets: []string{"sec"}}, baseTime))
	body := `{"token":"t","challenge":"c-42","type":"url_verification"}`
	r := post("/slack", body)
	r.Header.Set("X-Slack-Request-Timestamp", unix(baseTime))
	r.Header.Set("X-Slack-Signature", "v0="+hmacHex("sec", "v0:"+unix(baseTime)+":"+body))
	if got := sl.send(t, r); got.status != 200 || got.body != "c-42" || sl.runs.Load() != 0 {
		t.Fatalf("url_verification: %d %q runs %d", got.status, got.body, sl.runs.Load())
	}
	r = post("/slack", body)
	r.Header.Set("X-Slack-Request-Timestamp", unix(baseTime))
	r.Header.Set("X-Slack-Signature", "v0="+hmacHex("other", "v0:"+unix(baseTime)+":"+body))
	if got := sl.send(t, r); got.status != 401 || sl.runs.Load() != 0 {
		t.Fatalf("unsigned url_verification: %d %q runs %d", got.status, got.body, sl.runs.Load())
	}
}
