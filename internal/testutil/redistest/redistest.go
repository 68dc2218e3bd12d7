// Package redistest gives tests a Redis. It is either the shared server
// named by IDEMHOOK_REDIS_URL, or private redis-server processes (a
// standalone server to kill and restart, a Sentinel, a Cluster) on free
// loopback ports, stopped when the test ends.
//
// Every helper follows one rule when what it needs is missing (the
// variable, the redis-server or redis-cli binary). The test is skipped if
// IDEMHOOK_REDIS_URL is unset and fails if it is set, since a run that asks
// for Redis must not pass silently without it.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL is the variable naming the shared Redis tests use.
const EnvURL = "IDEMHOOK_REDIS_URL"

// Bounds on waiting for a server or a cluster to come up.
const (
	startTimeout   = 15 * time.Second
	clusterTimeout = 30 * time.Second
)

// URL returns the Redis URL in IDEMHOOK_REDIS_URL after checking that the
// server answers PING. It skips the test when the variable is unset and
// fails it when the URL is invalid or the server unreachable.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		t.Skipf("%s is not set: skipping a test that needs Redis (e.g. %s=redis://127.0.0.1:6379/0)", EnvURL, EnvURL)
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("%s=%q: %v", EnvURL, u, err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("%s=%q is set but Redis is unreachable: %v", EnvURL, u, err)
	}
	return u
}

// Client returns a client of the Redis in IDEMHOOK_REDIS_URL (see URL:
// the test skips when it is unset), closed when the test ends.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opts, err := redis.ParseURL(URL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	c := redis.NewClient(opts)
	tb.Cleanup(func() { c.Close() })
	return c
}

// requireBinaries skips or fails the test (see the package rule) when one of
// the named programs is not on PATH.
func requireBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv(EnvURL) == "" {
				t.Skipf("%s not found on PATH and %s unset: skipping a test that starts its own Redis", name, EnvURL)
			}
			t.Fatalf("%s is set but %s is not on PATH: install Redis 7 (e.g. apt-get install redis-server): %v", EnvURL, name, err)
		}
	}
}

// Server is a redis-server process owned by a test.
type Server struct {
	port int
	dir  string
	lead []string // arguments before the standard options (a config file)
	args []string // arguments after them

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartServer starts redis-server on a free loopback port with its own
// temporary directory, no persistence, no delay before a replica's first
// synchronization, and the extra args (redis-server
// command-line options such as "--maxmemory", "10mb"), waits until it answers
// PING, and kills it when the test ends.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServer(t, func(s *Server) error {
		s.args = args
		return nil
	})
}

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) on a free
// loopback port that monitors the master at addr under name with a quorum
// of 1, waits until it answers PING, and kills it when the test ends. Point
// redis.NewFailoverClient at its Addr with MasterName name. Each of
// settings is a further line of its configuration file, after the monitor
// line, such as "sentinel down-after-milliseconds <name> 200".
func StartSentinel(t testing.TB, name, addr string, settings ...string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", addr, err)
	}
	return startServer(t, func(s *Server) error {
		// Sentinel requires a writable config file and rewrites it.
		conf := filepath.Join(s.dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %s %s %s 1\n", name, host, port)
		for _, line := range settings {
			text += line + "\n"
		}
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		s.lead = []string{conf, "--sentinel"}
		return nil
	})
}

