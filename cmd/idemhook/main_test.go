package main

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/syncbuf"
)

// gatewayChildEnv, when set, makes the test binary run the gateway's main
// instead of the tests: the two-gateway test starts real gateway processes
// that way, without building a binary.
const gatewayChildEnv = "IDEMHOOK_TEST_RUN_GATEWAY"

func TestMain(m *testing.M) {
	if os.Getenv(gatewayChildEnv) != "" {
		os.Args = append([]string{os.Args[0]}, strings.Fields(os.Getenv(gatewayChildEnv))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gatewayProc is a gateway running in a child process.
type gatewayProc struct {
	cmd           *exec.Cmd
	listen, admin string
	log           *syncbuf.Buffer // everything it wrote to stderr
}

var listeningLine = regexp.MustCompile(`msg="idemhook listening" listen=(\S+) admin=(\S+)`)

// startGatewayProcess runs `idemhook serve --config path` in a child process
// (this test binary, see TestMain) and waits until it listens.
func startGatewayProcess(t *testing.T, path string) *gatewayProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), gatewayChildEnv+"=serve --config "+path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{cmd: cmd, log: &syncbuf.Buffer{}}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // stopped already when the test passed
		cmd.Wait()         //nolint:errcheck
	})
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			g.log.Write([]byte(sc.Text() + "\n")) //nolint:errcheck // a buffer
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	select {
	case m := <-found:
		g.listen, g.admin = m[1], m[2]
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway process did not start within 30s; its log:\n%s", g.log)
	}
	return g
}

// kill ends the gateway with SIGKILL, as a crash or an OOM kill would.
func (g *gatewayProc) kill(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	g.cmd.Wait() //nolint:errcheck // killed
}

// stop ends the gateway the way an orchestrator does, with SIGTERM, and
// waits for its graceful shutdown (the audit trail is flushed then).
func (g *gatewayProc) stop(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("gateway process: %v", err)
	}
}
