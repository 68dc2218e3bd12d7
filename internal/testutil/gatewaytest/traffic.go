package gatewaytest

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A fault under load: a provider's traffic at one gateway route (distinct
// events, each delivered more than once, every delivery sent again until it
// is answered 2xx) while a fault is injected mid-run, and what the backend
// ran, counted exactly per event. RunTraffic drives it and returns a Tally;
// the fault itself (restarting the store, killing a process) is the
// caller's.

// EventHeader carries the event id of each delivery RunTraffic sends. The
// route keys on it (header: x-event-id).
const EventHeader = "X-Event-Id"

// EventBackend is a backend that runs each delivery it gets (its 200 answer
// is the run) and counts the runs per event (the EventHeader).
type EventBackend struct {
	URL string
	// Delay is how long a run takes before its answer: the time a delivery
	// spends at the backend, in flight should the fault strike then.
	// Default 0. Set it before the traffic starts.
	Delay time.Duration

	inFault  atomic.Bool  // set by RunTraffic while the fault lasts
	inFlight atomic.Int32 // runs that have begun and not yet answered

	mu        sync.Mutex
	runs      map[string]int
	faultRuns map[string]int // runs that began while the fault lasted
}

// NewEventBackend starts an EventBackend, closed when the test ends.
func NewEventBackend(t *testing.T) *EventBackend {
	t.Helper()
	b := &EventBackend{runs: map[string]int{}, faultRuns: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(EventHeader)
		io.Copy(io.Discard, r.Body) //nolint:errcheck
		b.inFlight.Add(1)
		defer b.inFlight.Add(-1)
		b.mu.Lock()
		b.runs[id]++
		if b.inFault.Load() {
			b.faultRuns[id]++
		}
		b.mu.Unlock()
		if b.Delay > 0 {
			time.Sleep(b.Delay)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ran":%q}`, id)
	}))
	t.Cleanup(srv.Close)
	b.URL = srv.URL
	return b
}

// InFlight returns the number of runs that have begun and not yet
// answered: deliveries at the backend.
func (b *EventBackend) InFlight() int { return int(b.inFlight.Load()) }

// Runs returns the number of runs of each event so far.
func (b *EventBackend) Runs() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.runs)
}

// Traffic is what RunTraffic sends and the fault it injects. The zero value
// of each field means its default.
type Traffic struct {
	// URL is the gateway route's URL. It keys on EventHeader.
	URL string
	// MetricsURL, if set, is the gateway's /metrics: the Tally then counts
	// the deliveries whose outcome was a store error.
	MetricsURL string
	// Events is the number of distinct events, evt-0, evt-1, ... Default 400.
	Events int
	// Copies is how many deliveries each event gets whatever their answers
	// (a provider's duplicates: a lost answer, a timeout, at-least-once).
	// Each copy comes Lag deliveries after the previous one. Default 2.
	Copies int
	// Lag is how many new deliveries separate two copies of an event.
	// Default 40.
	Lag int
	// Senders is the number of concurrent senders. Default 8.
	Senders int
	// Rate is how many new deliveries (retries aside) start per second, all
	// senders together. Default 100.
	Rate int
	// Attempts bounds the sends of one delivery: the first and its retries
	// while the answer is not a 2xx. Default 100.
	Attempts int
	// RetryAfter is the pause before a delivery is sent again. Meanwhile
	// the senders go on with other deliveries. Default 100ms.
	RetryAfter time.Duration
	// FaultAfter is how many requests are answered 2xx before the fault
	// begins. Default Events/4.
	FaultAfter int
	// Fault injects the fault, and returns when it is over; an error fails
	// the test. The traffic goes on meanwhile. It is called once, in a
	// goroutine of its own.
	Fault func() error
}

func (tr *Traffic) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&tr.Events, 400)
	def(&tr.Copies, 2)
	def(&tr.Lag, 40)
	def(&tr.Senders, 8)
	def(&tr.Rate, 100)
	def(&tr.Attempts, 100)
	def(&tr.FaultAfter, tr.Events/4)
	if tr.RetryAfter == 0 {
		tr.RetryAfter = 100 * time.Millisecond
	}
}

