package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhook/idemhook/memstore"
	"github.com/labstack/echo/v4"
)

type answer struct {
	status   int
	body     string
	replayed bool
}

func send(t *testing.T, url, body string) answer {
	t.Helper()
	resp, err := http.Post(url+"/webhooks/stone", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Idempotent-Replayed") == "true"}
}

// server runs the receiver with a handler that counts its executions per
// event id and fails the first fail of them, returning err.
func server(t *testing.T, fail int, err error) (*httptest.Server, func(id string) int64) {
	t.Helper()
	store, serr := memstore.New(memstore.Config{})
	if serr != nil {
		t.Fatal(serr)
	}
	var mu sync.Mutex
	runs := map[string]*atomic.Int64{}
	count := func(id string) *atomic.Int64 {
		mu.Lock()
		defer mu.Unlock()
		if runs[id] == nil {
			runs[id] = &atomic.Int64{}
		}
		return runs[id]
	}
	e, serr := newServer(store, func(c echo.Context) error {
		var event struct {
			ID string `json:"id"`
		}
		if err := c.Bind(&event); err != nil { // the body reaches the handler intact
			return err
		}
		n := count(event.ID).Add(1)
		if n <= int64(fail) {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"received": event.ID, "run": n})
	})
	if serr != nil {
		t.Fatal(serr)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, func(id string) int64 { return count(id).Load() }
}

func TestDeliveredTwiceRunsOnce(t *testing.T) {
	srv, runs := server(t, 0, nil)
	first := send(t, srv.URL, `{"id":"evt_1"}`)
	again := send(t, srv.URL, `{ "id": "evt_1" }`) // the same event, re-serialized
	if got := runs("evt_1"); got != 1 {
		t.Errorf("handler ran %d times for evt_1, want 1", got)
	}
	want := answer{200, `{"received":"evt_1","run":1}`, false}
	if first != want {
		t.Errorf("first delivery = %+v, want %+v", first, want)
	}
	want.replayed = true
	if again != want {
		t.Errorf("re-delivery = %+v, want %+v", again, want)
	}
}

func TestConcurrentCopiesRunOnce(t *testing.T) {
	srv, runs := server(t, 0, nil)
	const copies = 20
	var wg sync.WaitGroup
	answers := make([]answer, copies)
	for i := range copies {
		wg.Go(func() { answers[i] = send(t, srv.URL, `{"id":"evt_2"}`) })
	}
	wg.Wait()
	if got := runs("evt_2"); got != 1 {
		t.Errorf("handler ran %d times for %d concurrent copies, want 1", got, copies)
	}
	replayed := 0
	for _, a := range answers {
		if a.status != 200 || a.body != `{"received":"evt_2","run":1}` {
			t.Errorf("answer %+v, want the first one's", a)
		}
		if a.replayed {
			replayed++
		}
	}
	if replayed != copies-1 {
		t.Errorf("%d replayed answers, want %d", replayed, copies-1)
	}
}

// A returned error is answered inside the middleware, with an
// echo.HTTPError's status or 500 for any other error. Both release the
// claim.
func TestReturnedErrorReleasesTheClaim(t *testing.T) {
	tests := []struct {
		give       error
		wantStatus int
	}{
		{echo.NewHTTPError(http.StatusServiceUnavailable, "database down"), 503},
		{errors.New("database down"), 500},
	}
	for _, tt := range tests {
		srv, runs := server(t, 1, tt.give)
		a, b, c := send(t, srv.URL, `{"id":"evt_3"}`), send(t, srv.URL, `{"id":"evt_3"}`), send(t, srv.URL, `{"id":"evt_3"}`)
		if a.status != tt.wantStatus || a.replayed {
			t.Errorf("%v: first delivery %+v, want status %d", tt.give, a, tt.wantStatus)
		}
		ok := answer{200, `{"received":"evt_3","run":2}`, false}
		if b != ok {
			t.Errorf("%v: retry %+v, want %+v (run again)", tt.give, b, ok)
		}
		ok.replayed = true
		if c != ok {
			t.Errorf("%v: second retry %+v, want %+v", tt.give, c, ok)
		}
		if got := runs("evt_3"); got != 2 {
			t.Errorf("%v: handler ran %d times, want 2", tt.give, got)
		}
	}
}

func ExampleIdempotent() {
	store, _ := memstore.New(memstore.Config{})
	runs := 0
	e, _ := newServer(store, func(c echo.Context) error {
		runs++
		return c.String(http.StatusOK, fmt.Sprintf("processed %d", runs))
	})
	for range 2 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(`{"id":"evt_1"}`)))
		fmt.Println(rec.Code, rec.Body.String(), "replayed:", rec.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("runs:", runs)
	// Output:
	// 200 processed 1 replayed: false
	// 200 processed 1 replayed: true
	// runs: 1
}
