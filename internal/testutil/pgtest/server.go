package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A private server: a test that stops PostgreSQL must not stop the shared
// one on 5432 that the other tests (and other test runs) use. StartServer
// runs its own postmaster on a free loopback port, over a data directory of
// its own, and the test stops, kills and starts it at will.
//
// It follows the package's rule: the test is skipped when
// IDEMHOOK_POSTGRES_URL is unset and fails when it is set but the server's
// programs (initdb, postgres) can't be found or run, since a run that asks
// for PostgreSQL must not pass silently without it.

// serverStartTimeout bounds initdb, and each start until the server accepts
// a connection (crash recovery included).
const serverStartTimeout = 60 * time.Second

// Server is a PostgreSQL server process owned by a test. Its methods are
// safe for concurrent use.
type Server struct {
	bin  string // the directory of initdb and postgres
	dir  string // the data directory's parent: data/, the socket, the log
	port int
	as   *user.User // the OS user the server runs as; nil: this process's

	starting sync.Mutex // held by Start, so that two calls never start two postmasters

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartServer creates a fresh cluster (initdb) in a temporary directory and
// starts it on a free port of 127.0.0.1: trust authentication for user
// postgres, fsync off, small shared buffers, its Unix socket in its own
// directory. It waits until the server accepts connections, and kills it
// and removes the directory when the test ends. PostgreSQL refuses to run
// as root, so under root the server runs as the OS user postgres.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	skipUnlessAsked(tb)
	bin, err := binDir()
	if err != nil {
		tb.Fatalf("pgtest: %s is set, but %v: install PostgreSQL's server (e.g. apt-get install postgresql)", EnvVar, err)
	}
	var as *user.User
	if os.Geteuid() == 0 {
		if as, err = user.Lookup("postgres"); err != nil {
			tb.Fatalf("pgtest: PostgreSQL refuses to run as root, and there is no OS user postgres to run it as: %v", err)
		}
	}
	// Not tb.TempDir: its parent is private to root, so that the user
	// postgres could not reach a directory inside it.
	dir, err := os.MkdirTemp("", "idemhook-pgtest-")
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	s := &Server{bin: bin, dir: dir, as: as}
	tb.Cleanup(func() {
		s.Kill()
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("pgtest: removing %s: %v", dir, err)
		}
	})
	if err := s.initdb(); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	for range 3 { // another process may take the port between its choice and the bind
		if s.port, err = freePort(); err != nil {
			tb.Fatalf("pgtest: finding a free port: %v", err)
		}
		if err = s.start(); err == nil {
			return s
		}
	}
	tb.Fatalf("pgtest: %v", err)
	return nil
}

// skipUnlessAsked skips the test when IDEMHOOK_POSTGRES_URL is unset.
func skipUnlessAsked(tb testing.TB) {
	tb.Helper()
	if os.Getenv(EnvVar) == "" {
		tb.Skip(EnvVar + " is unset; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL tests, which also start private servers")
	}
}

// binDir finds the directory holding initdb and postgres: pg_config's
// bindir, else the directory of initdb on PATH (following symbolic links),
// else the newest /usr/lib/postgresql/*/bin (Debian keeps the server
// programs there, off PATH).
func binDir() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	var tried []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if has(dir) {
			return dir, nil
		}
		tried = append(tried, dir)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil {
			if dir := filepath.Dir(p); has(dir) {
				return dir, nil
			}
			tried = append(tried, filepath.Dir(p))
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { // 9.6 < 15 < 17
		return compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if has(dirs[i]) {
			return dirs[i], nil
		}
		tried = append(tried, dirs[i])
	}
	return "", fmt.Errorf("no directory holds both initdb and postgres (looked at pg_config --bindir, initdb on PATH, /usr/lib/postgresql/*/bin: %q)", tried)
}

// compareVersions compares dotted version numbers ("9.6", "15").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// command returns the server program name run as the server's user, its
// output appended to the log.
func (s *Server) command(name string, args ...string) (*exec.Cmd, *os.File, error) {
	log, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "TZ=UTC", "HOME=" + s.dir}
	cmd.Stdout, cmd.Stderr = log, log
	attr, err := procAttr(s.as)
	if err != nil {
		log.Close()
		return nil, nil, err
	}
	cmd.SysProcAttr = attr
	return cmd, log, nil
}

