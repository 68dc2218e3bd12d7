package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
)

// newLogger returns the logger of the gateway, writing to w.
func newLogger(lc config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level)) // checked by the config parser
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// gateway is a configured, not yet listening, gateway.
type gateway struct {
	cfg     *config.Config
	logger  *slog.Logger
	store   idemhook.Store
	mw      *idemhook.Middleware
	metrics *metrics
	audit   *auditTrail
	tracing *tracing     // nil: off
	handler http.Handler // the routes: g.routes, counted in g.inflight
	admin   http.Handler // the admin routes: g.adminRoutes
	res     resources

	// What a reload (SIGHUP) replaces: the routes and the admin handler
	// (its token), the TLS certificate and the shutdown bound. The store,
	// the audit sink and the listeners stay those of the start.
	routes          atomic.Pointer[http.Handler]
	adminRoutes     atomic.Pointer[http.Handler]
	cert            atomic.Pointer[tls.Certificate]
	shutdownTimeout atomic.Int64
	idle            []func() // closes the idle upstream connections of the routes in use
	bufs            httputil.BufferPool
	// inflight counts the requests inside the routes, so that the audit
	// recorder closes only after the last delivery recorded its entry.
	inflight sync.WaitGroup

	// base is the context deliveries and their upstream calls run under.
	// cutShort cancels it after the shutdown bound.
	base     context.Context
	cutShort context.CancelCauseFunc
}

// newGateway opens the store and the audit sink and builds the handlers.
// On error, everything opened so far is closed.
func newGateway(ctx context.Context, cfg *config.Config, logger *slog.Logger, now func() time.Time, tr *tracing) (_ *gateway, err error) {
	g := &gateway{cfg: cfg, logger: logger, metrics: newMetrics(), tracing: tr}
	g.base, g.cutShort = context.WithCancelCause(context.WithoutCancel(ctx))
	g.res.add(tr.shutdown) // closed late: flushes the spans of the last deliveries
	g.res.add(func() error { g.cutShort(nil); return nil })
	defer func() {
		if err != nil {
			g.res.close()
		}
	}()
	files := &sqliteFiles{rs: &g.res, logger: logger}
	g.store, err = openStore(ctx, cfg.Store, files, now, cfg.LongestLease())
	if err != nil {
		return nil, err
	}
	g.audit, err = openAudit(ctx, cfg, files, logger, g.metrics)
	if err != nil {
		return nil, err
	}
	routeOf := func(r *http.Request) string {
		if r == nil {
			return ""
		}
		return r.Pattern
	}
	g.mw, err = idemhook.New(g.store, g.tracing.instrument(idemhook.Options{
		Logger:       logger,
		Now:          now,
		StoreTimeout: cfg.Store.Timeout, // 0: the store's own default (SQLite's: 10s)
		OnDelivery: func(d idemhook.DeliveryInfo) {
			g.metrics.onDelivery(d)
			g.audit.record(routeOf(d.Request), d)
		},
		OnStoreCall:     g.metrics.onStoreCall,
		OnBreakerChange: g.metrics.onBreakerChange,
	}))
	if err != nil {
		return nil, err
	}
	g.bufs = newBufferPool()
	if err := g.apply(cfg); err != nil {
		return nil, err
	}
	g.res.add(func() error {
		for _, f := range g.idle {
			f()
		}
		return nil
	})
	g.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.inflight.Add(1)
		defer g.inflight.Done()
		(*g.routes.Load()).ServeHTTP(w, r)
	})
	g.admin = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*g.adminRoutes.Load()).ServeHTTP(w, r)
	})
	return g, nil
}