// StartReplica starts a redis-server as StartServer does, replicating the
// master at addr (--replicaof), and waits until the master streams its
// writes to it: a key written on the master (through addr) has reached the
// replica. A link up (master_link_status:up) is not enough: after a
// diskless full synchronization, Redis 7 holds the stream until the
// replica's first acknowledgement, up to a second later, and a master that
// dies meanwhile takes every write since the synchronization along.
func StartReplica(t testing.TB, addr string, args ...string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("redistest: master address %q: %v", addr, err)
	}
	s := StartServer(t, append([]string{"--replicaof", host, port}, args...)...)
	master := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer master.Close()
	replica := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer replica.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	marker := "redistest:replica:" + strconv.Itoa(s.port)
	if err := master.Set(ctx, marker, "streaming", 0).Err(); err != nil {
		t.Fatalf("redistest: writing a marker on the master %s: %v", addr, err)
	}
	defer master.Del(context.Background(), marker)
	for {
		v, err := replica.Get(ctx, marker).Result()
		if err == nil && v == "streaming" {
			return s
		}
		select {
		case <-ctx.Done():
			info, _ := replica.Info(context.Background(), "replication").Result()
			t.Fatalf("redistest: a write on %s did not reach the replica on %s within %v (GET: %v; INFO replication %q); log:\n%s",
				addr, s.Addr(), startTimeout, err, info, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startServer starts a server that setup may configure further (its
// arguments may depend on its directory and port). It retries with a new
// port when the one it picked was taken in the meantime.
func startServer(t testing.TB, setup func(s *Server) error) *Server {
	t.Helper()
	requireBinaries(t, "redis-server")
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: finding a free port: %v", err)
		}
		dir := t.TempDir()
		s := &Server{port: port, dir: dir}
		if err := setup(s); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: %v", lastErr)
	return nil
}

// Addr returns the server's address, "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns a URL for database 0 of the server, "redis://127.0.0.1:<port>/0".
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill stops the server at once (SIGKILL), as a crash would, and waits for
// the process to exit. Clients see refused connections afterwards. Killing a
// stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server if it is running and starts a fresh, empty one on
// the same port and directory with the same options, waiting until it
// answers PING. It fails the test if the server can't start (for instance
// because another process took the port meanwhile).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.killLocked()
	s.mu.Unlock()
	if err := s.start(); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

// LogTail returns the last 20 lines of the server's log, for a test's
// messages.
func (s *Server) LogTail() string { return s.logTail() }

// start runs redis-server and waits until it answers PING or exits.
func (s *Server) start() error {
	argv := append([]string(nil), s.lead...)
	argv = append(argv,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		// A replica's first synchronization starts at once, instead of
		// 5s later (Redis 7's default for diskless replication).
		"--repl-diskless-sync-delay", "0",
		"--dir", s.dir,
		"--logfile", s.logPath(),
	)
	argv = append(argv, s.args...)
	cmd := exec.Command("redis-server", argv...)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			s.mu.Lock()
			s.cmd = nil
			s.mu.Unlock()
			return fmt.Errorf("redis-server on port %d exited during startup (%v); log:\n%s", s.port, cmd.ProcessState, s.logTail())
		default:
		}
		if err := ping(s.Addr()); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %v; log:\n%s", s.port, startTimeout, err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail returns the last lines of the server's log, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// ping sends PING in RESP and expects +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartCluster starts a Redis Cluster of masters (at least 3) master nodes
// and no replicas on free loopback ports, assigns the slots with
// redis-cli --cluster create, waits until every node reports
// cluster_state:ok, and returns the nodes' addresses. The servers are killed
// when the test ends.
func StartCluster(t testing.TB, masters int) []string {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	requireBinaries(t, "redis-server", "redis-cli")
	addrs := make([]string, masters)
	for i := range addrs {
		s := startServer(t, func(s *Server) error {
			s.args = []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(s.dir, "nodes-"+strconv.Itoa(s.port)+".conf"),
				"--cluster-node-timeout", "5000",
			}
			return nil
		})
		addrs[i] = s.Addr()
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	for _, addr := range addrs {
		if err := waitClusterOK(ctx, addr); err != nil {
			t.Fatalf("redistest: cluster node %s: %v", addr, err)
		}
	}
	return addrs
}

// waitClusterOK polls CLUSTER INFO on one node until it says
// cluster_state:ok or ctx ends.
func waitClusterOK(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var last string
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = strings.TrimSpace(info)
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("cluster_state not ok: %s", last), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// UsedMemory returns the used_memory of the server behind client, from
// INFO memory.
func UsedMemory(tb testing.TB, client *redis.Client) int64 {
	tb.Helper()
	info, err := client.Info(context.Background(), "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("INFO memory has no used_memory")
	return 0
}

// DeletePrefix deletes every key of client's database that starts with
// prefix (which holds no glob metacharacters), in batches of 1000, and
// returns how many it deleted. A test that wrote under its own prefix calls
// it to leave a shared database as it found it, without flushing anything.
func DeletePrefix(ctx context.Context, client *redis.Client, prefix string) (int64, error) {
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	var deleted int64
	flush := func() error {
		n, err := client.Unlink(ctx, keys...).Result()
		deleted += n
		keys = keys[:0]
		return err
	}
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 1000 {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return deleted, err
	}
	if len(keys) > 0 {
		return deleted, flush()
	}
	return deleted, nil
}
