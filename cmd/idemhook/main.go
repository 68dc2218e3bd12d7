// Command idemhook is the idemhook gateway: a reverse proxy that makes the
// backend behind it run once per webhook event, whatever language the
// backend is written in. It answers every re-delivery of an event with the
// response of the first one, and is configured by one YAML file.
//
// Usage:
//
//	idemhook serve --config idemhook.yaml   run the gateway
//	idemhook check --config idemhook.yaml   validate the file and exit
//	idemhook demo                           a scripted tour on loopback
//	idemhook version                        print the version
//
// docs/gateway.md is the configuration reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs its connection pool's dial failures through a global
	// logger, straight to stderr and in its own format. The gateway already
	// reports a failing store, once per delivery, as the middleware's WARN
	// ("WebhookIdempotencyGuard Redis error for key=...") and on /readyz, so
	// the duplicates are dropped here, the one place allowed process-wide
	// settings.
	redis.SetLogger(quietRedisLogger{})

	// SIGHUP reloads the configuration (serve). Without this it would end
	// the process at once, cutting every delivery short.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runEnv(ctx, env{args: os.Args[1:], getenv: os.Getenv, stdout: os.Stdout, stderr: os.Stderr, reload: hup})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idemhook:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// quietRedisLogger drops go-redis's internal log lines.
type quietRedisLogger struct{}

func (quietRedisLogger) Printf(context.Context, string, ...any) {}
