package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/gateway/storeurl"
)

const usage = `idemhook: a webhook idempotency gateway. It forwards each webhook event to
your backend once and answers the provider's re-deliveries with the stored
response.

Usage:
  idemhook serve --config FILE   run the gateway (FILE default: idemhook.yaml)
  idemhook check --config FILE   validate FILE, print a summary and exit
  idemhook demo                  start a gateway on loopback, send a scripted
                                 series of deliveries and show what happened
  idemhook version               print the version
  idemhook help                  print this text

Start with "idemhook demo"; then copy examples/idemhook.yaml and run
"idemhook check --config idemhook.yaml". Reference: docs/gateway.md.
`

// errHelp ends a run that only printed help: not a failure.
var errHelp = errors.New("help requested")

// usageError is a command line mistake. main exits 2 on it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + " (run \"idemhook help\")" }

// env is what a run gets from its process, plus the hooks tests and the demo
// use to observe it.
type env struct {
	args   []string
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer

	// ready, if set, is called once both listeners are bound, with their
	// addresses (admin empty when disabled).
	ready func(addrs)
	// now, if set, is the clock of the middleware and of the memory store.
	now func() time.Time
	// reload, if set, delivers SIGHUP: serve then reloads its
	// configuration file.
	reload <-chan os.Signal
}

// addrs are the bound addresses of a running gateway.
type addrs struct {
	Listen string
	Admin  string
}

// run is the whole program: main only wires it to the process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runEnv(ctx, env{args: args, getenv: getenv, stdout: stdout, stderr: stderr})
}

