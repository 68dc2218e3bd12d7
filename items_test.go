package idemhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/storetest"
)

// sendGridItems: SendGrid's Event Webhook posts an array of events, each
// with its sg_event_id.
var sendGridItems = &idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "sg_event_id"}}}

// events is a SendGrid-shaped body of the given event ids.
func events(ids ...string) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf(`{"email":"a@example.com","event":"delivered","sg_event_id":%q}`, id))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// itemHandler records the event ids of each request it gets, and what the
// Batch in its context says, and answers as answer says (default 200).
type itemHandler struct {
	mu       sync.Mutex
	requests [][]string // the ids of each request, in order
	batches  [][]string // the keys BatchFromContext gave each request
	answer   func(w http.ResponseWriter, r *http.Request, ids []string) bool
}

func (h *itemHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var evs []struct {
		ID string `json:"sg_event_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&evs); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ids, keys []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	if b, ok := idemhook.BatchFromContext(r.Context()); ok {
		for _, it := range b.Items() {
			keys = append(keys, it.Key)
		}
	}
	h.mu.Lock()
	h.requests = append(h.requests, ids)
	h.batches = append(h.batches, keys)
	answer := h.answer
	h.mu.Unlock()
	if answer != nil && answer(w, r, ids) {
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *itemHandler) take() (requests, batches [][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	requests, batches, h.requests, h.batches = h.requests, h.batches, nil, nil
	return requests, batches
}

func TestItemsSplit(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &itemHandler{}
	route := e.route(idemhook.Route{Source: "sendgrid", Items: sendGridItems}, h)

	rec := send(route, events("a", "b", "c"))
	if rec.Code != http.StatusOK || rec.Header().Get(idemhook.ReplayedHeader) != "" || rec.Body.Len() != 0 {
		t.Fatalf("first delivery: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	requests, batches := h.take()
	if fmt.Sprint(requests) != "[[a] [b] [c]]" || fmt.Sprint(batches) != "[[a] [b] [c]]" {
		t.Fatalf("requests %v, batches %v: want one per event, each with its own Batch", requests, batches)
	}
	d := e.deliveries[len(e.deliveries)-1]
	if d.Outcome != idemhook.OutcomeProcessed || *d.Items != (idemhook.ItemsInfo{Total: 3, Processed: 3}) || d.StoreKey != "idem:sendgrid:a" {
		t.Fatalf("report: %s %+v %s", d.Outcome, d.Items, d.StoreKey)
	}

	// The provider appends new events to old ones on its retries: each
	// event reaches the handler once, over three retries.
	for retry, tc := range []struct{ body, want string }{
		{events("a", "b", "c", "d"), "[[d]]"},
		{events("b", "d", "e", "f"), "[[e] [f]]"},
		{events("a", "c", "e", "f", "g"), "[[g]]"},
	} {
		send(route, tc.body)
		if requests, _ = h.take(); fmt.Sprint(requests) != tc.want {
			t.Fatalf("retry %d: requests %v, want %s", retry+1, requests, tc.want)
		}
	}

	// Every event done: a replay, whatever the grouping.
	rec = send(route, events("g", "a", "e"))
	if rec.Code != http.StatusOK || rec.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("all done: %d replayed %q", rec.Code, rec.Header().Get(idemhook.ReplayedHeader))
	}
	if requests, _ = h.take(); len(requests) != 0 {
		t.Fatalf("all done: the handler got %v", requests)
	}
}

// A handler that fails an item (Batch.Fail, or a non-2xx for its request)
// has only that item released: the retry runs it and nothing else.
func TestItemsFail(t *testing.T) {
	for _, mode := range []idemhook.ItemsMode{idemhook.ItemsSplit, idemhook.ItemsFilter} {
		t.Run(string(mode), func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			h := &itemHandler{}
			items := *sendGridItems
			items.Mode = mode
			route := e.route(idemhook.Route{Source: "sendgrid", Items: &items}, h)
			h.answer = func(w http.ResponseWriter, r *http.Request, ids []string) bool {
				b, _ := idemhook.BatchFromContext(r.Context())
				for i, id := range ids {
					if id == "b" {
						if err := b.Fail(i); err != nil {
							t.Error(err)
						}
					}
				}
				if err := b.Fail(len(ids)); err == nil {
					t.Error("Fail out of range: no error")
				}
				return false // and answer 200 for the rest
			}
			rec := send(route, events("a", "b", "c"))
			if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "1 of the 3 items of this delivery failed") {
				t.Fatalf("with b failed: %d %s", rec.Code, rec.Body)
			}
			if d := e.deliveries[len(e.deliveries)-1]; d.Outcome != idemhook.OutcomeFailedReleased || *d.Items != (idemhook.ItemsInfo{Total: 3, Processed: 2, Failed: 1}) {
				t.Fatalf("report: %s %+v", d.Outcome, d.Items)
			}
			h.take()
			h.answer = nil
			if rec := send(route, events("c", "b", "a")); rec.Code != http.StatusOK {
				t.Fatalf("retry: %d %s", rec.Code, rec.Body)
			}
			if requests, _ := h.take(); fmt.Sprint(requests) != "[[b]]" {
				t.Fatalf("retry: requests %v, want only b", requests)
			}
		})
	}
}

// Mode filter: one request with every new item, in the provider's
// envelope; its answer is the answer of all of them.
func TestItemsFilter(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &itemHandler{}
	items := *sendGridItems
	items.Mode = idemhook.ItemsFilter
	route := e.route(idemhook.Route{Source: "sendgrid", Items: &items}, h)
	send(route, events("a", "b"))
	h.answer = func(w http.ResponseWriter, _ *http.Request, _ []string) bool {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	}
	rec := send(route, events("a", "b", "c", "d"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("a failed request: %d, want the handler's 503", rec.Code)
	}
	h.answer = nil
	send(route, events("d", "c", "b"))
	requests, batches := h.take()
	if fmt.Sprint(requests) != "[[a b] [c d] [d c]]" || fmt.Sprint(batches) != "[[a b] [c d] [d c]]" {
		t.Fatalf("requests %v, batches %v", requests, batches)
	}
}

// A body of one item is a delivery of one event: the handler gets it as
// sent and the provider its answer, under the item's key, which a batch
// holding the item later finds done.
func TestItemsOne(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{status: http.StatusCreated}
	route := e.route(idemhook.Route{Source: "sendgrid", Items: sendGridItems}, h)
	rec := send(route, events("a"))
	if rec.Code != http.StatusCreated || rec.Body.String() != `{"execution":1}` {
		t.Fatalf("one item: %d %s, want the handler's own answer", rec.Code, rec.Body)
	}
	if d := e.deliveries[0]; d.StoreKey != "idem:sendgrid:a" || d.Items != nil {
		t.Fatalf("one item: key %s, items %+v", d.StoreKey, d.Items)
	}
	if rec := send(route, events("a", "b")); rec.Code != http.StatusOK || h.n.Load() != 2 {
		t.Fatalf("a batch with it: %d, %d runs; want only b to run", rec.Code, h.n.Load())
	}
}

// Content of the body outside every item (an element on an item path that
// holds none) goes with the first request, once.
func TestItemsLooseContent(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var mu sync.Mutex
	var bodies []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
	})
	route := e.route(idemhook.Route{Source: "meta", Items: &idemhook.Items{Paths: []idemhook.ItemPath{{Path: "entry[*].messages[*]", Key: "id"}}}}, h)
	send(route, `{"entry":[{"messages":[{"id":"m1"},{"id":"m2"}]},{"account":"verified"}]}`)
	want := []string{`{"entry":[{"messages":[{"id":"m1"}]},{"account":"verified"}]}`, `{"entry":[{"messages":[{"id":"m2"}]}]}`}
	if !slices.Equal(bodies, want) {
		t.Fatalf("bodies %q, want %q", bodies, want)
	}
}

// A handler that panics on an item releases every claim the delivery
// still holds: the retry runs the items not done.
func TestItemsPanic(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &itemHandler{}
	route := e.route(idemhook.Route{Source: "sendgrid", Items: sendGridItems}, h)
	h.answer = func(w http.ResponseWriter, r *http.Request, ids []string) bool {
		if ids[0] == "b" {
			panic("boom")
		}
		return false
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		send(route, events("a", "b", "c"))
	}()
	if d := e.deliveries[len(e.deliveries)-1]; d.Outcome != idemhook.OutcomeFailedReleased {
		t.Fatalf("outcome %s", d.Outcome)
	}
	h.take()
	h.answer = nil
	send(route, events("a", "b", "c"))
	if requests, _ := h.take(); fmt.Sprint(requests) != "[[b] [c]]" {
		t.Fatalf("retry: %v, want b and c (a is done)", requests)
	}
}

// A preset's success answer is the batch's, and its duplicate status the
// replay's.
func TestItemsPresetAnswer(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	p := &idemhook.Preset{Name: "batcher", Items: sendGridItems, SuccessStatus: http.StatusOK, SuccessBody: "[accepted]", DuplicateStatus: http.StatusAccepted}
	route := e.route(idemhook.Route{Source: "batcher", Preset: p}, &itemHandler{})
	rec := send(route, events("a", "b"))
	if rec.Code != http.StatusOK || rec.Body.String() != "[accepted]" || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("first: %d %q %q", rec.Code, rec.Body, rec.Header().Get("Content-Type"))
	}
	rec = send(route, events("b", "a"))
	if rec.Code != http.StatusAccepted || rec.Body.String() != "[accepted]" || rec.Header().Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %q", rec.Code, rec.Body)
	}
}

// A body that is not JSON, or holds no item, is one event.
func TestItemsNone(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "sendgrid", Items: sendGridItems}, h)
	for _, body := range []string{`not json`, `[]`, `{"sg_event_id":"x"}`} {
		send(route, body)
		if rec := send(route, body); rec.Header().Get(idemhook.ReplayedHeader) != "true" {
			t.Errorf("%s: the copy was not replayed", body)
		}
	}
	if h.n.Load() != 3 {
		t.Fatalf("%d runs, want 3", h.n.Load())
	}
}

func TestItemsRouteErrors(t *testing.T) {
	for _, tt := range []struct {
		items idemhook.Items
		want  string
	}{
		{idemhook.Items{}, "Items has no Paths"},
		{idemhook.Items{Paths: []idemhook.ItemPath{{Path: "entry.id", Key: "id"}}}, `Items.Paths[0].Path "entry.id": it must end in "[*]"`},
		{idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: ""}}}, `Items.Paths[0].Key "": empty`},
		{idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "{a}{b"}}}, `a '{' without its '}'`},
		{idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "id"}}, Mode: "each"}, `Items.Mode "each" is not one of split, filter`},
		{idemhook.Items{Paths: []idemhook.ItemPath{{Path: "a[*]", Key: "id"}, {Path: "a[*].b[*]", Key: "id"}}}, `a path leads into the items of "a[*]"`},
	} {
		err := idemhook.Route{Source: "s", Items: &tt.items}.Validate()
		var re *idemhook.RouteError
		if !errors.As(err, &re) || re.Field != "Items" || !strings.Contains(re.Reason, tt.want) {
			t.Errorf("%+v: %v, want a RouteError on Items with %q", tt.items, err, tt.want)
		}
	}
}

// A store that is down: policy open runs the whole body once, unprotected,
// as for one event; policy closed answers 503 and runs nothing.
func TestItemsStoreDown(t *testing.T) {
	for _, policy := range []idemhook.StoreErrorPolicy{idemhook.StoreErrorOpen, idemhook.StoreErrorClosed} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(t, storetest.Unreachable(errors.New("connection refused")), nil, idemhook.Options{})
			h := &itemHandler{}
			route := e.route(idemhook.Route{Source: "sendgrid", Items: sendGridItems, OnStoreError: policy}, h)
			rec := send(route, events("a", "b"))
			requests, _ := h.take()
			d := e.deliveries[len(e.deliveries)-1]
			switch policy {
			case idemhook.StoreErrorOpen:
				if rec.Code != http.StatusOK || fmt.Sprint(requests) != "[[a b]]" || d.Outcome != idemhook.OutcomeStoreErrorOpen {
					t.Fatalf("open: %d, requests %v, outcome %s", rec.Code, requests, d.Outcome)
				}
			case idemhook.StoreErrorClosed:
				if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || len(requests) != 0 || d.Outcome != idemhook.OutcomeStoreErrorClosed {
					t.Fatalf("closed: %d, requests %v, outcome %s", rec.Code, requests, d.Outcome)
				}
			}
		})
	}
}

// A provider that hangs up mid-batch: the items not yet run are released
// at once (not left pending for a lease), and its retry runs them.
func TestItemsSenderGone(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &itemHandler{}
	route := e.route(idemhook.Route{Source: "sendgrid", Items: sendGridItems, WaitTimeout: time.Millisecond}, h)
	ctx, cancel := context.WithCancel(context.Background())
	h.answer = func(w http.ResponseWriter, r *http.Request, ids []string) bool {
		if ids[0] == "b" {
			cancel() // the provider hangs up while b runs; b still answers
		}
		return false
	}
	req := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(events("a", "b", "c", "d")))
	route.ServeHTTP(httptest.NewRecorder(), req.WithContext(ctx))
	if requests, _ := h.take(); fmt.Sprint(requests) != "[[a] [b]]" {
		t.Fatalf("before the hang-up: %v", requests)
	}
	if d := e.deliveries[len(e.deliveries)-1]; d.Outcome != idemhook.OutcomeFailedReleased || *d.Items != (idemhook.ItemsInfo{Total: 4, Processed: 2, Failed: 2}) {
		t.Fatalf("report: %s %+v", d.Outcome, d.Items)
	}
	h.answer = nil
	// c and d were released, not left pending: the retry runs them now
	// (a pending claim would make it wait, then answer 409).
	if rec := send(route, events("a", "b", "c", "d")); rec.Code != http.StatusOK {
		t.Fatalf("retry: %d %s", rec.Code, rec.Body)
	}
	if requests, _ := h.take(); fmt.Sprint(requests) != "[[c] [d]]" {
		t.Fatalf("retry: %v, want c and d", requests)
	}
}
