package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Behaviour is how a Backend treats the requests it gets: healthy, or one
// of the failures a backend shows in production.
type Behaviour string

// The behaviours of a Backend. Each but Healthy fails every request; none
// of them runs the event (an answer cut short or refused is a request the
// backend did not finish).
const (
	Healthy     Behaviour = "healthy"      // runs the event and answers 200
	Refused     Behaviour = "refused"      // the port is closed: connection refused
	Closed      Behaviour = "closed"       // the request is read, then the connection closed with no answer
	Reset       Behaviour = "reset"        // a 200's headers and part of its body, then a TCP reset (SO_LINGER 0)
	Hang        Behaviour = "timeout"      // no answer until the gateway gives up (its upstream_timeout)
	SlowHeaders Behaviour = "slow-headers" // the status line at once, then a header byte every 200ms
	Status5xx   Behaviour = "5xx"          // 500
	Status4xx   Behaviour = "4xx"          // 400
	Status429   Behaviour = "429"          // 429 with Retry-After: 1
	Redirect    Behaviour = "redirect"     // 307 to another path
	NoDNS       Behaviour = "dns"          // the upstream's name does not resolve (a .invalid host)
	BadTLS      Behaviour = "tls"          // https to a certificate no one trusts: the handshake fails
)

// Behaviours lists every failing behaviour, in the order the fault matrix
// runs them.
var Behaviours = []Behaviour{Refused, Closed, Reset, Hang, SlowHeaders, Status5xx, Status4xx, Status429, Redirect, NoDNS, BadTLS}

// InAddress reports whether the behaviour is in the upstream's address (a
// name, a scheme) rather than in the backend's answers: the gateway must
// be given Backend.URL(b) as its upstream, and URL(Healthy) once the fault
// is over (a reload), as an operator fixes a DNS record or a certificate.
func (b Behaviour) InAddress() bool { return b == NoDNS || b == BadTLS }

// MarkHeader is set on every answer the Backend writes, so that a sender
// can tell the backend's answers, passed on by a proxy, from the gateway's
// own.
const MarkHeader = "X-Fault-Backend"

// hangBound bounds how long a Hang or SlowHeaders request is held when the
// gateway does not give up first: the backend stops by itself.
const hangBound = 30 * time.Second

// Backend is a real HTTP backend on a loopback port whose behaviour a test
// switches at run time (Set). It counts, per event, the requests it got
// (in any behaviour) and its runs (requests it answered 200 as Healthy). An
// event is the X-Event-Id of a request, or each "id" of the items of a JSON
// body {"items": [{"id": ...}, ...]} (a batched delivery).
//
// Sabotage knobs (for the oracles' own tests) make it misbehave on purpose.
type Backend struct {
	addr string // host:port of the plain listener, kept across Refused
	tls  *httptest.Server

	mu        sync.Mutex
	behaviour Behaviour
	ln        net.Listener // nil while Refused
	srv       *http.Server
	runs      map[string]int
	firstRun  map[string]time.Time
	requests  map[string]int
	keys      map[string][]string // the distinct Idempotency-Keys of each event's runs
	closed    bool

	// RunTwice, when set, counts every run of that event twice: a backend
	// that ran it again (the oracle "nothing runs twice" must fail).
	RunTwice atomic.Pointer[string]
	// Forget, when set, answers that event 200 without counting a run: an
	// event dropped after its accept (the oracle "nothing is lost" must fail).
	Forget atomic.Pointer[string]
	// RunDelay delays each run's answer (the run counts at once): a
	// backend too slow to drain the queue within the bound.
	RunDelay atomic.Int64
	// DropKeySuffix, when set, records that event's Idempotency-Key
	// without what follows its last '#': a gateway that sent a
	// destination the event's store key (the oracle on destinations'
	// keys must fail).
	DropKeySuffix atomic.Pointer[string]
}

// NewBackend starts a Healthy Backend, stopped when the test ends.
func NewBackend(t testing.TB) *Backend {
	t.Helper()
	b := &Backend{behaviour: Healthy, runs: map[string]int{}, firstRun: map[string]time.Time{}, requests: map[string]int{}, keys: map[string][]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	b.serve(ln)
	b.tls = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.count(r) // never reached: the gateway refuses the certificate
		w.WriteHeader(http.StatusOK)
	}))
	b.tls.Config.ErrorLog = log.New(io.Discard, "", 0) // each refused handshake is the point, not news
	b.tls.StartTLS()
	t.Cleanup(b.Close)
	return b
}

func (b *Backend) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(b.handle), ReadHeaderTimeout: 10 * time.Second}
	b.ln, b.srv = ln, srv
	go srv.Serve(ln) //nolint:errcheck // ends with Close
}

// Close stops the backend.
func (b *Backend) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	if b.srv != nil {
		b.srv.Close()
	}
	b.tls.Close()
}

// URL returns the base URL the gateway must call for behaviour bh: the
// backend's loopback address, or for NoDNS the same port under a name in
// .invalid (which never resolves, RFC 6761), or for BadTLS an https
// listener whose certificate the gateway does not trust.
func (b *Backend) URL(bh Behaviour) string {
	switch bh {
	case NoDNS:
		_, port, _ := net.SplitHostPort(b.addr)
		return "http://backend.idemhook-fault.invalid:" + port
	case BadTLS:
		return b.tls.URL
	}
	return "http://" + b.addr
}

