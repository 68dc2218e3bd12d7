// Package gateway is the idemhook gateway as a Go package: a reverse proxy
// that makes the backend behind each route run once per webhook event, and
// answers every re-delivery with the first answer. Command idemhook runs it
// from a YAML file; a Go program can run it inside its own binary, with its
// own listeners, TLS and mux, from a [config.Config] read by [config.Load]
// or built by hand:
//
//	g, err := gateway.New(ctx, cfg, gateway.Options{Logger: logger})
//	...
//	defer g.Close(context.Background())
//	srv := &http.Server{Handler: g.Handler(), BaseContext: func(net.Listener) context.Context { return g.Context() }}
//
// [Gateway.Handler] serves the routes; [Gateway.AdminHandler] serves
// /readyz, /metrics, /admin/... and the console (docs/operations.md).
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/queue"
)

// Options are what a gateway takes from the program that runs it, beside
// its configuration.
type Options struct {
	// Logger receives the gateway's logs. nil: none.
	Logger *slog.Logger
	// Now, if set, is the clock of the middleware and of the memory store.
	Now func() time.Time
	// Getenv reads the OTEL_* variables that turn tracing on (see
	// docs/operations.md). nil: tracing is off.
	Getenv func(string) string
	// Version is the gateway's version, in idemhook_build_info and in the
	// traces' service.version. "": "(devel)".
	Version string
}

// Gateway is a configured gateway, not listening: New builds it, the
// program serves Handler and AdminHandler on listeners of its own.
type Gateway struct {
	cfg      *config.Config
	logger   *slog.Logger
	store    idemhook.Store
	mw       *idemhook.Middleware
	metrics  *metrics
	audit    *auditTrail
	tracing  *tracing               // nil: off
	queues   atomic.Pointer[queues] // nil until a route has deliver: queue
	limits   Limits
	overload *overload
	handler  http.Handler // the routes: g.routes, counted in g.inflight
	admin    http.Handler // the admin routes: g.adminRoutes
	res      resources

	// What a reload replaces: the routes and the admin handler (its
	// token), the TLS certificate and the shutdown bound. The store, the
	// audit sink and the listeners stay those of the start.
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

// New opens the store and the audit sink of cfg, the tracer that
// opts.Getenv's OTEL_* variables configure, and builds the handlers. ctx
// bounds the opening only. A cfg that [config.Config.Validate] refuses (one
// built by hand) is refused before anything is opened, with its
// config.Errors. On error, everything opened so far is closed.
func New(ctx context.Context, cfg *config.Config, opts Options) (*Gateway, error) {
	return newGateway(ctx, cfg, opts)
}

// newGateway is New. On error its deferred close needs the gateway built
// so far, hence the named results.
func newGateway(ctx context.Context, cfg *config.Config, opts Options) (_ *Gateway, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	version := opts.Version
	if version == "" {
		version = "(devel)"
	}
	tr, err := openTracing(ctx, opts.Getenv, logger, version)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, logger: logger, metrics: newMetrics(version), tracing: tr}
	g.base, g.cutShort = context.WithCancelCause(context.WithoutCancel(ctx))
	g.res.add(tr.shutdown) // closed late: flushes the spans of the last deliveries
	g.res.add(func() error { g.cutShort(nil); return nil })
	defer func() {
		if err != nil {
			g.res.close()
		}
	}()
	g.limits = processLimits(cfg)
	if err := g.limits.checkBodies(cfg); err != nil {
		return nil, err
	}
	g.overload = newOverload(g.metrics)
	files := &connections{rs: &g.res, logger: logger}
	g.store, err = openStore(ctx, cfg.Store, files, now, cfg.LongestLease())
	if err != nil {
		return nil, err
	}
	g.audit, err = openAudit(ctx, cfg, files, logger, g.metrics)
	if err != nil {
		return nil, err
	}
	g.mw, err = idemhook.New(g.store, g.tracing.instrument(idemhook.Options{
		Logger:           logger,
		Now:              now,
		StoreTimeout:     cfg.Store.Timeout, // 0: the store's own default (SQLite's: 10s)
		MaxHeldBodyBytes: g.limits.BodyMemory,
		OnDelivery: func(d idemhook.DeliveryInfo) {
			d = filteredOutcome(notQueued(d))
			g.metrics.onDelivery(d)
			g.audit.record(d)
		},
		OnStoreCall:     g.metrics.onStoreCall,
		OnBreakerChange: g.metrics.onBreakerChange,
	}))
	if err != nil {
		return nil, err
	}
	g.metrics.reg.MustRegister(newQueueCollector(g.queues.Load))
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
	g.handler = g.overload.limitConnections(g.overload.limitDeliveries(g.limits.MaxDeliveries,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.inflight.Add(1)
			defer g.inflight.Done()
			(*g.routes.Load()).ServeHTTP(w, r)
		})))
	g.admin = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*g.adminRoutes.Load()).ServeHTTP(w, r)
	})
	return g, nil
}

