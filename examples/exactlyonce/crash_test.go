package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/pgtest"
)

// The crash tests run the service in a child process (this test binary,
// re-executed with EXACTLYONCE_CHILD set), stop it with SIGKILL at a point
// of a delivery, start a fresh child on the same database and send the
// provider's retry.

const (
	childEnv   = "EXACTLYONCE_CHILD"    // set: run the service instead of the tests
	crashEnv   = "EXACTLYONCE_CRASH_AT" // the point where the child stops and waits to be killed
	keysEnv    = "EXACTLYONCE_KEYS"
	ordersEnv  = "EXACTLYONCE_ORDERS"
	crashedMsg = "stopped at "
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "" {
		os.Exit(m.Run())
	}
	cfg := config{
		addr:        "127.0.0.1:0",
		dbURL:       os.Getenv(pgtest.EnvVar),
		inFlight:    "wait",
		lease:       500 * time.Millisecond,
		keysTable:   os.Getenv(keysEnv),
		ordersTable: os.Getenv(ordersEnv),
	}
	if at := os.Getenv(crashEnv); at != "" {
		cfg.hook = func(point string) {
			if point == at {
				// Tell the parent, then hang until its SIGKILL.
				fmt.Fprintln(os.Stdout, crashedMsg+point)
				select {}
			}
		}
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

type child struct {
	cmd   *exec.Cmd
	url   string
	lines chan string
}

// startChild starts the service in a child process and waits until it
// listens.
func startChild(t *testing.T, cfg config, crashAt string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", crashEnv+"="+crashAt,
		keysEnv+"="+cfg.keysTable, ordersEnv+"="+cfg.ordersTable)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // gone already in most tests
		cmd.Wait()         //nolint:errcheck
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	line := c.next(t)
	addr, ok := strings.CutPrefix(line, "listening on ")
	if !ok {
		t.Fatalf("child said %q, want listening on ADDR", line)
	}
	c.url = "http://" + addr
	return c
}

func (c *child) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatal("the child exited")
		}
		return line
	case <-time.After(30 * time.Second):
		t.Fatal("no word from the child within 30s")
	}
	return ""
}

// kill stops the child with SIGKILL and waits for it to be gone.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := c.cmd.Wait()
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
}

// TestCrash kills the service at each point of a delivery where a crash
// matters, several times each, and then sends the provider's retry to a
// fresh process. The order table holds exactly one row for the event every
// time. When the order had been committed, the retry is answered with the
// committed response rather than run again.
func TestCrash(t *testing.T) {
	points := []struct {
		at        string
		committed bool
	}{
		{"claimed", false},  // after the claim, before any business write
		{"written", false},  // after the order insert and CompleteTx, before the commit
		{"committed", true}, // after the commit, before the response is sent
	}
	pool := pgtest.Pool(t)
	cfg := testConfig(t, pool)
	const rounds = 3
	for _, p := range points {
		t.Run(p.at, func(t *testing.T) {
			for round := range rounds {
				key := fmt.Sprintf("evt_crash_%s_%d", p.at, round)
				body := `{"sku":"lamp","qty":1}`

				victim := startChild(t, cfg, p.at)
				sent := make(chan error, 1)
				go func() {
					_, err := deliver(victim.url, key, body)
					sent <- err
				}()
				if line := victim.next(t); line != crashedMsg+p.at {
					t.Fatalf("child said %q, want %q", line, crashedMsg+p.at)
				}
				victim.kill(t)
				if err := <-sent; err == nil {
					t.Fatal("the delivery to the killed process got an answer")
				}
				rowsAfterCrash := orderRows(t, pool, cfg, key)
				if want := map[bool]int{true: 1, false: 0}[p.committed]; len(rowsAfterCrash) != want {
					t.Fatalf("after the crash: rows %v, want %d", rowsAfterCrash, want)
				}

				// The provider retries, to a fresh process on the same database.
				fresh := startChild(t, cfg, "")
				retry, err := deliver(fresh.url, key, body)
				if err != nil {
					t.Fatal(err)
				}
				ids := orderRows(t, pool, cfg, key)
				if len(ids) != 1 {
					t.Fatalf("round %d: rows %v for the event, want exactly one", round, ids)
				}
				if retry.status != http.StatusCreated || retry.body != orderBody(ids[0]) || retry.header != orderHeader || retry.replayed != p.committed {
					t.Fatalf("round %d: retry answered %+v; want 201 %q %q, replayed %t", round, retry, orderHeader, orderBody(ids[0]), p.committed)
				}
				// And every later re-delivery replays that answer.
				again, err := deliver(fresh.url, key, body)
				if err != nil {
					t.Fatal(err)
				}
				if again != (answer{http.StatusCreated, retry.body, true, orderHeader}) || len(orderRows(t, pool, cfg, key)) != 1 {
					t.Fatalf("round %d: re-delivery %+v", round, again)
				}
				fresh.kill(t)
			}
		})
	}
}
