package periodic_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/periodic"
	"github.com/idemhook/idemhook/internal/syncbuf"
)

func TestStartCallsRepeatedlyUntilStop(t *testing.T) {
	calls := make(chan struct{}, 100)
	var n atomic.Int64
	task := periodic.Start(time.Millisecond, func(context.Context) error {
		n.Add(1)
		calls <- struct{}{}
		return nil
	}, nil, "")
	for range 3 {
		<-calls
	}
	task.Stop()
	after := n.Load()
	task.Stop() // a second Stop is harmless
	if after < 3 {
		t.Fatalf("fn ran %d times, want at least 3", after)
	}
	// Stop waited for the goroutine to end: no call can start any more.
	if got := n.Load(); got != after {
		t.Errorf("fn ran %d times after Stop returned (%d before)", got-after, after)
	}
}

func TestStopCancelsACallInProgress(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	var ctxErr atomic.Value
	logs := new(syncbuf.Buffer)
	task := periodic.Start(time.Millisecond, func(ctx context.Context) error {
		once.Do(func() { close(started) })
		<-ctx.Done() // only Stop can end this call
		ctxErr.Store(ctx.Err())
		return ctx.Err()
	}, slog.New(slog.NewTextHandler(logs, nil)), "chore failed")
	<-started
	task.Stop()
	if err, _ := ctxErr.Load().(error); !errors.Is(err, context.Canceled) {
		t.Errorf("context of the call in progress: %v, want context.Canceled", err)
	}
	if s := logs.String(); s != "" {
		t.Errorf("the failure caused by Stop was logged: %s", s)
	}
}

func TestFailuresAreLogged(t *testing.T) {
	failed := make(chan struct{}, 100)
	logs := new(syncbuf.Buffer)
	task := periodic.Start(time.Millisecond, func(context.Context) error {
		defer func() { failed <- struct{}{} }()
		return errors.New("disk full")
	}, slog.New(slog.NewTextHandler(logs, nil)), "sweeping failed")
	<-failed
	<-failed // the first failure has been logged once the second call starts
	task.Stop()
	s := logs.String()
	for _, want := range []string{"level=WARN", `msg="sweeping failed"`, `err="disk full"`} {
		if !strings.Contains(s, want) {
			t.Errorf("log %q does not contain %q", s, want)
		}
	}
}

func TestNilLoggerIgnoresFailures(t *testing.T) {
	failed := make(chan struct{}, 100)
	task := periodic.Start(time.Millisecond, func(context.Context) error {
		defer func() { failed <- struct{}{} }()
		return errors.New("boom")
	}, nil, "ignored")
	<-failed
	<-failed
	task.Stop() // no panic on a nil logger
}

func TestNonPositiveIntervalStartsNothing(t *testing.T) {
	for _, interval := range []time.Duration{0, -time.Second} {
		var n atomic.Int64
		task := periodic.Start(interval, func(context.Context) error { n.Add(1); return nil }, nil, "")
		task.Stop()
		if got := n.Load(); got != 0 {
			t.Errorf("interval %v: fn ran %d times, want 0", interval, got)
		}
	}
}

func TestOnDemandRunsOnKick(t *testing.T) {
	calls := make(chan struct{}, 100)
	release := make(chan struct{})
	var n atomic.Int64
	task := periodic.OnDemand(func(context.Context) error {
		n.Add(1)
		calls <- struct{}{}
		<-release
		return nil
	}, nil, "", 0)
	defer task.Stop()
	task.Kick()
	<-calls // the first call runs, and waits for release
	for range 5 {
		task.Kick() // while it runs: together, one more call
	}
	release <- struct{}{}
	<-calls
	close(release)
	task.Stop()
	if got := n.Load(); got != 2 {
		t.Fatalf("fn ran %d times for a kick and five kicks during its call, want 2", got)
	}
}

func TestOnDemandNeverRunsUnasked(t *testing.T) {
	var n atomic.Int64
	task := periodic.OnDemand(func(context.Context) error { n.Add(1); return nil }, nil, "", 0)
	task.Stop()
	if got := n.Load(); got != 0 {
		t.Fatalf("fn ran %d times without a kick, want 0", got)
	}
}

// A task kicked often logs its failures at most once per quiet; with no
// quiet, each one.
func TestOnDemandQuietBoundsTheWarnings(t *testing.T) {
	for _, c := range []struct {
		quiet time.Duration
		want  int
	}{{time.Hour, 1}, {0, 3}} {
		started := make(chan struct{})
		calls := 0
		logs := new(syncbuf.Buffer)
		task := periodic.OnDemand(func(ctx context.Context) error {
			started <- struct{}{}
			if calls++; calls == 4 {
				<-ctx.Done() // held until Stop, which is not logged
				return ctx.Err()
			}
			return errors.New("disk full")
		}, slog.New(slog.NewTextHandler(logs, nil)), "checkpoint failed", c.quiet)
		for range 4 {
			task.Kick()
			<-started
		}
		// The fourth call has started: the first three failures are logged.
		got := strings.Count(logs.String(), `msg="checkpoint failed"`)
		task.Stop()
		if got != c.want {
			t.Errorf("quiet %v: %d WARNs for 3 failures, want %d:\n%s", c.quiet, got, c.want, logs.String())
		}
	}
}