// Tally is what a run of RunTraffic sent and what the backend ran. The
// counts are exact.
type Tally struct {
	Events     int // distinct events
	Deliveries int // Events × Copies
	Sent       int // requests: first sends and retries
	Answered   int // requests answered 2xx
	Replayed   int // of which replays (Idempotent-Replayed: true)
	Ran        int // runs at the backend
	RanTwice   int // events the backend ran more than once
	Twice      []string
	Lost       int // events the backend never ran
	GaveUp     int // deliveries never answered 2xx within Traffic.Attempts

	// While the fault lasted (from Fault's call to its return):
	FaultSent     int // requests sent
	FaultRefused  int // of which answered other than 2xx, or not at all
	FaultRan      int // runs that began at the backend
	FaultRanEvent int // events with a run that began then

	// With Traffic.MetricsURL: deliveries whose outcome was a store error
	// (store_error_open or store_error_closed), in all, while the fault
	// lasted, and after it.
	StoreErrors, FaultStoreErrors, AfterStoreErrors int
}

func (t Tally) String() string {
	twice := t.Twice
	if len(twice) > 10 {
		twice = append(twice[:10:10], "...")
	}
	return fmt.Sprintf("%d events × %d copies: %d requests, %d answered 2xx (%d replays); the backend ran %d times, %d events twice or more %v, %d lost, %d deliveries gave up; "+
		"during the fault %d requests (%d not 2xx), %d runs of %d events; store errors %d (%d during the fault, %d after)",
		t.Events, t.Deliveries/max(t.Events, 1), t.Sent, t.Answered, t.Replayed, t.Ran, t.RanTwice, twice, t.Lost, t.GaveUp,
		t.FaultSent, t.FaultRefused, t.FaultRan, t.FaultRanEvent, t.StoreErrors, t.FaultStoreErrors, t.AfterStoreErrors)
}

// EventID is the id of event n.
func EventID(n int) string { return "evt-" + strconv.Itoa(n) }