// apply builds the routes and the admin handler of cfg and puts them in
// service. Requests already running finish on the ones they started with.
func (g *gateway) apply(cfg *config.Config) error {
	mux := http.NewServeMux()
	var idle []func()
	for _, rc := range cfg.Routes {
		// The check refused, at the file's line, a source that routes share
		// without share_keys. Beyond those, every route shares its keys
		// with the route of its source in the configuration before a
		// reload, whose deliveries may still be running: on purpose.
		route := rc.Route
		route.ShareKeys = true
		wrap, err := g.mw.Route(route)
		if err != nil {
			// check ran the same checks (routeLimits): not reached.
			return config.Error{File: cfg.File, Line: rc.Line, Field: rc.Field, Msg: err.Error()}
		}
		tr := newTransport(rc.UpstreamTimeout)
		idle = append(idle, tr.CloseIdleConnections)
		rt := g.tracing.transport(timedTransport{next: tr, observe: g.metrics.upstreamObserver(rc.Path)})
		mux.Handle(rc.Path, g.tracing.handler(wrap(detach(g.base, newProxy(rc, rt, g.bufs, g.logger, cfg.TrustedProxies)))))
	}
	if !slices.ContainsFunc(cfg.Routes, func(rc config.Route) bool { return rc.Path == "/" }) {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			// The configuration file's location is not for the internet.
			writeProblem(w, http.StatusNotFound, "no route", fmt.Sprintf("no route for %s", r.URL.Path))
		})
	}
	if cfg.TLS.Cert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		g.cert.Store(&cert)
	}
	var routes http.Handler = mux
	admin := g.adminHandler(cfg.Admin.Token)
	g.routes.Store(&routes)
	g.adminRoutes.Store(&admin)
	g.audit.setRoutes(cfg.Routes)
	g.shutdownTimeout.Store(int64(cfg.ShutdownTimeout))
	old := g.idle
	g.idle = idle
	for _, f := range old {
		f() // connections in use are not idle: they finish first
	}
	return nil
}

// reload reads the configuration file again (SIGHUP). A valid file replaces
// the routes, their secrets and limits, the admin token, the TLS
// certificate and the shutdown bound, without closing a connection or
// stopping a delivery. An invalid one is logged with its errors, and the
// running configuration keeps serving. Settings only a restart can change
// are logged and kept.
func (g *gateway) reload(getenv func(string) string) {
	cfg, err := config.Load(g.cfg.File, getenv)
	if err != nil {
		g.logRefusal(err)
		return
	}
	for _, w := range cfg.Warnings {
		g.logger.Warn("idemhook configuration: " + w.Error())
	}
	var kept []string
	for _, s := range []struct {
		name string
		same bool
	}{
		{"listen", cfg.Listen == g.cfg.Listen},
		{"store", reflect.DeepEqual(cfg.Store, g.cfg.Store)},
		{"admin.listen", cfg.Admin.Listen == g.cfg.Admin.Listen},
		{"audit", cfg.Audit == g.cfg.Audit},
		{"log", cfg.Log == g.cfg.Log},
		{"tls (on or off)", (cfg.TLS.Cert == "") == (g.cfg.TLS.Cert == "")},
	} {
		if !s.same {
			kept = append(kept, s.name)
		}
	}
	if len(kept) > 0 {
		g.logger.Warn("idemhook reload: these settings change only with a restart; the running ones are kept", "settings", strings.Join(kept, ", "))
	}
	if err := g.apply(cfg); err != nil {
		g.logger.Error("idemhook reload refused; the running configuration keeps serving", "file", g.cfg.File, "err", err.Error())
		return
	}
	g.logger.Info("idemhook configuration reloaded", "file", g.cfg.File, "routes", len(cfg.Routes))
}

// logRefusal logs the errors of a file a reload refused: a record that
// says so and how many there are, then one record per error, so that
// each reads on a line of its own (and is a record of its own in JSON).
func (g *gateway) logRefusal(err error) {
	var errs config.Errors
	if !errors.As(err, &errs) { // the file could not be read
		g.logger.Error("idemhook reload refused: the configuration is invalid; the running one keeps serving", "file", g.cfg.File, "err", err.Error())
		return
	}
	g.logger.Error("idemhook reload refused: the configuration is invalid; the running one keeps serving", "file", g.cfg.File, "errors", len(errs))
	for _, e := range errs {
		g.logger.Error("idemhook reload refused: configuration error", "err", e.Error())
	}
}

