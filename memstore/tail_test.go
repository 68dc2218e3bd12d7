//go:build unix

package memstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/proccpu"
	"github.com/idemhook/idemhook/memstore"
)

var (
	tailKeys = flag.Int("memstore.keys", -1,
		"TestFirstDeliveryTail: the number of records stored before the measurement (0 for none); the test skips without it")
	tailRequests = flag.Int("memstore.requests", 100_000,
		"TestFirstDeliveryTail: requests to each server")
)

// TestFirstDeliveryTail fills a store with -memstore.keys completed records
// (typical answers under body-hash keys), then measures the latency of
// first deliveries through the middleware over HTTP on loopback against
// the latency of a bare handler in the same process, and the CPU the
// garbage collector spends per stored key. Each sender alternates between
// the two servers, request by request, so that both meet the same moments
// of the process (its collections) and of the machine (other programs):
// in rounds of 20,000 requests to one server then the other, the p99
// ratio of one configuration ranged from 0.85x to 1.71x on the shared
// machine. It measures and
// logs; it asserts nothing about time (the machine is shared). Run with
//
//	go test ./memstore -run TestFirstDeliveryTail -v -count=1 -timeout 30m -memstore.keys 1000000
func TestFirstDeliveryTail(t *testing.T) {
	if *tailKeys < 0 {
		t.Skip("a load run: give -memstore.keys N to run it")
	}
	keys := *tailKeys
	st, err := memstore.New(memstore.Config{MaxEntries: max(2*keys, memstore.DefaultMaxEntries)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	start := time.Now()
	fillStore(t, st, keys)
	t.Logf("filled %d keys in %v", st.Len(), time.Since(start).Round(time.Millisecond))

	// A full collection's CPU over the keys: the mark work each stored key
	// costs every cycle (the rest of the heap is the same in every run).
	// Nothing else runs meanwhile, so the process's CPU time is the
	// collector's; the runtime's own estimate is logged beside it (it
	// counts wall time of its workers, so it grows when the machine is
	// busy).
	var ms runtime.MemStats
	gcBefore, cpuBefore := gcCPU(), proccpu.Used()
	const cycles = 3
	for range cycles {
		runtime.GC()
	}
	perCycle, estimate := (proccpu.Used()-cpuBefore)/cycles, (gcCPU()-gcBefore)/cycles
	runtime.ReadMemStats(&ms)
	t.Logf("forced GC: %v process CPU per cycle, %.1f ns per stored key (runtime estimate %v); heap %d MiB, %d objects",
		perCycle.Round(time.Microsecond), float64(perCycle)/float64(max(keys, 1)), estimate.Round(time.Microsecond), ms.HeapAlloc>>20, ms.HeapObjects)

	mw, err := idemhook.New(st, idemhook.Options{})
	if err != nil {
		t.Fatal(err)
	}
	route, err := mw.Route(idemhook.Route{Source: "stone"})
	if err != nil {
		t.Fatal(err)
	}
	bare := httptest.NewServer(webhookHandler)
	defer bare.Close()
	guarded := httptest.NewServer(route(webhookHandler))
	defer guarded.Close()

	const senders = 16
	tr := &http.Transport{MaxIdleConnsPerHost: senders}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	gcBefore, cyclesBefore := gcCPU(), gcCycles()
	measureStart := time.Now()
	bareLat, mwLat := send(t, client, bare.URL, guarded.URL, senders, *tailRequests)
	elapsed := time.Since(measureStart)
	gcSpent, gcRan := gcCPU()-gcBefore, gcCycles()-cyclesBefore

	b50, b99, b999 := percentiles(bareLat)
	m50, m99, m999 := percentiles(mwLat)
	t.Logf("keys %d: bare p50 %v p99 %v p99.9 %v; middleware p50 %v p99 %v p99.9 %v; p99 ratio %.2fx",
		keys, b50, b99, b999, m50, m99, m999, float64(m99)/float64(b99))
	t.Logf("measurement: %v, %d requests, %d GC cycles, GC CPU %v (%.1f%% of the wall time on %d cores), %.1f ns per stored key per cycle",
		elapsed.Round(time.Millisecond), len(bareLat)+len(mwLat), gcRan, gcSpent.Round(time.Millisecond),
		100*gcSpent.Seconds()/(elapsed.Seconds()*float64(runtime.GOMAXPROCS(0))), runtime.GOMAXPROCS(0),
		float64(gcSpent)/float64(max(gcRan, 1))/float64(max(keys, 1)))
	if got, want := st.Len(), keys+len(mwLat); got != want {
		t.Errorf("Len after the run: got %d, want %d (every middleware request a first delivery)", got, want)
	}
}

// fillStore stores n typical answers under random body-hash keys, as the
// middleware would have after n first deliveries, from two goroutines.
func fillStore(t *testing.T, st *memstore.Store, n int) {
	claim := &idemhook.Record{State: idemhook.StatePending, Token: "fill-token-0123456789abcdef", CreatedAt: time.Now()}
	done := memstore.TypicalAnswer(time.Now())
	const workers = 2
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			var sum [32]byte
			key := []byte("idem:stone:sha256:")
			prefix := len(key)
			for i := w; i < n; i += workers {
				for j := 0; j < len(sum); j += 8 {
					v := rng.Uint64()
					for k := range 8 {
						sum[j+k] = byte(v >> (8 * k))
					}
				}
				key = hex.AppendEncode(key[:prefix], sum[:])
				k := string(key)
				if _, err := st.Claim(context.Background(), k, claim, time.Minute); err != nil {
					t.Error(err)
					return
				}
				if err := st.Complete(context.Background(), k, claim, done, 24*time.Hour); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// send posts n new events to each of the two URLs from senders
// goroutines, each alternating between them, and returns the latency of
// each request, by URL.
func send(t *testing.T, client *http.Client, urlA, urlB string, senders, n int) (latA, latB []time.Duration) {
	latA, latB = make([]time.Duration, n), make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			var body []byte
			for {
				i := next.Add(1) - 1
				if i >= int64(2*n) {
					return
				}
				url, lat := urlA, latA
				if i%2 == 1 {
					url, lat = urlB, latB
				}
				body = append(body[:0], `{"id":"evt_`...)
				body = strconv.AppendInt(body, i, 10)
				body = append(body, `","type":"payment.succeeded","data":{"amount":1000,"currency":"BRL","customer":"cus_123"}}`...)
				began := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body) //nolint:errcheck
				resp.Body.Close()
				lat[i/2] = time.Since(began)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return latA, latB
}

// webhookHandler is a typical small webhook handler: it reads the body and
// answers a short JSON document (the root package's benchmarks' handler).
var webhookHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) //nolint:errcheck
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}`)) //nolint:errcheck
})

func percentiles(lat []time.Duration) (p50, p99, p999 time.Duration) {
	s := slices.Clone(lat)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99), at(0.999)
}

// gcCPU is the runtime's estimate of the CPU its collector has used.
func gcCPU() time.Duration {
	return time.Duration(readMetric("/cpu/classes/gc/total:cpu-seconds").Float64() * float64(time.Second))
}

func gcCycles() uint64 { return readMetric("/gc/cycles/total:gc-cycles").Uint64() }

func readMetric(name string) metrics.Value {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindBad {
		panic(fmt.Sprintf("runtime/metrics: no metric %q", name))
	}
	return s[0].Value
}