func runEnv(ctx context.Context, e env) error {
	if len(e.args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return usageError{"no command given"}
	}
	cmd, rest := e.args[0], e.args[1:]
	switch cmd {
	case "serve":
		file, err := configFlag(cmd, rest, e.stderr)
		if err != nil {
			return ignoreHelp(err)
		}
		cfg, err := config.Load(file, e.getenv, config.WithURLChecker(storeurl.Checker{}))
		if err != nil {
			return err
		}
		return serve(ctx, cfg, e)
	case "check":
		file, err := configFlag(cmd, rest, e.stderr)
		if err != nil {
			return ignoreHelp(err)
		}
		cfg, err := config.Load(file, e.getenv, config.WithURLChecker(storeurl.Checker{}))
		if err != nil {
			return err
		}
		printSummary(e.stdout, cfg)
		for _, w := range cfg.Warnings {
			fmt.Fprintf(e.stderr, "warning: %s\n", w)
		}
		return nil
	case "demo":
		if len(rest) > 0 {
			return usageError{"demo takes no arguments"}
		}
		return demo(ctx, e)
	case "version", "--version", "-version":
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprintln(e.stdout, versionString(bi))
		return nil
	case "help", "--help", "-help", "-h":
		fmt.Fprint(e.stdout, usage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}

func ignoreHelp(err error) error {
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

// configFlag parses the flags of serve and check.
func configFlag(cmd string, args []string, stderr io.Writer) (string, error) {
	fs := flag.NewFlagSet("idemhook "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "idemhook.yaml", "the configuration file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", errHelp // the flag package printed the flags
		}
		return "", usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return "", usageError{fmt.Sprintf("unexpected argument %q (idemhook %s --config FILE)", fs.Arg(0), cmd)}
	}
	return *file, nil
}

// version, when set at link time (-ldflags "-X main.version=v1.2.3", as
// deploy/Dockerfile does), is the gateway's version. Otherwise the module
// version in the build information is.
var version string

// buildVersion is the gateway's version: version, else the main module's,
// else "(devel)".
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// waitSummary says what the redis store's claims and completions wait
// for (wait_replicas, wait_aof), or "" when nothing.
func waitSummary(sc config.Store) string {
	if sc.WaitReplicas == 0 && !sc.WaitAOF {
		return ""
	}
	timeout := config.FormatDuration(sc.WaitTimeout)
	replicas := fmt.Sprintf("%d replica", sc.WaitReplicas)
	if sc.WaitReplicas != 1 {
		replicas += "s"
	}
	if sc.WaitAOF {
		return fmt.Sprintf("; claims and completions wait for the AOF fsync of the master and %s (WAITAOF, %s)", replicas, timeout)
	}
	return fmt.Sprintf("; claims and completions wait for %s (WAIT, %s)", replicas, timeout)
}

// printSummary is the output of check: what the file configures, defaults
// included.
func printSummary(w io.Writer, cfg *config.Config) {
	fmt.Fprintf(w, "%s: OK\n", cfg.File)
	fmt.Fprintf(w, "  listen   %s\n", cfg.Listen)
	switch cfg.Store.Driver {
	case "sqlite":
		fmt.Fprintf(w, "  store    sqlite %s\n", cfg.Store.Path)
	case "redis":
		where := strings.Join(cfg.Store.Addrs, ",")
		if cfg.Store.URL != "" {
			where = config.RedactURL(cfg.Store.URL)
		}
		fmt.Fprintf(w, "  store    redis %s%s\n", where, waitSummary(cfg.Store))
	case "postgres":
		fmt.Fprintf(w, "  store    postgres %s table %s\n", config.RedactURL(cfg.Store.URL), cfg.Store.Table)
	default:
		fmt.Fprintf(w, "  store    %s\n", cfg.Store.Driver)
	}
	admin := cfg.Admin.Listen
	if admin == "" {
		admin = "off"
	} else if cfg.Admin.Token != "" {
		admin += " (bearer token)"
	}
	fmt.Fprintf(w, "  admin    %s\n", admin)
	audit := cfg.Audit.Sink
	switch cfg.Audit.Sink {
	case "sqlite":
		audit += " " + cfg.Audit.Path
	case "postgres":
		audit += " " + config.RedactURL(cfg.Audit.URL)
	}
	if cfg.Audit.Sink == "sqlite" || cfg.Audit.Sink == "postgres" {
		audit += ", retention " + config.FormatDuration(cfg.Audit.Retention)
	}
	fmt.Fprintf(w, "  audit    %s\n", audit)
	fmt.Fprintf(w, "  limits   body_memory=%s max_connections=%s max_deliveries=%s\n",
		orDerived(cfg.Limits.BodyMemory > 0, fmt.Sprint(cfg.Limits.BodyMemory)),
		orDerived(cfg.Limits.MaxConnections > 0, fmt.Sprint(cfg.Limits.MaxConnections)),
		orDerived(cfg.Limits.MaxDeliveries > 0, fmt.Sprint(cfg.Limits.MaxDeliveries)))
	fmt.Fprintf(w, "  routes   %d\n", len(cfg.Routes))
	for _, rc := range cfg.Routes {
		r := rc.Route
		extra := ""
		if rc.Provider != "" {
			extra = " provider=" + rc.Provider
		}
		if rc.SecretFile != "" {
			extra += fmt.Sprintf(" secret_file=%s secrets=%d", rc.SecretFile, rc.SecretCount)
		}
		for _, t := range rc.Tenants {
			extra += fmt.Sprintf(" tenant=%s(secrets=%d", t.Name, t.SecretCount)
			if t.SecretFile != "" {
				extra += " secret_file=" + t.SecretFile
			}
			extra += ")"
		}
		if r.Preset != nil && r.Preset.RetryWindow > 0 {
			extra += " retry_window=" + config.FormatDuration(r.Preset.RetryWindow)
		}
		if rc.ShareKeys {
			extra += " share_keys"
		}
		if r.RequireKey {
			extra += " require_key"
		}
		if rc.ForwardKey != nil {
			extra += " forward_signed"
		}
		if rc.Filter != nil {
			extra += " filter=" + strconv.Quote(strings.TrimSpace(rc.Filter.String()))
		}
		to := "<none>"
		if rc.Upstream != nil {
			to = rc.Upstream.String()
		} else if len(rc.Destinations) > 0 {
			to = fmt.Sprintf("%d destinations", len(rc.Destinations))
		}
		fmt.Fprintf(w, "    %s -> %s source=%s ttl=%s in_flight=%s on_store_error=%s%s\n",
			rc.Path, to, r.Source, config.FormatDuration(r.TTL), r.InFlight, r.OnStoreError, extra)
		for _, d := range rc.Destinations {
			fmt.Fprintf(w, "      %s -> %s%s\n", d.Name, d.Upstream, destinationSummary(rc, d))
		}
	}
}

// destinationSummary is what check prints of a destination beside its
// name and upstream: its filter, and the queue settings it sets apart
// from its route's, with Idempotency-Key's form.
func destinationSummary(rc config.Route, d config.Destination) string {
	out := fmt.Sprintf(" key=<store key>#%s", d.Name)
	if d.Filter != nil {
		out += " filter=" + strconv.Quote(strings.TrimSpace(d.Filter.String()))
	} else {
		out += " filter=none (every event)"
	}
	q, rq := d.Queue, rc.Queue
	for _, s := range []struct {
		name      string
		own, base any
	}{
		{"concurrency", q.Concurrency, rq.Concurrency},
		{"rate", q.Rate, rq.Rate},
		{"attempt_timeout", config.FormatDuration(q.AttemptTimeout), config.FormatDuration(rq.AttemptTimeout)},
		{"max_attempts", q.MaxAttempts, rq.MaxAttempts},
		{"max_age", config.FormatDuration(q.MaxAge), config.FormatDuration(rq.MaxAge)},
		{"backoff_min", config.FormatDuration(q.BackoffMin), config.FormatDuration(rq.BackoffMin)},
		{"backoff_max", config.FormatDuration(q.BackoffMax), config.FormatDuration(rq.BackoffMax)},
		{"retry_statuses", fmt.Sprint(q.RetryStatuses), fmt.Sprint(rq.RetryStatuses)},
		{"order_by", q.OrderBy, rq.OrderBy},
		{"max_queued", q.MaxQueued, rq.MaxQueued},
	} {
		if s.own != s.base {
			out += fmt.Sprintf(" %s=%v", s.name, s.own)
		}
	}
	return out
}

// orDerived is v when set, else what the summary says of a limit derived at
// start (docs/gateway.md, limits).
func orDerived(set bool, v string) string {
	if set {
		return v
	}
	return "(derived at start)"
}

// serve runs the gateway until ctx is done, then shuts down gracefully.
func serve(ctx context.Context, cfg *config.Config, e env) error {
	logger := cfg.Log.NewLogger(e.stderr)
	for _, w := range cfg.Warnings {
		logger.Warn("idemhook configuration: " + w.Error())
	}
	setMemoryLimit(logger)
	g, err := gateway.New(ctx, cfg, gateway.Options{Logger: logger, Now: e.now, Getenv: e.getenv, Version: buildVersion()})
	if err != nil {
		return err
	}
	// Deliveries cut short may still be finishing: their audit entries
	// must reach the recorder before it closes.
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Close(cctx); err != nil {
			logger.Warn("idemhook close", "err", err)
		}
	}()
	g.Probe(ctx)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	ln = g.Listener(ln) // limits.max_connections, and accept errors retried
	if cfg.TLS.Cert != "" {
		// The certificate is read at each handshake from the gateway, whose
		// Reload replaces it. A renewed certificate needs no restart.
		ln = tls.NewListener(ln, &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: g.GetCertificate,
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
	base := g.Context()
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// A whole request, body included, must arrive within a minute. A
		// sender can't hold a connection by trickling a body (5 MiB at
		// ~90 KB/s fits).
		ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base },
		ConnContext: gateway.ConnContext,
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var adminSrv *http.Server
	if adminLn != nil {
		adminSrv = &http.Server{
			Handler:           g.AdminHandler(),
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
	lim := g.Limits()
	logger.Info("idemhook listening", "listen", a.Listen, "admin", a.Admin, "store", cfg.Store.Driver,
		"audit", cfg.Audit.Sink, "routes", len(cfg.Routes),
		"body_memory", lim.BodyMemory, "body_memory_from", lim.Why.BodyMemory,
		"max_connections", lim.MaxConnections, "max_connections_from", lim.Why.MaxConnections,
		"max_deliveries", lim.MaxDeliveries)
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
			reload(g, cfg.File, e.getenv, logger)
		}
	}
	timeout := g.ShutdownTimeout()
	logger.Info("idemhook shutting down", "timeout", timeout)
	shutdown(srv, timeout, g.CutShort, logger)
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

// reload reads the configuration file again (SIGHUP). A valid file replaces
// the routes, their secrets and limits, the admin token, the TLS
// certificate and the shutdown bound, without closing a connection or
// stopping a delivery. An invalid one is logged with its errors, and the
// running configuration keeps serving. Settings only a restart can change
// are logged and kept.
func reload(g *gateway.Gateway, file string, getenv func(string) string, logger *slog.Logger) {
	cfg, err := config.Load(file, getenv, config.WithURLChecker(storeurl.Checker{}))
	if err != nil {
		logRefusal(logger, file, err)
		g.ReloadRefused()
		return
	}
	for _, w := range cfg.Warnings {
		logger.Warn("idemhook configuration: " + w.Error())
	}
	if err := g.Reload(cfg); err != nil {
		logger.Error("idemhook reload refused; the running configuration keeps serving", "file", file, "err", err.Error())
		return
	}
	logger.Info("idemhook configuration reloaded", "file", file, "routes", len(cfg.Routes))
}

// logRefusal logs the errors of a file a reload refused: a record that
// says so and how many there are, then one record per error, so that
// each reads on a line of its own (and is a record of its own in JSON).
func logRefusal(logger *slog.Logger, file string, err error) {
	var errs config.Errors
	if !errors.As(err, &errs) { // the file could not be read
		logger.Error("idemhook reload refused: the configuration is invalid; the running one keeps serving", "file", file, "err", err.Error())
		return
	}
	logger.Error("idemhook reload refused: the configuration is invalid; the running one keeps serving", "file", file, "errors", len(errs))
	for _, e := range errs {
		logger.Error("idemhook reload refused: configuration error", "err", e.Error())
	}
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
