package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemhook/idemhook"
)

// Provider sends deliveries as a webhook provider does: each delivery is
// sent again, after RetryAfter, while its answer is not a 2xx (an error
// status, a timeout, a connection error, an answer cut short), until
// Deadline. It records every answer.
type Provider struct {
	Client     *http.Client
	RetryAfter time.Duration // default 200ms
	Deadline   time.Time     // no send starts after it

	mu      sync.Mutex
	answers []Answer
	// Fake503, when set, records one made-up 503 of the gateway's own
	// (title "not accepted") the first time that event is sent, instead of
	// sending it: a gateway that refused it (the oracle on 503s must fail).
	Fake503 string
}

// Answer is one answer a Provider got.
type Answer struct {
	Route       string   // the route's name in the cell (its path)
	Events      []string // the events the request carried
	Status      int      // 0: no answer (connection error, timeout, cut short)
	FromBackend bool     // carries the Backend's MarkHeader: the backend's answer passed on
	Replayed    bool     // carries Idempotent-Replayed: true: the stored answer of an earlier delivery
	Title       string   // the gateway's problem title, for its own answers
	Err         string
	At          time.Time
}

// Answers returns every answer so far.
func (p *Provider) Answers() []Answer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Answer(nil), p.answers...)
}

// Deliver sends body to url (X-Event-Id: id) until it is answered 2xx or
// the deadline passes, and reports whether it was. events are the events
// the body carries (id alone, or the items of a batch).
func (p *Provider) Deliver(route, url, id, body string, events []string) bool {
	retry := p.RetryAfter
	if retry == 0 {
		retry = 200 * time.Millisecond
	}
	for first := true; time.Now().Before(p.Deadline); first = false {
		a := p.send(url, id, body, first)
		a.Route, a.Events = route, events
		p.mu.Lock()
		p.answers = append(p.answers, a)
		p.mu.Unlock()
		if a.Status >= 200 && a.Status < 300 {
			return true
		}
		time.Sleep(retry)
	}
	return false
}

func (p *Provider) send(url, id, body string, first bool) Answer {
	if first && p.Fake503 != "" && p.Fake503 == id {
		return Answer{Status: http.StatusServiceUnavailable, Title: "not accepted", At: time.Now()}
	}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return Answer{Err: err.Error(), At: time.Now()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Id", id)
	resp, err := p.Client.Do(req)
	if err != nil {
		return Answer{Err: err.Error(), At: time.Now()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	a := Answer{Status: resp.StatusCode, FromBackend: resp.Header.Get(MarkHeader) != "", Replayed: resp.Header.Get(idemhook.ReplayedHeader) == "true", At: time.Now()}
	if err != nil { // cut short: the provider saw no complete answer
		return Answer{Err: "reading the answer: " + err.Error(), At: a.At}
	}
	if !a.FromBackend && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var pr struct {
			Title string `json:"title"`
		}
		if json.Unmarshal(raw, &pr) == nil {
			a.Title = pr.Title
		}
	}
	return a
}
