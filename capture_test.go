package idemhook_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// net/http panics on a status outside 100-999 when the handler calls
// WriteHeader. The capture must do the same, inside the handler, so that the
// claim is released; before, the bad status was stored first, the panic came
// when the buffered response was sent, and the stored record (status 42)
// was "corrupt" to every retry for the whole TTL.
func TestInvalidStatusPanicsInTheHandlerAndIsReleased(t *testing.T) {
	for _, code := range []int{0, 42, 1000} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			var calls atomic.Int64
			route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.WriteHeader(code)
					return
				}
				io.WriteString(w, "ok") //nolint:errcheck
			}))
			func() {
				defer func() {
					p := recover()
					if p == nil || !strings.Contains(fmt.Sprint(p), "invalid WriteHeader code") {
						t.Fatalf("recovered %v, want net/http's invalid WriteHeader code panic", p)
					}
				}()
				send(route, `{"id":1}`)
			}()
			if r := send(route, `{"id":1}`); r.Code != 200 || r.Body.String() != "ok" {
				t.Fatalf("retry: %d %q", r.Code, r.Body)
			}
			if strings.Contains(e.logs.String(), "parse error") || strings.Contains(e.logs.String(), "cache write failed") {
				t.Fatalf("unexpected WARN:\n%s", e.logs)
			}
			wantOutcomes(t, e, idemhook.OutcomeFailedReleased, idemhook.OutcomeProcessed)
		})
	}
}

// A handler that hijacks the connection (through http.ResponseController)
// answers on the raw connection: the middleware never sees that answer, so
// it must neither write after it nor store a response that was never sent.
// Before, it stored "200, empty body" and replayed that to every retry.
func TestHijackingHandlerReleasesTheClaim(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	var calls atomic.Int64
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked") //nolint:errcheck
			brw.Flush()                                                                                        //nolint:errcheck
			return
		}
		io.WriteString(w, "second") //nolint:errcheck
	}))
	srv := httptest.NewServer(route)
	t.Cleanup(srv.Close)
	post := func() (int, string, string) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"id":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get(idemhook.ReplayedHeader)
	}
	if code, body, _ := post(); code != 202 || body != "hijacked" {
		t.Fatalf("first: %d %q", code, body)
	}
	// The hijacked response reaches the client before the handler returns
	// and the claim is released (nothing can order them), and
	// httptest.Server.Close doesn't wait for hijacked connections: wait for
	// the first delivery's outcome, which comes after the release.
	deadline := time.Now().Add(10 * time.Second)
	for len(e.outcomes()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hijacked delivery reported no outcome within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if got := e.outcomes(); got[0] != idemhook.OutcomeFailedReleased {
		t.Fatalf("outcome of the hijacked delivery: %v, want failed_released", got[0])
	}
	if code, body, replayed := post(); code != 200 || body != "second" || replayed != "" {
		t.Fatalf("retry: %d %q replayed=%q: want the handler to run afresh", code, body, replayed)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	if got := e.outcomes(); len(got) != 2 || got[1] != idemhook.OutcomeProcessed {
		t.Fatalf("outcomes %v, want [failed_released processed]", got)
	}
}

// Where the connection can't be hijacked (here a ResponseRecorder, in
// production HTTP/2) the attempt fails with http.ErrNotSupported and the
// response is stored and replayed as usual.
func TestFailedHijackChangesNothing(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "a") //nolint:errcheck
		if _, _, err := http.NewResponseController(w).Hijack(); !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("hijack: %v, want http.ErrNotSupported", err)
		}
		io.WriteString(w, "b") //nolint:errcheck
		h.n.Add(1)
	}))
	for i := range 2 {
		if r := send(route, `{"id":1}`); r.Code != http.StatusCreated || r.Body.String() != "ab" {
			t.Fatalf("delivery %d: %d %q", i, r.Code, r.Body)
		}
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	wantOutcomes(t, e, idemhook.OutcomeProcessed, idemhook.OutcomeReplayed)
}

// An informational status written after the final one is superfluous and
// net/http drops it. While the final status is only buffered, the capture
// passed such a 1xx straight to the client, which then saw a 103 before
// the answer that, as far as the handler knew, had already started.
func TestInformationalAfterTheFinalStatusIsDropped(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	route := e.route(idemhook.Route{Source: "stone"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints) // before the final status: sent
		w.WriteHeader(http.StatusAccepted)
		w.WriteHeader(http.StatusEarlyHints) // after it: dropped
		io.WriteString(w, "ok")              //nolint:errcheck
	}))
	srv := httptest.NewServer(route)
	t.Cleanup(srv.Close)
	var got []int
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			got = append(got, code)
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || fmt.Sprint(got) != "[103]" {
		t.Fatalf("status %d, informational responses %v; want 202 after one 103", resp.StatusCode, got)
	}
}
