package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/config"
)

// A program embeds the gateway in its own http.Server, beside routes of its
// own, with a configuration built in Go rather than read from YAML. The
// provider's retry of an event gets the first answer back, and the backend
// runs once.
func Example() {
	// The backend the route forwards to: it counts the events it runs.
	var runs atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "order accepted (run %d)\n", runs.Add(1))
	}))
	defer backend.Close()
	upstream, err := url.Parse(backend.URL + "/orders")
	if err != nil {
		log.Fatal(err)
	}

	// What a configuration file would say, with the values the file's
	// defaults would give.
	cfg := &config.Config{
		Store:           config.Store{Driver: "memory"},
		Audit:           config.Audit{Sink: "none"},
		ShutdownTimeout: 10 * time.Second,
		Routes: []config.Route{{
			Path:            "/webhooks/orders",
			Upstream:        upstream,
			UpstreamTimeout: 30 * time.Second,
			Route: idemhook.Route{
				Source:       "orders",
				Header:       "Idempotency-Key",
				TTL:          24 * time.Hour,
				InFlight:     idemhook.InFlightReject,
				OnStoreError: idemhook.StoreErrorOpen,
			},
		}},
	}
	g, err := gateway.New(context.Background(), cfg, gateway.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(context.Background())

	// The program's own mux: the gateway's routes and one of its own.
	mux := http.NewServeMux()
	mux.Handle("/webhooks/", g.Handler())
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := &http.Server{
		Handler:     mux,
		BaseContext: func(net.Listener) context.Context { return g.Context() },
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	send := func(method, path, key string) {
		req, err := http.NewRequest(method, "http://"+ln.Addr().String()+path, strings.NewReader(`{"order":42}`))
		if err != nil {
			log.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("%s %d replayed=%q %s", path, resp.StatusCode, resp.Header.Get(idemhook.ReplayedHeader), body)
	}
	send("POST", "/webhooks/orders", "evt_1")
	send("POST", "/webhooks/orders", "evt_1") // the provider's retry
	send("GET", "/hello", "")
	fmt.Println("backend runs:", runs.Load())
	// Output:
	// /webhooks/orders 200 replayed="" order accepted (run 1)
	// /webhooks/orders 200 replayed="true" order accepted (run 1)
	// /hello 200 replayed="" hello
	// backend runs: 1
}
