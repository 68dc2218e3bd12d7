// Package testgw runs a gateway in the test's process, the way a program
// embeds it: package gateway over the listeners of a configuration file.
package testgw

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/gateway/storeurl"
	"github.com/idemhook/idemhook/internal/syncbuf"
)

// Gateway is a gateway serving on the listen and admin.listen addresses of
// its file (127.0.0.1:0: a free port).
type Gateway struct {
	Listen, Admin string          // the bound addresses; Admin "" when off
	Log           *syncbuf.Buffer // the gateway's log
}

// URL returns the gateway URL of path.
func (g *Gateway) URL(path string) string { return "http://" + g.Listen + path }

// AdminURL returns the admin URL of path.
func (g *Gateway) AdminURL(path string) string { return "http://" + g.Admin + path }

// Start runs the gateway of the file configPath, getenv reading its
// variables (nil: none set), until the test ends.
func Start(t *testing.T, configPath string, getenv func(string) string) *Gateway {
	t.Helper()
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg, err := config.Load(configPath, getenv, config.WithURLChecker(storeurl.Checker{}))
	if err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{}
	logger := cfg.Log.NewLogger(out)
	g, err := gateway.New(t.Context(), cfg, gateway.Options{Logger: logger, Getenv: getenv})
	if err != nil {
		t.Fatalf("gateway did not start: %v\nlog:\n%s", err, out)
	}
	// Closed after the servers shut down: cleanups run last registered
	// first.
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("gateway close: %v\nlog:\n%s", err, out)
		}
	})
	tg := &Gateway{Log: out}
	tg.Listen = serve(t, cfg.Listen, &http.Server{
		Handler:     g.Handler(),
		BaseContext: func(net.Listener) context.Context { return g.Context() },
	})
	if cfg.Admin.Listen != "" {
		tg.Admin = serve(t, cfg.Admin.Listen, &http.Server{Handler: g.AdminHandler()})
	}
	return tg
}

// serve serves srv on addr until the test ends and returns the bound
// address.
func serve(t *testing.T, addr string, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return ln.Addr().String()
}