// Set switches the behaviour. Refused closes the port (connections in
// progress end too); leaving it opens the same port again.
func (b *Backend) Set(bh Behaviour) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("faults: backend closed")
	}
	if bh == b.behaviour {
		return nil
	}
	if bh == Refused {
		b.srv.Close() // the listener and every connection
		b.ln, b.srv = nil, nil
	} else if b.ln == nil {
		var ln net.Listener
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if ln, err = net.Listen("tcp", b.addr); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("faults: listening again on %s: %w", b.addr, err)
		}
		b.serve(ln)
	}
	b.behaviour = bh
	return nil
}

// Behaviour returns the current behaviour.
func (b *Backend) Behaviour() Behaviour {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.behaviour
}

// Runs returns the runs of each event so far.
func (b *Backend) Runs() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.runs)
}

// FirstRuns returns when each event first ran.
func (b *Backend) FirstRuns() map[string]time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.firstRun)
}

// Keys returns the distinct Idempotency-Keys each event's runs carried.
func (b *Backend) Keys() map[string][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]string, len(b.keys))
	for e, ks := range b.keys {
		out[e] = slices.Clone(ks)
	}
	return out
}

// Requests returns how many requests carried each event, in any behaviour.
func (b *Backend) Requests() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.requests)
}

// eventsOf returns the events a request carries and reads its body.
func eventsOf(r *http.Request) []string {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var batch struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if json.Unmarshal(body, &batch) == nil && len(batch.Items) > 0 {
		ids := make([]string, 0, len(batch.Items))
		for _, it := range batch.Items {
			ids = append(ids, it.ID)
		}
		return ids
	}
	if id := r.Header.Get("X-Event-Id"); id != "" {
		return []string{id}
	}
	return nil
}

func (b *Backend) count(r *http.Request) []string {
	ids := eventsOf(r)
	b.mu.Lock()
	for _, id := range ids {
		b.requests[id]++
	}
	b.mu.Unlock()
	return ids
}

func (b *Backend) handle(w http.ResponseWriter, r *http.Request) {
	ids := b.count(r)
	bh := b.Behaviour()
	w.Header().Set(MarkHeader, string(bh))
	switch bh {
	case Healthy:
		now := time.Now()
		b.mu.Lock()
		for _, id := range ids {
			if f := b.Forget.Load(); f != nil && *f == id {
				continue
			}
			n := 1
			if tw := b.RunTwice.Load(); tw != nil && *tw == id {
				n = 2
			}
			b.runs[id] += n
			if _, ok := b.firstRun[id]; !ok {
				b.firstRun[id] = now
			}
			key := r.Header.Get("Idempotency-Key")
			if d := b.DropKeySuffix.Load(); d != nil && *d == id {
				if i := strings.LastIndex(key, "#"); i >= 0 {
					key = key[:i]
				}
			}
			if !slices.Contains(b.keys[id], key) {
				b.keys[id] = append(b.keys[id], key)
			}
		}
		b.mu.Unlock()
		if d := time.Duration(b.RunDelay.Load()); d > 0 {
			time.Sleep(d) // ran, but slow to answer
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ran":%d}`, len(ids))
	case Status5xx:
		http.Error(w, "backend failed", http.StatusInternalServerError)
	case Status4xx:
		http.Error(w, "backend refused the request", http.StatusBadRequest)
	case Status429:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case Redirect:
		http.Redirect(w, r, "/moved"+r.URL.Path, http.StatusTemporaryRedirect)
	case Hang:
		select {
		case <-r.Context().Done():
		case <-time.After(hangBound):
		}
	case Closed, Reset, SlowHeaders:
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		b.misanswer(bh, conn, rw)
	default: // Refused, NoDNS, BadTLS: the request never reaches this listener
		http.Error(w, "unexpected request in behaviour "+string(bh), http.StatusInternalServerError)
	}
}

// misanswer writes a broken answer on a hijacked connection.
func (b *Backend) misanswer(bh Behaviour, conn net.Conn, rw *bufio.ReadWriter) {
	switch bh {
	case Closed: // nothing at all
	case Reset:
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + MarkHeader + ": reset\r\nContent-Length: 100\r\n\r\n{\"ran\":") //nolint:errcheck
		rw.Flush()                                                                                                                               //nolint:errcheck
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) //nolint:errcheck // Close then sends RST
		}
	case SlowHeaders:
		rw.WriteString("HTTP/1.1 200 OK\r\n") //nolint:errcheck
		rw.Flush()                            //nolint:errcheck
		header := MarkHeader + ": slow-headers\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
		for i, end := 0, time.Now().Add(hangBound); i < len(header) && time.Now().Before(end); i++ {
			time.Sleep(200 * time.Millisecond)
			if _, err := conn.Write([]byte{header[i]}); err != nil {
				return // the gateway gave up
			}
		}
	}
}

// Events returns n event ids with prefix, for a cell's senders.
func Events(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + "-" + strconv.Itoa(i)
	}
	return ids
}

// Batch is the JSON body of a batched delivery of the items ids, as
// Backend reads it ({"items": [{"id": ...}, ...]}).
func Batch(ids []string) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf(`{"id":%q,"text":"item %s"}`, id, id)
	}
	return `{"items":[` + strings.Join(parts, ",") + `]}`
}
