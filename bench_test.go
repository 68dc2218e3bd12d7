package idemhook_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// webhookHandler is a typical small webhook handler: it reads the body and
// answers a short JSON document.
var webhookHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) //nolint:errcheck
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}`)) //nolint:errcheck
})

// eventBody returns a Stone-like body; every n gives a different event.
func eventBody(n int64) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"id":"evt_`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, `","type":"payment.succeeded","data":{"amount":1000,"currency":"BRL","customer":"cus_123"}}`...)
	return b
}

func benchMiddleware(b *testing.B) http.Handler {
	return benchRoute(b, idemhook.Route{Source: "stone"})
}

// benchRoute is webhookHandler behind rt on a memory store.
func benchRoute(b *testing.B, rt idemhook.Route) http.Handler {
	b.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		b.Fatal(err)
	}
	route, err := mw.Route(rt)
	if err != nil {
		b.Fatal(err)
	}
	return route(webhookHandler)
}

// discardWriter is a minimal ResponseWriter, so that the in-process
// benchmarks measure the middleware rather than httptest.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// serveInProcess runs h with one request per iteration, body from next.
//
// Each iteration's request is a copy of one parsed per goroutine, with a
// fresh body, rather than a new httptest.NewRequest: parsing a request with
// it takes 10 allocations (and two 4 KiB bufio readers) that net/http's
// server spends on every request, bare handler or middleware, and that
// would only blur the middleware's own cost.
func serveInProcess(b *testing.B, h http.Handler, next func() []byte) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: http.Header{}}
		parsed := httptest.NewRequest(http.MethodPost, "/webhooks/stone", nil)
		req := new(http.Request)
		body := &benchBody{}
		for pb.Next() {
			b := next()
			*req = *parsed // the middleware replaces Body, ContentLength and GetBody
			body.Reset(b)
			req.Body, req.ContentLength = body, int64(len(b))
			clear(w.h)
			h.ServeHTTP(w, req)
		}
	})
}

// benchBody is a request body that serveInProcess reuses.
type benchBody struct{ bytes.Reader }

func (*benchBody) Close() error { return nil }

// BenchmarkInProcess compares a bare handler with the same handler behind the
// middleware and the memory store, calling ServeHTTP directly: the figures are
// the middleware's own cost.
func BenchmarkInProcess(b *testing.B) {
	var seq atomic.Int64
	fresh := func() []byte { return eventBody(seq.Add(1)) }
	same := eventBody(0)
	one := func() []byte { return same }

	b.Run("bare", func(b *testing.B) { serveInProcess(b, webhookHandler, fresh) })
	b.Run("memory/first", func(b *testing.B) { serveInProcess(b, benchMiddleware(b), fresh) })
	b.Run("memory/replay", func(b *testing.B) {
		h := benchMiddleware(b)
		serveInProcess(b, h, one) // the first iteration stores, every other replays
	})
}

// BenchmarkLoopback compares the same handlers behind a real HTTP server on
// loopback, with keep-alive clients: the throughput ratio a service sees.
func BenchmarkLoopback(b *testing.B) {
	var seq atomic.Int64
	fresh := func() []byte { return eventBody(seq.Add(1)) }
	same := eventBody(0)
	one := func() []byte { return same }

	run := func(b *testing.B, h http.Handler, next func() []byte) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := client.Post(srv.URL, "application/json", bytes.NewReader(next()))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body) //nolint:errcheck
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	b.Run("bare", func(b *testing.B) { run(b, webhookHandler, fresh) })
	b.Run("memory/first", func(b *testing.B) { run(b, benchMiddleware(b), fresh) })
	b.Run("memory/replay", func(b *testing.B) { run(b, benchMiddleware(b), one) })
}

func BenchmarkBodyKeySmallEvent(b *testing.B) {
	body := eventBody(42)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		idemhook.BodyKey(body)
	}
}

// BenchmarkBigBody measures what a large request body costs the middleware:
// the bytes it allocates per delivery, against the body's own size
// ("x-body": 1 means the body was held once and not copied). "sized" sends a
// Content-Length, "chunked" doesn't (the buffer then follows the bytes as they
// arrive).
func BenchmarkBigBody(b *testing.B) {
	const size = 8 << 20
	payload := bytes.Repeat([]byte("x"), size-len(`{"id":"evt_","pad":""}`)-20)
	var seq atomic.Int64
	next := func() []byte {
		return []byte(`{"id":"evt_` + strconv.FormatInt(seq.Add(1), 10) + `","pad":"` + string(payload) + `"}`)
	}
	for _, tt := range []struct {
		name  string
		sized bool
	}{{"sized", true}, {"chunked", false}} {
		b.Run(tt.name, func(b *testing.B) {
			h := benchRoute(b, idemhook.Route{Source: "big", MaxBodyBytes: 16 << 20})
			bodies := make([][]byte, b.N)
			for i := range bodies {
				bodies[i] = next()
			}
			w := &discardWriter{h: http.Header{}}
			parsed := httptest.NewRequest(http.MethodPost, "/webhooks/big", nil)
			req := new(http.Request)
			body := &benchBody{}
			b.ReportAllocs()
			b.SetBytes(int64(len(bodies[0])))
			b.ResetTimer()
			for i := range b.N {
				*req = *parsed
				body.Reset(bodies[i])
				req.Body, req.ContentLength = body, -1
				if tt.sized {
					req.ContentLength = int64(len(bodies[i]))
				}
				clear(w.h)
				h.ServeHTTP(w, req)
			}
		})
	}
}
