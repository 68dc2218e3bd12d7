package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/syncbuf"
)

// The gateway runs as a real child process, signalled like an operator
// would. The child is the test binary itself, which runs the gateway's main
// (signal handling included) when gatewayChildEnv is set (see
// main_test.go).

// proc is a running gateway process.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	addrs
	done chan struct{}
	err  error // Wait's result, once done is closed
}

var listening = regexp.MustCompile(`msg="idemhook listening" listen=(\S+) admin=(\S*)`)

// startProc runs "idemhook serve --config cfgPath" with env added to the
// test's environment, and returns once it listens. It is killed at the end
// of the test if still running.
func startProc(t *testing.T, cfgPath string, env ...string) *proc {
	t.Helper()
	return startProcWith(t, nil, cfgPath, env...)
}

// startProcWith is startProc with the command run through the program and
// arguments of prefix (prlimit --nofile=256 --, say).
func startProcWith(t *testing.T, prefix []string, cfgPath string, env ...string) *proc {
	t.Helper()
	c := &proc{stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	args := append(prefix[:len(prefix):len(prefix)], os.Args[0])
	c.cmd = exec.Command(args[0], args[1:]...)
	c.cmd.Env = append(append(os.Environ(), gatewayChildEnv+"=serve --config "+cfgPath), env...)
	c.cmd.Stderr = c.stderr
	c.cmd.Stdout = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill()
			<-c.done
		}
	})
	deadline := time.After(60 * time.Second)
	for {
		if m := listening.FindStringSubmatch(c.stderr.String()); m != nil {
			c.Listen, c.Admin = m[1], m[2]
			return c
		}
		select {
		case <-c.done:
			t.Fatalf("the gateway exited before listening: %v\n%s", c.err, c.stderr)
		case <-deadline:
			t.Fatalf("the gateway did not listen within 60s:\n%s", c.stderr)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *proc) url(path string) string      { return "http://" + c.Listen + path }
func (c *proc) adminURL(path string) string { return "http://" + c.Admin + path }

// signal sends sig to the process.
func (c *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the process to exit (at most 60s) and returns its error.
func (c *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not exit within 60s:\n%s", c.stderr)
		return nil
	}
}

// waitLog waits until the child's log holds s.
func (c *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(c.stderr.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", s, c.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
