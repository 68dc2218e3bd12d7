package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the limits: section where nothing can be derived.
const (
	defaultBodyMemory     = 256 << 20
	maxDefaultConnections = 8192
	minDefaultConnections = 64
	// fileReserve is kept from the open-file limit for what is not a
	// client's connection: the store's and the audit's connections and
	// files, the admin listener's clients, the log.
	fileReserve = 128
)

// Limits are the bounds a gateway runs with: the configuration's limits:
// section with each zero field derived from the process ([config.Limits]
// says how), and where each figure came from.
type Limits struct {
	config.Limits
	// Why says, per field, where its figure came from: "limits.body_memory",
	// "a quarter of GOMEMLIMIT 512MiB", ...
	Why struct{ BodyMemory, MaxConnections, MaxDeliveries string }
}

// resolveLimits derives the zero fields of l from the process's memory
// limit (memLimit, math.MaxInt64 when none) and open-file limit (files, 0
// when unknown). A derived body budget is at least twice the largest body
// a route takes (largestBody), so that a file check passes is one serve
// starts with: only a body_memory set in the file refuses a route's
// max_body.
func resolveLimits(l config.Limits, memLimit int64, files uint64, largestBody int64) Limits {
	r := Limits{Limits: l}
	switch {
	case l.BodyMemory > 0:
		r.Why.BodyMemory = "limits.body_memory"
	case memLimit > 0 && memLimit < math.MaxInt64:
		r.BodyMemory = memLimit / 4
		r.Why.BodyMemory = "a quarter of the memory limit " + formatBytes(memLimit)
	default:
		r.BodyMemory = defaultBodyMemory
		r.Why.BodyMemory = "the default, with no memory limit set"
	}
	if l.BodyMemory == 0 && r.BodyMemory <= 2*largestBody {
		r.BodyMemory = 2*largestBody + 2
		r.Why.BodyMemory += ", raised to hold two of the largest max_body"
	}
	switch {
	case l.MaxConnections > 0:
		r.Why.MaxConnections = "limits.max_connections"
	case files > 0:
		n := (int64(min(files, math.MaxInt32)) - fileReserve) / 2
		r.MaxConnections = int(min(max(n, minDefaultConnections), maxDefaultConnections))
		r.Why.MaxConnections = fmt.Sprintf("from the open-file limit %d", files)
	default:
		r.MaxConnections = maxDefaultConnections
		r.Why.MaxConnections = "the default, with no open-file limit known"
	}
	if l.MaxDeliveries > 0 {
		r.Why.MaxDeliveries = "limits.max_deliveries"
	} else {
		r.MaxDeliveries = r.MaxConnections
		r.Why.MaxDeliveries = "max_connections"
	}
	return r
}

// processLimits resolves cfg's limits against this process.
func processLimits(cfg *config.Config) Limits {
	var largest int64
	for _, rc := range cfg.Routes {
		largest = max(largest, rc.Route.MaxBodyBytes)
	}
	return resolveLimits(cfg.Limits, debug.SetMemoryLimit(-1), openFileLimit(), largest)
}

// formatBytes writes n in the largest binary unit that divides it, as the
// configuration file's sizes are written.
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// checkBodies refuses routes whose max_body the body budget could never
// hold.
func (l *Limits) checkBodies(cfg *config.Config) error {
	var errs config.Errors
	for _, rc := range cfg.Routes {
		if rc.Route.MaxBodyBytes >= l.BodyMemory {
			errs = append(errs, config.Error{File: cfg.File, Line: rc.Line, Field: rc.Field + ".max_body",
				Msg: fmt.Sprintf("%d bytes is not under the body memory budget %s (%s): such a body could never be held; lower max_body, or raise limits.body_memory or the memory limit",
					rc.Route.MaxBodyBytes, formatBytes(l.BodyMemory), l.Why.BodyMemory)})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// overload counts what the limits turned away, by reason.
type overload struct {
	refused *prometheus.CounterVec
	closed  prometheus.Counter // connections closed at accept, past the 503s
	conns   atomic.Int64       // open connections of the listeners wrapped by Listener
}

func newOverload(m *metrics) *overload {
	o := &overload{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemhook_overload_refused_total",
		Help: "Requests answered 503 by the gateway's limits, by reason: connections (limits.max_connections), deliveries (limits.max_deliveries). Bodies over the memory budget are deliveries with outcome overloaded.",
	}, []string{"reason"})}
	for _, reason := range []string{"connections", "deliveries"} {
		o.refused.WithLabelValues(reason)
	}
	o.closed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idemhook_connections_dropped_total",
		Help: "Connections of the public listener closed as soon as accepted: past limits.max_connections and the 32 beyond it that are answered 503.",
	})
	m.reg.MustRegister(o.refused, o.closed)
	m.gaugeFunc("idemhook_connections_open", "Open connections of the public listener.", func() float64 { return float64(o.conns.Load()) })
	return o
}