// initdb creates the cluster in data/, owned by the server's user.
func (s *Server) initdb() error {
	if s.as != nil {
		if err := chown(s.dir, s.as); err != nil {
			return err
		}
	}
	cmd, log, err := s.command("initdb", "-D", s.dataDir(), "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if err != nil {
		return err
	}
	defer log.Close()
	if s.as != nil {
		if err := chown(s.logPath(), s.as); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(serverStartTimeout):
		_ = cmd.Process.Kill()
		err = fmt.Errorf("not done within %v", serverStartTimeout)
		<-waited
	}
	if err != nil {
		return fmt.Errorf("initdb -D %s: %w; log:\n%s", s.dataDir(), err, s.logTail())
	}
	return nil
}

// URL returns the URL of the server's database postgres as user postgres,
// with sslmode=disable.
func (s *Server) URL() string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/postgres", RawQuery: "sslmode=disable"}
	return u.String()
}

// Start starts the server again after Stop or Kill, on the same port and
// data directory, and returns once it accepts connections (after crash
// recovery, if it was stopped so). It fails if the server can't start, for
// instance because another process took the port meanwhile. Starting a
// running server does nothing. It does not fail the test itself, so that a
// goroutine other than the test's may call it.
func (s *Server) Start() error {
	s.starting.Lock()
	defer s.starting.Unlock()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return nil
	}
	if err := s.start(); err != nil {
		return fmt.Errorf("pgtest: start: %w", err)
	}
	return nil
}

// Restart stops the server as Stop does and starts it again.
func (s *Server) Restart() error {
	s.Stop()
	return s.Start()
}

// Stop shuts the server down in immediate mode (SIGQUIT to the postmaster,
// what pg_ctl stop -m immediate sends) and waits for it to exit. Its
// backends end at once without a checkpoint, each telling its client
// "terminating connection due to immediate shutdown command", so to the
// clients this is a crash; the next start runs crash recovery. What was
// committed stays committed (fsync is off: only the machine's crash could
// lose it). Stopping a stopped server does nothing.
func (s *Server) Stop() { s.signal(sigQuit) }

// Kill kills the postmaster and every process of its group (the backends)
// with SIGKILL, as the kernel's OOM killer or a crash would: the clients'
// connections just close. The next start runs crash recovery. Killing a
// stopped server does nothing.
func (s *Server) Kill() { s.signal(sigKill) }

func (s *Server) signal(sig signalKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = sendSignal(s.cmd.Process, sig)
	select {
	case <-s.done:
	case <-time.After(serverStartTimeout):
		// A postmaster stuck in its shutdown: kill it and its backends.
		_ = sendSignal(s.cmd.Process, sigKill)
		<-s.done
	}
	s.cmd = nil
}

// start runs the postmaster and waits until it accepts a connection. A
// backend of a killed server may still be attached to the old shared memory
// for a moment (SIGKILL is delivered, not awaited): the new postmaster then
// refuses to start, and start tries again.
func (s *Server) start() error {
	deadline := time.Now().Add(serverStartTimeout)
	for {
		err := s.startOnce(deadline)
		if err == nil || !errors.Is(err, errShmemInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var errShmemInUse = errors.New("the shared memory of the previous postmaster is still in use")

// startOnce runs the postmaster and waits until it accepts a connection or
// exits.
func (s *Server) startOnce(deadline time.Time) error {
	cmd, log, err := s.command("postgres", "-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB",
		"-c", "max_connections=40",
		"-c", "logging_collector=off",
	)
	if err != nil {
		return err
	}
	defer log.Close()
	var from int64 // where this start's lines begin in the log
	if fi, err := log.Stat(); err == nil {
		from = fi.Size()
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	for {
		select {
		case <-done:
			s.mu.Lock()
			s.cmd = nil
			s.mu.Unlock()
			tail := s.logTail()
			if b, err := os.ReadFile(s.logPath()); err == nil && int64(len(b)) >= from &&
				strings.Contains(string(b[from:]), "pre-existing shared memory block") {
				return errShmemInUse
			}
			return fmt.Errorf("postgres on port %d exited during startup (%v); log:\n%s", s.port, cmd.ProcessState, tail)
		default:
		}
		err := connect(s.URL())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("postgres on port %d accepted no connection within %v: %v; log:\n%s", s.port, serverStartTimeout, err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connect opens and closes one connection to url.
func connect(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
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

// chown gives path to the user u.
func chown(path string, u *user.User) error {
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("user %s: %w", u.Username, err)
	}
	return os.Chown(path, uid, gid)
}
