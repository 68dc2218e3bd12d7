package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/idemhook/idemhook/memstore"
)

func init() { gin.SetMode(gin.TestMode) }

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
	return answer{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"}
}

// server runs the receiver with a handler that counts its executions per
// event id and answers status for the first fail of them.
func server(t *testing.T, fail int) (*httptest.Server, func(id string) int64) {
	t.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
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
	r, err := newRouter(store, func(c *gin.Context) {
		var event struct {
			ID string `json:"id"`
		}
		if err := c.ShouldBindJSON(&event); err != nil { // the body reaches the handler intact
			c.JSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		n := count(event.ID).Add(1)
		if n <= int64(fail) {
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "database down"})
			return
		}
		c.JSON(http.StatusOK, gin.H{"received": event.ID, "run": n})
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, func(id string) int64 { return count(id).Load() }
}

func TestDeliveredTwiceRunsOnce(t *testing.T) {
	srv, runs := server(t, 0)
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
	srv, runs := server(t, 0)
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

func TestFailureReleasesTheClaim(t *testing.T) {
	srv, runs := server(t, 1) // the first run fails with 500
	results := []answer{send(t, srv.URL, `{"id":"evt_3"}`), send(t, srv.URL, `{"id":"evt_3"}`), send(t, srv.URL, `{"id":"evt_3"}`)}
	want := []answer{
		{500, `{"error":"database down"}`, false},
		{200, `{"received":"evt_3","run":2}`, false}, // the retry runs again
		{200, `{"received":"evt_3","run":2}`, true},
	}
	for i := range want {
		if results[i] != want[i] {
			t.Errorf("delivery %d = %+v, want %+v", i+1, results[i], want[i])
		}
	}
	if got := runs("evt_3"); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
}

func ExampleIdempotent() {
	store, _ := memstore.New(memstore.Config{})
	runs := 0
	r, _ := newRouter(store, func(c *gin.Context) {
		runs++
		c.String(http.StatusOK, "processed %d", runs)
	})
	for range 2 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/stone", strings.NewReader(`{"id":"evt_1"}`)))
		fmt.Println(rec.Code, rec.Body.String(), "replayed:", rec.Header().Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("runs:", runs)
	// Output:
	// 200 processed 1 replayed: false
	// 200 processed 1 replayed: true
	// runs: 1
}

// A handler that sets only a status (no body) has it sent and replayed.
func TestStatusOnlyAnswer(t *testing.T) {
	store, _ := memstore.New(memstore.Config{})
	var runs atomic.Int64
	r, err := newRouter(store, func(c *gin.Context) {
		runs.Add(1)
		c.Status(http.StatusAccepted)
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	defer srv.Close()
	first, again := send(t, srv.URL, `{"id":"evt_4"}`), send(t, srv.URL, `{"id":"evt_4"}`)
	if first != (answer{202, "", false}) || again != (answer{202, "", true}) || runs.Load() != 1 {
		t.Errorf("answers %+v, %+v after %d runs; want 202 twice (the second replayed) after 1", first, again, runs.Load())
	}
}