// limitDeliveries answers 503 to a request that finds max requests inside
// next already.
func (o *overload) limitDeliveries(max int, next http.Handler) http.Handler {
	sem := make(chan struct{}, max)
	refused := o.refused.WithLabelValues("deliveries")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
		default:
			refused.Inc()
			refuse(w, "the gateway is running as many deliveries as it is allowed (limits.max_deliveries); retry later")
			return
		}
		defer func() { <-sem }()
		next.ServeHTTP(w, r)
	})
}

// refuse answers 503 with Retry-After: 1 and a problem document.
func refuse(w http.ResponseWriter, detail string) {
	w.Header().Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, "Overloaded", detail)
}

// overLimitKey marks, in a connection's context, a connection accepted past
// limits.max_connections.
type overLimitKey struct{}

// limitConnections answers 503 and closes the connection to every request
// on a connection that Listener accepted past its bound.
func (o *overload) limitConnections(next http.Handler) http.Handler {
	refused := o.refused.WithLabelValues("connections")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if over, _ := r.Context().Value(overLimitKey{}).(bool); over {
			refused.Inc()
			w.Header().Set("Connection", "close")
			refuse(w, "the gateway has as many connections open as it is allowed (limits.max_connections); retry later")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Listener wraps the public listener ln with the gateway's connection
// limit: a connection accepted past limits.max_connections is served one
// answer, 503 with Retry-After and Connection: close, and closed; past 32
// more, a connection is closed as soon as it is accepted. A program
// serving [Gateway.Handler] wraps its listener with it and sets
// [ConnContext] as its http.Server's ConnContext.
//
// Accept errors that pass (the process or the system out of file
// descriptors: EMFILE, ENFILE) are retried after a pause that grows from
// 5ms to 100ms, and logged at most once every 5 seconds with the count
// since the last line, so that the listener serves again as soon as
// descriptors are free and a flood doesn't flood the log.
func (g *Gateway) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, g: g, max: int64(g.limits.MaxConnections)}
}

// ConnContext is the http.Server ConnContext of a listener from
// [Gateway.Listener]: it marks the connections accepted past the limit.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok && lc.over {
		return context.WithValue(ctx, overLimitKey{}, true)
	}
	return ctx
}

type limitListener struct {
	net.Listener
	g   *Gateway
	max int64

	mu         sync.Mutex
	lastLog    time.Time
	suppressed int
}

// overSlack is how many connections past limits.max_connections are served
// their 503; beyond them a connection is closed as soon as it is accepted.
const overSlack = 32

// acceptLogEvery bounds the accept-error log lines.
const acceptLogEvery = 5 * time.Second

func (l *limitListener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			n := l.g.overload.conns.Add(1)
			if n > l.max+overSlack {
				// Past the connections that get a 503: closed at once,
				// so that a flood can't take the descriptors the
				// deliveries under way, the store and the admin listener
				// need.
				l.g.overload.conns.Add(-1)
				l.g.overload.closed.Inc()
				c.Close()
				pause = 0
				continue
			}
			return &limitedConn{Conn: c, conns: &l.g.overload.conns, over: n > l.max}, nil
		}
		var ne net.Error
		if errors.Is(err, net.ErrClosed) || !errors.As(err, &ne) || !ne.Temporary() { //nolint:staticcheck // Temporary is what tells EMFILE apart
			return nil, err
		}
		l.logAcceptError(err)
		pause = min(max(2*pause, 5*time.Millisecond), 100*time.Millisecond)
		time.Sleep(pause)
	}
}

func (l *limitListener) logAcceptError(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.lastLog) >= acceptLogEvery {
		l.g.logger.Error("idemhook accept failed; retrying (out of file descriptors? see limits.max_connections)",
			"listen", l.Addr().String(), "err", err, "more_since_last_line", l.suppressed)
		l.lastLog, l.suppressed = now, 0
		return
	}
	l.suppressed++
}

// limitedConn counts itself out of the open connections once closed.
type limitedConn struct {
	net.Conn
	conns  *atomic.Int64
	over   bool
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.conns.Add(-1)
	}
	return c.Conn.Close()
}
