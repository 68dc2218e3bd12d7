package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/idemhook/idemhook"
)

// newLogger returns the logger of the gateway, writing to w.
func newLogger(lc LogConfig, w io.Writer) *slog.Logger {
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
	cfg     *Config
	logger  *slog.Logger
	store   idemhook.Store
	mw      *idemhook.Middleware
	metrics *metrics
	audit   *auditTrail
	tracing *tracing     // nil: off
	handler http.Handler // the routes
	admin   http.Handler
	res     resources

	// base is the context deliveries and their upstream calls run under;
	// cutShort cancels it after the shutdown bound.
	base     context.Context
	cutShort context.CancelCauseFunc
}

// newGateway opens the store and the audit sink and builds the handlers.
// On error, everything opened so far is closed.
func newGateway(ctx context.Context, cfg *Config, logger *slog.Logger, now func() time.Time, tr *tracing) (_ *gateway, err error) {
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
	g.store, err = openStore(ctx, cfg.Store, files, now)
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
		StoreTimeout: cfg.Store.Timeout,
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
	mux := http.NewServeMux()
	bufs := newBufferPool()
	for _, rc := range cfg.Routes {
		wrap, err := g.mw.Route(rc.Route)
		if err != nil {
			// check ran the same checks (routeLimits): not reached.
			return nil, ConfigError{File: cfg.File, Line: rc.Line, Field: rc.at, Msg: err.Error()}
		}
		tr := newTransport(rc.UpstreamTimeout)
		g.res.add(func() error { tr.CloseIdleConnections(); return nil })
		rt := g.tracing.transport(timedTransport{next: tr, observe: g.metrics.upstreamObserver(rc.Path)})
		mux.Handle(rc.Path, g.tracing.handler(wrap(detach(g.base, newProxy(rc, rt, bufs, logger)))))
	}
	if !slices.ContainsFunc(cfg.Routes, func(rc RouteConfig) bool { return rc.Path == "/" }) {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			// The configuration file's location is not for the internet.
			writeProblem(w, http.StatusNotFound, "no route", fmt.Sprintf("no route for %s", r.URL.Path))
		})
	}
	g.handler = mux
	g.admin = g.adminHandler()
	return g, nil
}

// serve runs the gateway until ctx is done, then shuts down gracefully.
func serve(ctx context.Context, cfg *Config, e env) error {
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
		// A whole request, body included, within a minute: a sender can't
		// hold a connection by trickling a body (5 MiB at ~90 KB/s fits).
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
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	logger.Info("idemhook shutting down", "timeout", cfg.ShutdownTimeout)
	shutdown(srv, cfg.ShutdownTimeout, cutShort, logger)
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
// sender hanging up does not cancel, only base (the shutdown's cut): a
// provider that gives up on a slow answer retries, and aborting the upstream
// call would release the claim while the backend, which usually keeps
// working when its connection closes, may still process the event; the
// retry would then be processed a second time. Running on, the answer is
// stored and the retry gets it replayed (or waits for it, with in_flight:
// wait). The upstream call stays bounded by upstream_timeout.
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