// serve runs the gateway until ctx is done, then shuts down gracefully.
func serve(ctx context.Context, cfg *config.Config, e env) error {
	logger := newLogger(cfg.Log, e.stderr)
	for _, w := range cfg.Warnings {
		logger.Warn("idemhook configuration: " + w.Error())
	}
	tr, err := openTracing(ctx, e.getenv, logger)
	if err != nil {
		return err
	}
	g, err := newGateway(ctx, cfg, logger, e.now, tr)
	if err != nil {
		return err
	}
	// Closed last opened first: the audit recorder flushes its queue
	// before the sinks and the SQLite file close.
	defer func() {
		if err := g.res.close(); err != nil {
			logger.Warn("idemhook close", "err", err)
		}
	}()

	if err := probeStore(ctx, g.store, time.Second); err != nil {
		logger.Warn("idemhook store not reachable at start; deliveries fail open (or closed, per route) until it is back",
			"store", storeDesc(cfg.Store), "err", err)
	}
	probeUpstreams(ctx, cfg.Routes, logger)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if cfg.TLS.Cert != "" {
		// The certificate is read at each handshake from g.cert, which a
		// reload replaces. A renewed certificate needs no restart.
		ln = tls.NewListener(ln, &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return g.cert.Load(), nil },
		})
	}
	var adminLn net.Listener
	if cfg.Admin.Listen != "" {
		adminLn, err = net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("admin listen %s: %w", cfg.Admin.Listen, err)
		}
	}

	// Deliveries run under g.base: cancelling it after the shutdown bound
	// cuts the remaining ones short, so that the middleware releases their
	// claims.
	base, cutShort := g.base, g.cutShort
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// A whole request, body included, must arrive within a minute. A
		// sender can't hold a connection by trickling a body (5 MiB at
		// ~90 KB/s fits).
		ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base },
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var adminSrv *http.Server
	if adminLn != nil {
		adminSrv = &http.Server{
			Handler:           g.admin,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
	}

	errc := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { errc <- srv.Serve(ln) })
	a := addrs{Listen: ln.Addr().String()}
	if adminSrv != nil {
		a.Admin = adminLn.Addr().String()
		wg.Go(func() { errc <- adminSrv.Serve(adminLn) })
	}
	logger.Info("idemhook listening", "listen", a.Listen, "admin", a.Admin, "store", cfg.Store.Driver,
		"audit", cfg.Audit.Sink, "routes", len(cfg.Routes))
	if e.ready != nil {
		e.ready(a)
	}

	var serveErr error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case serveErr = <-errc:
			break wait
		case <-e.reload:
			g.reload(e.getenv)
		}
	}
	timeout := time.Duration(g.shutdownTimeout.Load())
	logger.Info("idemhook shutting down", "timeout", timeout)
	shutdown(srv, timeout, cutShort, logger)
	// Deliveries cut short may still be finishing: their audit entries
	// must reach the recorder before it closes.
	waitInflight(&g.inflight, 10*time.Second, logger)
	if adminSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := adminSrv.Shutdown(sctx); err != nil {
			adminSrv.Close()
		}
		cancel()
	}
	wg.Wait()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	logger.Info("idemhook stopped")
	return nil
}

// detach runs next, the proxy to the upstream, under a context that the
// sender hanging up does not cancel. Only base (the shutdown's cut) cancels
// it. A provider that gives up on a slow answer retries. Aborting the
// upstream call would release the claim while the backend, which usually
// keeps working when its connection closes, may still process the event.
// The retry would then be processed a second time. Running on, the answer
// is stored and the retry gets it replayed (or waits for it, with
// in_flight: wait). The upstream call stays bounded by upstream_timeout.
func detach(base context.Context, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
		stop := context.AfterFunc(base, func() { cancel(context.Cause(base)) })
		defer func() {
			stop()
			cancel(nil)
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// shutdown stops srv accepting, lets the running deliveries finish within
// timeout, then cuts the rest short (their requests' context is cancelled,
// the proxy answers 502 and the middleware releases their claims) and waits
// a moment for them to do so.
func shutdown(srv *http.Server, timeout time.Duration, cutShort context.CancelCauseFunc, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := srv.Shutdown(ctx)
	cancel()
	if err == nil {
		return
	}
	logger.Warn("idemhook shutdown timeout reached; cutting the remaining deliveries short (their claims are released)", "timeout", timeout)
	cutShort(errors.New("idemhook: shutdown timeout reached"))
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
}

// waitInflight waits, at most bound, until no request is inside the routes.
func waitInflight(wg *sync.WaitGroup, bound time.Duration, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(bound):
		logger.Warn("idemhook shutdown: deliveries still running after the bound; their audit entries may be lost", "bound", bound)
	}
}
