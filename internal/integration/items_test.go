package integration

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// whatsAppItems are the item paths of Meta's batched WhatsApp Cloud body:
// messages keyed by their id, statuses by id and status (a message is
// sent, delivered and read under one id).
var whatsAppItems = &idemhook.Items{Paths: []idemhook.ItemPath{
	{Path: "entry[*].changes[*].value.messages[*]", Key: "id"},
	{Path: "entry[*].changes[*].value.statuses[*]", Key: "{id}:{status}"},
}}

// itemsBackend runs each message of the requests it gets, once per
// request, and counts the runs by message id. It answers 500 for the ids in
// failing while they are there.
type itemsBackend struct {
	mu      sync.Mutex
	runs    map[string]int
	failing map[string]bool
	calls   int
}

func (b *itemsBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ids, err := gatewaytest.WhatsAppMessageIDs(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	fail := false
	for _, id := range ids {
		b.runs[id]++
		fail = fail || b.failing[id]
	}
	if fail {
		w.Header().Set("Retry-After", "7")
		http.Error(w, "item failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// take returns the runs and requests counted so far, and forgets them.
func (b *itemsBackend) take() (map[string]int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	runs, calls := b.runs, b.calls
	b.runs, b.calls = map[string]int{}, 0
	return runs, calls
}

// TestItemsOnEveryStore is the batched WhatsApp Cloud case on every store:
// a batch of 50 messages whose backend fails items 7 and 30. The retry
// runs exactly those two; a retry grouped otherwise, and a copy of the
// whole batch, run nothing; a batch that adds new messages to old ones
// runs only the new ones. Each mode (split, filter) is checked for what it
// promises.
func TestItemsOnEveryStore(t *testing.T) {
	for _, st := range stores {
		for _, mode := range []idemhook.ItemsMode{idemhook.ItemsSplit, idemhook.ItemsFilter} {
			t.Run(st.name+"/"+string(mode), func(t *testing.T) {
				store := st.new(t)
				var mu sync.Mutex
				var infos []idemhook.DeliveryInfo
				mw, err := idemhook.New(store, idemhook.Options{
					StoreTimeout: 5 * time.Second,
					OnDelivery: func(d idemhook.DeliveryInfo) {
						mu.Lock()
						infos = append(infos, d)
						mu.Unlock()
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				items := *whatsAppItems
				items.Mode = mode
				route, err := mw.Route(idemhook.Route{Source: "whatsapp-" + string(mode), Items: &items})
				if err != nil {
					t.Fatal(err)
				}
				backend := &itemsBackend{runs: map[string]int{}, failing: map[string]bool{}}
				srv := httptest.NewServer(route(backend))
				defer srv.Close()

				prefix := fmt.Sprintf("wamid.%d.", time.Now().UnixNano())
				ids := make([]string, 50)
				for i := range ids {
					ids[i] = fmt.Sprintf("%s%02d", prefix, i+1)
				}
				backend.failing[ids[6]], backend.failing[ids[29]] = true, true
				post := func(body string) (int, http.Header) {
					t.Helper()
					resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					return resp.StatusCode, resp.Header
				}
				lastInfo := func() idemhook.DeliveryInfo {
					mu.Lock()
					defer mu.Unlock()
					return infos[len(infos)-1]
				}
				wantRuns := func(step string, want map[string]int) {
					t.Helper()
					runs, _ := backend.take()
					if fmt.Sprint(runs) != fmt.Sprint(want) {
						t.Errorf("%s: runs by id %v, want %v", step, runs, want)
					}
				}
				each := func(n int, ids ...string) map[string]int {
					m := map[string]int{}
					for _, id := range ids {
						m[id] = n
					}
					return m
				}

				// 1. The batch of 50, items 7 and 30 failing.
				code, h := post(gatewaytest.WhatsAppBatch(ids, 10))
				if code != http.StatusInternalServerError || h.Get("Retry-After") != "7" {
					t.Errorf("first delivery: %d Retry-After %q, want the failure 500 with the backend's Retry-After 7", code, h.Get("Retry-After"))
				}
				info := lastInfo()
				if info.Outcome != idemhook.OutcomeFailedReleased || info.Items == nil {
					t.Fatalf("first delivery: outcome %s, items %v", info.Outcome, info.Items)
				}
				switch mode {
				case idemhook.ItemsSplit:
					// Each message ran once; 48 are done, 2 released.
					wantRuns("first delivery", each(1, ids...))
					if *info.Items != (idemhook.ItemsInfo{Total: 50, Processed: 48, Failed: 2}) {
						t.Errorf("first delivery: items %+v", *info.Items)
					}
				case idemhook.ItemsFilter:
					// One request carried all 50; it failed, so all 50 are
					// released, and the retry brings them all back.
					wantRuns("first delivery", each(1, ids...))
					if *info.Items != (idemhook.ItemsInfo{Total: 50, Failed: 50}) {
						t.Errorf("first delivery: items %+v", *info.Items)
					}
				}

				// 2. The provider retries; the backend is well again.
				clear(backend.failing)
				if code, _ := post(gatewaytest.WhatsAppBatch(ids, 10)); code != http.StatusOK {
					t.Errorf("retry: %d, want 200", code)
				}
				if mode == idemhook.ItemsSplit {
					wantRuns("retry", each(1, ids[6], ids[29]))
				} else {
					wantRuns("retry", each(1, ids...))
				}
				if info := lastInfo(); info.Outcome != idemhook.OutcomeProcessed {
					t.Errorf("retry: outcome %s", info.Outcome)
				}

				// 3. The same messages, grouped otherwise (7 per entry, in
				// reverse order): nothing runs, answered as a replay.
				rev := make([]string, len(ids))
				for i, id := range ids {
					rev[len(ids)-1-i] = id
				}
				code, h = post(gatewaytest.WhatsAppBatch(rev, 7))
				if code != http.StatusOK || h.Get(idemhook.ReplayedHeader) != "true" {
					t.Errorf("re-batched retry: %d %s %q, want 200 replayed", code, idemhook.ReplayedHeader, h.Get(idemhook.ReplayedHeader))
				}
				wantRuns("re-batched retry", map[string]int{})
				if info := lastInfo(); info.Outcome != idemhook.OutcomeReplayed || info.Items.Replayed != 50 {
					t.Errorf("re-batched retry: outcome %s, items %+v", info.Outcome, info.Items)
				}

				// 4. Old messages with new ones: only the new run, once.
				fresh := []string{prefix + "new1", prefix + "new2"}
				if code, h := post(gatewaytest.WhatsAppBatch(append(ids[40:], fresh...), 5)); code != http.StatusOK || h.Get(idemhook.ReplayedHeader) != "" {
					t.Errorf("batch with new messages: %d, replayed %q", code, h.Get(idemhook.ReplayedHeader))
				}
				wantRuns("batch with new messages", each(1, fresh...))
			})
		}
	}
}

// TestItemsConcurrentBatches sends overlapping batches at once, on every
// store: each message runs exactly once whichever delivery holds it, and
// every delivery is answered 200 (a delivery that meets another's item
// waits for its answer).
func TestItemsConcurrentBatches(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.new(t)
			mw, err := idemhook.New(store, idemhook.Options{StoreTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			route, err := mw.Route(idemhook.Route{Source: "whatsapp", Items: whatsAppItems, WaitTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			backend := &itemsBackend{runs: map[string]int{}, failing: map[string]bool{}}
			srv := httptest.NewServer(route(backend))
			defer srv.Close()

			prefix := fmt.Sprintf("wamid.c%d.", time.Now().UnixNano())
			ids := make([]string, 60)
			for i := range ids {
				ids[i] = fmt.Sprintf("%s%02d", prefix, i)
			}
			// 12 deliveries, each a window of 20 messages sliding by 4:
			// every message is in several of them.
			const senders = 12
			codes := make([]int, senders)
			sent := map[string]int{}
			for s := range senders {
				for _, id := range ids[s*4%40:][:20] {
					sent[id] = 1
				}
			}
			var wg sync.WaitGroup
			for s := range senders {
				wg.Go(func() {
					start := s * 4 % 40
					resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(gatewaytest.WhatsAppBatch(ids[start:start+20], 3+s%5)))
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					codes[s] = resp.StatusCode
				})
			}
			wg.Wait()
			// Every message sent ran exactly once.
			if runs, _ := backend.take(); fmt.Sprint(runs) != fmt.Sprint(sent) {
				t.Errorf("runs by id %v, want each of the %d messages sent once: %v", runs, len(sent), sent)
			}
			for s, code := range codes {
				if code != http.StatusOK {
					t.Errorf("delivery %d: %d, want 200", s, code)
				}
			}
		})
	}
}

// TestItemsStoreCalls counts the store calls of a 1,000-item batch on
// every store. A BatchStore (SQLite, Redis, PostgreSQL) claims every item
// in one call; memory, in-process, claims each on its own. Mode filter
// stores the answer of all in one call too; a copy of the batch then
// costs one call, the claim that finds every item done.
func TestItemsStoreCalls(t *testing.T) {
	const n = 1000
	ids := make([]string, n)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.new(t)
			_, batched := store.(idemhook.BatchStore)
			var mu sync.Mutex
			calls := map[string]int{}
			mw, err := idemhook.New(store, idemhook.Options{
				StoreTimeout: 30 * time.Second,
				OnStoreCall: func(c idemhook.StoreCallInfo) {
					mu.Lock()
					calls[c.Op]++
					mu.Unlock()
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			route, err := mw.Route(idemhook.Route{Source: "meta", Items: &idemhook.Items{Paths: whatsAppItems.Paths, Mode: idemhook.ItemsFilter}, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			backend := &itemsBackend{runs: map[string]int{}, failing: map[string]bool{}}
			srv := httptest.NewServer(route(backend))
			defer srv.Close()
			prefix := fmt.Sprintf("wamid.k%d.", time.Now().UnixNano())
			for i := range ids {
				ids[i] = fmt.Sprintf("%s%04d", prefix, i)
			}
			body := gatewaytest.WhatsAppBatch(ids, 100)
			for round, want := range []map[string]int{
				{"claim": 1, "complete": 1}, // the batch: claimed and completed in one call each
				{"claim": 1},                // a copy: one claim call finds all done
			} {
				resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				mu.Lock()
				got := calls
				calls = map[string]int{}
				mu.Unlock()
				if !batched {
					want = map[string]int{"claim": n}
					if round == 0 {
						want["complete"] = n
					}
				}
				if resp.StatusCode != http.StatusOK || fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("round %d: %d, store calls %v, want %v", round, resp.StatusCode, got, want)
				}
				t.Logf("round %d: store calls %v for %d items (BatchStore: %v)", round, got, n, batched)
			}
			if runs, calls := backend.take(); len(runs) != n || calls != 1 {
				t.Errorf("%d items ran in %d requests, want %d in 1", len(runs), calls, n)
			}
		})
	}
}