// Probe tries the store (a claim and a release, each within a second) and,
// in the background, each route's upstream, and logs a warning for each one
// that does not answer. The gateway serves either way: a program calls it
// once at start, to learn of a mistyped address before the first delivery.
func (g *Gateway) Probe(ctx context.Context) {
	if err := probeStore(ctx, g.store, time.Second); err != nil {
		g.logger.Warn("idemhook store not reachable at start; deliveries fail open (or closed, per route) until it is back",
			"store", storeDesc(g.cfg.Store), "err", err)
	}
	probeUpstreams(ctx, g.cfg.Routes, g.logger)
}

// Handler is the public listener's handler: the routes of the
// configuration in use.
func (g *Gateway) Handler() http.Handler { return g.handler }

// AdminHandler is the admin listener's handler: /readyz, /metrics,
// /admin/... and the console, behind the bearer token of admin.token.
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

// Context is the context the deliveries and their upstream calls run
// under. A server of Handler returns it from its BaseContext, so that
// CutShort also ends the deliveries' waits and store calls.
func (g *Gateway) Context() context.Context { return g.base }

// CutShort cancels the deliveries still running: their requests' context
// is cancelled, the proxy answers 502 and the middleware releases their
// claims. A program calls it when the shutdown bound has passed.
func (g *Gateway) CutShort(cause error) { g.cutShort(cause) }

// ShutdownTimeout is the shutdown bound (shutdown_timeout) of the
// configuration in use.
func (g *Gateway) ShutdownTimeout() time.Duration { return time.Duration(g.shutdownTimeout.Load()) }

// GetCertificate returns the certificate of tls: in the configuration in
// use, for a tls.Config's GetCertificate. It is read at each handshake, so
// a Reload that renews it needs no restart. nil without tls:.
func (g *Gateway) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return g.cert.Load(), nil
}

// Limits returns the limits the gateway runs with, each zero field of the
// configuration's limits: section derived from the process.
func (g *Gateway) Limits() Limits { return g.limits }

// Ready reports whether the store takes a claim and a release within the
// store deadline, as GET /readyz does: nil, or the failing step's error.
func (g *Gateway) Ready(ctx context.Context) error {
	return probeStore(ctx, g.store, g.mw.StoreTimeout())
}

// Reload puts cfg in service: its routes, their secrets and limits, the
// admin token, the TLS certificate and the shutdown bound, without closing
// a connection or stopping a delivery (requests already running finish on
// the routes they started with). Settings only a restart can change (listen,
// store, admin.listen, audit, log, tls on or off, limits) are logged and kept. On
// error (a cfg that config.Config.Validate refuses, say) the running
// configuration keeps serving. Either way the reload is counted in the
// metrics (idemhook_config_reloads_total{result}).
func (g *Gateway) Reload(cfg *config.Config) error {
	err := g.reload(cfg)
	g.metrics.reload.loaded(time.Now(), true, err)
	return err
}

// ReloadRefused counts a reload refused before it reached [Gateway.Reload]:
// a configuration file that could not be read or is invalid
// (config.Load's error). The running configuration keeps serving; the
// metrics idemhook_config_reloads_total{result="failure"} and
// idemhook_config_last_reload_successful say so.
func (g *Gateway) ReloadRefused() {
	g.metrics.reload.loaded(time.Now(), true, errors.New("refused"))
}

func (g *Gateway) reload(cfg *config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
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
		{"limits", cfg.Limits == g.cfg.Limits},
	} {
		if !s.same {
			kept = append(kept, s.name)
		}
	}
	if len(kept) > 0 {
		g.logger.Warn("idemhook reload: these settings change only with a restart; the running ones are kept", "settings", strings.Join(kept, ", "))
	}
	if err := g.limits.checkBodies(cfg); err != nil {
		return err
	}
	return g.apply(cfg)
}

