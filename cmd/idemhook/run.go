package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/idemhook/idemhook/gateway/config"
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
		cfg, err := config.Load(file, e.getenv)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, e)
	case "check":
		file, err := configFlag(cmd, rest, e.stderr)
		if err != nil {
			return ignoreHelp(err)
		}
		cfg, err := config.Load(file, e.getenv)
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

// printSummary is the output of check: what the file configures, defaults
// included.
func printSummary(w io.Writer, cfg *config.Config) {
	fmt.Fprintf(w, "%s: OK\n", cfg.File)
	fmt.Fprintf(w, "  listen   %s\n", cfg.Listen)
	switch cfg.Store.Driver {
	case "sqlite":
		fmt.Fprintf(w, "  store    sqlite %s\n", cfg.Store.Path)
	case "redis":
		if cfg.Store.URL != "" {
			fmt.Fprintf(w, "  store    redis %s\n", config.RedactURL(cfg.Store.URL))
		} else {
			fmt.Fprintf(w, "  store    redis %s\n", strings.Join(cfg.Store.Addrs, ","))
		}
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
		if r.Preset != nil && r.Preset.RetryWindow > 0 {
			extra += " retry_window=" + config.FormatDuration(r.Preset.RetryWindow)
		}
		if rc.ShareKeys {
			extra += " share_keys"
		}
		if r.RequireKey {
			extra += " require_key"
		}
		fmt.Fprintf(w, "    %s -> %s source=%s ttl=%s in_flight=%s on_store_error=%s%s\n",
			rc.Path, rc.Upstream, r.Source, config.FormatDuration(r.TTL), r.InFlight, r.OnStoreError, extra)
	}
}