// RunTraffic sends tr's deliveries to the gateway in front of b, injects
// the fault mid-run, and returns the tally once every delivery is answered
// 2xx or has used its attempts, and the fault is over. It fails the test if
// the traffic ended before the fault began.
func RunTraffic(t *testing.T, b *EventBackend, tr Traffic) Tally {
	t.Helper()
	if tr.Fault == nil {
		t.Fatal("gatewaytest: RunTraffic: Traffic.Fault is nil")
	}
	tr.defaults()
	tally := Tally{Events: tr.Events, Deliveries: tr.Events * tr.Copies}

	// The schedule: event n's first delivery is the n-th new event, and
	// its copy c comes with the (n+c×Lag)-th.
	var schedule []int
	for k := 0; len(schedule) < tally.Deliveries; k++ {
		for c := range tr.Copies {
			if n := k - c*tr.Lag; n >= 0 && n < tr.Events {
				schedule = append(schedule, n)
			}
		}
	}

	storeErrors := func() (int, error) {
		if tr.MetricsURL == "" {
			return 0, nil
		}
		return StoreErrorCount(tr.MetricsURL)
	}
	before, err := storeErrors()
	if err != nil {
		t.Fatal(err)
	}

	tport := &http.Transport{MaxIdleConnsPerHost: tr.Senders}
	defer tport.CloseIdleConnections()
	client := &http.Client{Transport: tport, Timeout: 30 * time.Second}

	type delivery struct {
		n        int
		attempts int
	}
	var (
		work      = make(chan *delivery, len(schedule)) // never full: it holds each delivery at most once
		pending   sync.WaitGroup
		sent      atomic.Int64
		answered  atomic.Int64
		replayed  atomic.Int64
		gaveUp    atomic.Int64
		faultSent atomic.Int64
		faultRef  atomic.Int64
		inFault   atomic.Bool
		faultOnce sync.Once
		faultDone chan struct{} // closed when the fault is over; nil until it begins
		mid       int           // store errors when the fault ended
		faultErr  error
	)
	startFault := func() {
		faultOnce.Do(func() {
			faultDone = make(chan struct{})
			go func() {
				defer close(faultDone)
				b.inFault.Store(true)
				inFault.Store(true)
				err := tr.Fault()
				inFault.Store(false)
				b.inFault.Store(false)
				var merr error
				mid, merr = storeErrors()
				faultErr = errors.Join(err, merr)
			}()
		})
	}
	send := func(d *delivery) bool {
		during := inFault.Load()
		sent.Add(1)
		if during {
			faultSent.Add(1)
		}
		id := EventID(d.n)
		req, err := http.NewRequest(http.MethodPost, tr.URL, strings.NewReader(fmt.Sprintf(`{"id":%q}`, id)))
		if err != nil {
			t.Error(err)
			return true
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(EventHeader, id)
		resp, err := client.Do(req)
		ok := false
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ok = err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300
		}
		if !ok {
			if during {
				faultRef.Add(1)
			}
			return false
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			replayed.Add(1)
		}
		if int(answered.Add(1)) == tr.FaultAfter {
			startFault()
		}
		return true
	}

	pending.Add(len(schedule))
	var senders sync.WaitGroup
	for range tr.Senders {
		senders.Go(func() {
			for d := range work {
				d.attempts++
				switch {
				case send(d):
					pending.Done()
				case d.attempts >= tr.Attempts:
					gaveUp.Add(1)
					pending.Done()
				default:
					time.AfterFunc(tr.RetryAfter, func() { work <- d })
				}
			}
		})
	}
	go func() { // the new deliveries, at tr.Rate
		tick := time.NewTicker(time.Second / time.Duration(tr.Rate))
		defer tick.Stop()
		for _, n := range schedule {
			work <- &delivery{n: n}
			<-tick.C
		}
	}()
	pending.Wait()
	close(work)
	senders.Wait()

	faultOnce.Do(func() {}) // from here on faultDone is set or stays nil
	if faultDone == nil {
		t.Fatalf("the traffic ended (%d requests answered 2xx) before the fault began (after %d): raise Events or lower FaultAfter", answered.Load(), tr.FaultAfter)
	}
	<-faultDone // the traffic may end first: the tally waits for the fault's end
	if faultErr != nil {
		t.Fatal(faultErr)
	}

	tally.Sent, tally.Answered, tally.Replayed = int(sent.Load()), int(answered.Load()), int(replayed.Load())
	tally.GaveUp = int(gaveUp.Load())
	tally.FaultSent, tally.FaultRefused = int(faultSent.Load()), int(faultRef.Load())
	b.mu.Lock()
	for n := range tr.Events {
		id := EventID(n)
		runs := b.runs[id]
		tally.Ran += runs
		if runs > 1 {
			tally.RanTwice++
			tally.Twice = append(tally.Twice, id)
		}
		if runs == 0 {
			tally.Lost++
		}
		if f := b.faultRuns[id]; f > 0 {
			tally.FaultRan += f
			tally.FaultRanEvent++
		}
	}
	b.mu.Unlock()
	sort.Strings(tally.Twice)
	if tr.MetricsURL != "" {
		end, err := storeErrors()
		if err != nil {
			t.Fatal(err)
		}
		tally.StoreErrors, tally.FaultStoreErrors, tally.AfterStoreErrors = end-before, mid-before, end-mid
	}
	return tally
}

var deliveriesSample = regexp.MustCompile(`(?m)^idemhook_deliveries_total\{([^}]*)\} (\S+)$`)

// StoreErrorCount reads from a gateway's /metrics how many deliveries ended
// in store_error_open or store_error_closed.
func StoreErrorCount(metricsURL string) (int, error) {
	resp, err := http.Get(metricsURL)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", metricsURL, err)
	}
	total := 0
	for _, m := range deliveriesSample.FindAllStringSubmatch(string(body), -1) {
		if strings.Contains(m[1], `outcome="store_error_open"`) || strings.Contains(m[1], `outcome="store_error_closed"`) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %w", metricsURL, m[0], err)
			}
			total += int(v)
		}
	}
	return total, nil
}