// apply builds the routes and the admin handler of cfg and puts them in
// service. Requests already running finish on the ones they started with.
func (g *Gateway) apply(cfg *config.Config) error {
	mux := http.NewServeMux()
	var idle []func()
	var queued []queuedParts
	if g.queues.Load() == nil && slices.ContainsFunc(cfg.Routes, func(rc config.Route) bool { return rc.Queued() }) {
		diskDir := ""
		if cfg.Store.Driver == "sqlite" {
			diskDir = filepath.Dir(cfg.Store.Path)
		}
		q, err := newQueues(g.base, g.store, diskDir, g.logger, func(o queue.Observation) {
			g.metrics.onAttempt(o)
			g.audit.recordAttempt(o)
		})
		if err != nil {
			return err
		}
		g.queues.Store(q)
	}
	// The routes of cfg are checked against each other only: each takes
	// over the keys of the route of its source in the configuration before
	// a reload, whose deliveries may still be running.
	set := g.mw.NewRouteSet()
	for _, rc := range cfg.Routes {
		route := rc.Route
		route.ShareKeys = rc.ShareKeys // share_keys, as cfg.Validate checked it
		wrap, err := set.Route(route)
		if err != nil {
			// check ran the same checks (routeLimits): not reached.
			return config.Error{File: cfg.File, Line: rc.Line, Field: rc.Field, Msg: err.Error()}
		}
		tr := newTransport(rc.UpstreamTimeout)
		idle = append(idle, tr.CloseIdleConnections)
		rt := g.tracing.transport(timedTransport{next: tr, observe: g.metrics.upstreamObserver(rc.Path)})
		var proxy http.Handler // none for a route with destinations (queued: fanOut)
		if rc.Upstream != nil {
			proxy = detach(g.base, newProxy(rc, rt, g.bufs, g.logger, cfg.TrustedProxies))
		}
		if hasFilter(rc) {
			// The filters run behind the middleware (signature, claim):
			// the route's before the proxy or the queue, its destinations'
			// in the queue's accept (fanOut).
			mw := wrap
			wrap = func(next http.Handler) http.Handler { return markFiltered(mw(next)) }
		}
		if rc.Filter != nil {
			mw := wrap
			wrap = func(next http.Handler) http.Handler { return mw(filterRoute(rc, g.logger, next)) }
		}
		if rc.Queued() {
			// A transport per lane: a destination's attempt_timeout may be
			// its own, and bounds the wait for the answer's headers.
			rts := map[string]http.RoundTripper{}
			for _, lane := range rc.Lanes() {
				qtr := newTransport(lane.Queue.AttemptTimeout)
				idle = append(idle, qtr.CloseIdleConnections)
				rts[lane.Name] = g.tracing.transport(timedTransport{next: qtr, observe: g.metrics.upstreamObserver(rc.Path)})
			}
			queued = append(queued, queuedParts{rc: rc, wrap: wrap, rts: rts, proxy: proxy})
			continue
		}
		mux.Handle(rc.Path, g.tracing.handler(wrap(proxy)))
	}
	if q := g.queues.Load(); q != nil {
		q.set(queued) // with none, the routes of the last configuration stop
		for _, p := range queued {
			mux.Handle(p.rc.Path, g.tracing.handler(q.handler(p, cfg.TrustedProxies)))
		}
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

// Close ends the gateway. It waits, until ctx is done, for the deliveries
// still inside Handler (cut short by CutShort or not) to record their audit
// entries, then closes what New opened, last opened first: the audit
// recorder flushes its queue before the sinks and the SQLite file close.
// Call it once the servers of Handler and AdminHandler are shut down.
func (g *Gateway) Close(ctx context.Context) error {
	start := time.Now()
	done := waitDone(&g.inflight)
	select {
	case <-done:
	case <-ctx.Done():
		bound := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			bound = dl.Sub(start).Round(time.Second)
		}
		g.logger.Warn("idemhook shutdown: deliveries still running after the bound; their audit entries may be lost", "bound", bound)
	}
	// Answers the store refused while it was down are being stored in the
	// background: they get what is left of the bound before the store closes.
	if err := g.mw.Drain(ctx); err != nil {
		g.logger.Warn("idemhook shutdown: answers the store refused were still not stored at the bound; a copy of their events may run again")
	}
	if q := g.queues.Load(); q != nil {
		// Attempts in flight finish within what is left of the bound; those
		// cut short are queued again, due at once, for the next start.
		qctx, cancel := context.WithTimeout(ctx, g.ShutdownTimeout())
		defer cancel()
		if err := q.close(qctx); err != nil {
			g.logger.Warn("idemhook shutdown: queued attempts still running after the bound were cut short; they are sent again after the restart")
		}
	}
	return g.res.close()
}
