package main

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
	g := &gatewayProc{cmd: cmd}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // stopped already when the test passed
		cmd.Wait()         //nolint:errcheck
	})
	found := make(chan []string, 1)
	var log strings.Builder
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	select {
	case m := <-found:
		g.listen, g.admin = m[1], m[2]
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the gateway process did not start within 30s; its log:\n%s", log.String())
	}
	return g
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
