package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/redisstore"
)

// The fault suite: the scenarios that prove the gateway loses nothing and,
// where its store promises it, runs nothing twice under faults. Each is a
// test of its own elsewhere (with its assertions); the suite runs them one
// after another within a time budget and prints one table. It is behind a
// flag: .ci/run runs it with a bounded budget.
//
//	go test ./cmd/idemhook -run TestFaultSuite -v -faults -faults.budget 5m
//
// (the package before the flags: go test reads the flags it does not know
// as the test binary's only after the packages).
var (
	faultsFlag   = flag.Bool("faults", false, "run the fault suite (TestFaultSuite) and print its table")
	faultsBudget = flag.Duration("faults.budget", 5*time.Minute, "with -faults: stop starting scenarios once this much time has passed")
)

// faultRow is one line of the fault suite's table.
type faultRow struct {
	Scenario string
	Sent     string // what was sent: events, requests
	Ran      int    // runs at the backend
	Lost     int    // events never run (must be 0)
	Twice    int    // events run more than once
	TwiceOK  string // why twice may be above 0 here, "" when it must be 0
	PeakRSS  int64  // the gateway's peak resident set, bytes; 0: not measured
	Note     string
}

func TestFaultSuite(t *testing.T) {
	if !*faultsFlag {
		t.Skip("the fault suite runs with -faults (go test ./cmd/idemhook -run TestFaultSuite -v -faults)")
	}
	start := time.Now()
	var rows []faultRow
	scenarios := []struct {
		name string
		run  func(t *testing.T) faultRow
	}{
		{"kill -9 mid-delivery (SQLite)", faultKill9},
		{"full disk (SQLite on a small tmpfs)", faultFullDisk},
		{"PostgreSQL restarted (on_store_error: closed)", func(t *testing.T) faultRow { return faultPostgres(t, "closed") }},
		{"PostgreSQL restarted (on_store_error: open)", func(t *testing.T) faultRow { return faultPostgres(t, "open") }},
		{"flood of 5MiB bodies under a 512MiB limit", faultFlood},
		{"a gateway frozen past its lease (SIGSTOP, PostgreSQL)", faultStall},
		{"Redis Sentinel failover, wait_replicas: 1 (replica 30ms behind)", func(t *testing.T) faultRow { return faultFailover(t, 1) }},
		{"Redis Sentinel failover, no waiting (replica 30ms behind)", func(t *testing.T) faultRow { return faultFailover(t, 0) }},
	}
	for _, sc := range scenarios {
		if time.Since(start) > *faultsBudget {
			rows = append(rows, faultRow{Scenario: sc.name, Note: "not run: past -faults.budget"})
			continue
		}
		var row faultRow
		ok := t.Run(sc.name, func(t *testing.T) {
			row = sc.run(t)
			row.Scenario = sc.name
			if row.Lost != 0 {
				t.Errorf("%d events lost", row.Lost)
			}
			if row.Twice != 0 && row.TwiceOK == "" {
				t.Errorf("%d events ran twice", row.Twice)
			}
		})
		if row.Scenario == "" {
			row = faultRow{Scenario: sc.name, Note: "skipped or failed: see above"}
			if ok {
				row.Note = "skipped: see above"
			}
		}
		rows = append(rows, row)
	}
	table := faultTable(rows)
	t.Log("\n" + table)
	fmt.Println(table)
}

// faultTable formats rows as a Markdown table.
func faultTable(rows []faultRow) string {
	var b strings.Builder
	b.WriteString("| scenario | sent | ran | lost | ran twice | peak RSS | note |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		rss := "-"
		if r.PeakRSS > 0 {
			rss = fmt.Sprintf("%d MiB", r.PeakRSS>>20)
		}
		twice := fmt.Sprint(r.Twice)
		if r.TwiceOK != "" {
			twice += " (" + r.TwiceOK + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s |\n", r.Scenario, r.Sent, r.Ran, r.Lost, twice, rss, r.Note)
	}
	return b.String()
}

func tallyRow(tl gatewaytest.Tally) faultRow {
	return faultRow{
		Sent: fmt.Sprintf("%d events × %d, %d requests", tl.Events, tl.Deliveries/max(tl.Events, 1), tl.Sent),
		Ran:  tl.Ran, Lost: tl.Lost, Twice: tl.RanTwice,
	}
}

// freeAddr returns a loopback address no one listens on now, for a gateway
// that must come back on the same one after a kill.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// faultSQLiteConfig is the configuration of a gateway on the SQLite file
// db, listening on listen, whose route /webhooks/test keys on X-Event-Id
// and forwards to upstream.
func faultSQLiteConfig(listen, db, upstream, onStoreError string) string {
	return fmt.Sprintf(`listen: %s
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0}
audit: {sink: none}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
    header: x-event-id
    on_store_error: %s
`, listen, db, upstream, onStoreError)
}

// faultKill9: a gateway on SQLite is killed with SIGKILL while deliveries
// are at the backend, and started again on the same file and address. The
// SQLite store holds its claims in the process, so the restarted gateway
// processes the retries of the deliveries cut short at once; their runs
// at the backend before the kill had no answer stored, so those events may
// run twice (at most the deliveries in flight at the kill).
func faultKill9(t *testing.T) faultRow {
	backend := gatewaytest.NewEventBackend(t)
	backend.Delay = 5 * time.Millisecond
	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := writeConfig(t, dir, faultSQLiteConfig(addr, filepath.Join(dir, "idemhook.db"), backend.URL, "open"))
	p := startProc(t, cfg)
	var peak int64
	tl := gatewaytest.RunTraffic(t, backend, gatewaytest.Traffic{
		URL: "http://" + addr + "/webhooks/test", Events: 400, Senders: 8, Rate: 100,
		Fault: func() error {
			for wait := time.Now().Add(10 * time.Second); backend.InFlight() == 0; time.Sleep(100 * time.Microsecond) {
				if time.Now().After(wait) {
					return fmt.Errorf("no delivery at the backend within 10s to kill the gateway under")
				}
			}
			peak = max(peak, peakRSS(t, p.cmd.Process.Pid))
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return err
			}
			<-p.done
			p = startProc(t, cfg)
			return nil
		},
	})
	row := tallyRow(tl)
	row.PeakRSS = max(peak, peakRSS(t, p.cmd.Process.Pid))
	row.TwiceOK = "deliveries at the backend at the kill: their answers were never stored"
	return row
}

// faultFullDisk: the SQLite store's file lives on a 32MiB tmpfs, which a
// file then fills. Completions fail: with on_store_error: closed the
// deliveries get 503 and the providers retry; once the file is removed the
// gateway serves again. Needs root to mount the tmpfs (skipped otherwise).
func faultFullDisk(t *testing.T) faultRow {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() }) //nolint:errcheck
	backend := gatewaytest.NewEventBackend(t)
	cfg := writeConfig(t, t.TempDir(), faultSQLiteConfig("127.0.0.1:0", filepath.Join(dir, "idemhook.db"), backend.URL, "closed"))
	p := startProc(t, cfg)
	filler := filepath.Join(dir, "filler")
	tl := gatewaytest.RunTraffic(t, backend, gatewaytest.Traffic{
		URL: p.url("/webhooks/test"), MetricsURL: p.adminURL("/metrics"), Events: 400, Senders: 8, Rate: 100,
		Fault: func() error {
			f, err := os.Create(filler)
			if err != nil {
				return err
			}
			buf := make([]byte, 1<<20)
			for {
				if _, err := f.Write(buf); err != nil {
					break // ENOSPC: the disk is full
				}
			}
			f.Close()
			time.Sleep(2 * time.Second)
			return os.Remove(filler)
		},
	})
	row := tallyRow(tl)
	row.PeakRSS = peakRSS(t, p.cmd.Process.Pid)
	row.Note = fmt.Sprintf("%d requests refused during the fault, %d store errors", tl.FaultRefused, tl.StoreErrors)
	return row
}

func faultPostgres(t *testing.T, policy string) faultRow {
	r := postgresRestart(t, policy, 8)
	row := tallyRow(r.Tally)
	if policy == "open" {
		row.TwiceOK = "fail-open runs the deliveries made during the outage unprotected"
	}
	row.Note = fmt.Sprintf("/readyz 200 %v after the restart; %d answers refused at the crash, stored later", r.Ready.Round(time.Millisecond), len(r.Unstored))
	return row
}

func faultFlood(t *testing.T) faultRow {
	f := floodRun(t, 300, 5<<20-1024, 512<<20, 500*time.Millisecond)
	return faultRow{
		Sent: fmt.Sprintf("%d events of 5MiB, %d requests (%d answered 503, %d cut mid-body)", f.Events, f.Sent, f.Refused503, f.ConnErrors),
		Ran:  f.Ran, Lost: f.Lost, Twice: f.RanTwice, PeakRSS: f.PeakRSS,
		Note: fmt.Sprintf("limit %d MiB (GOMEMLIMIT and a cgroup), %d OOM kills", f.Limit>>20, f.CgroupOOMKills),
	}
}

// faultStall: gateway A is frozen (SIGSTOP) while the backend runs its
// request; the retry goes to gateway B on the same PostgreSQL, which takes
// the lapsed claim over with a larger fence. The backend is called twice
// (by design: A's call was under way) and commits the effect once,
// refusing A's late commit by its fence.
func faultStall(t *testing.T) faultRow {
	calls, committed, refused := frozenGateway(t)
	return faultRow{
		Sent: "1 event, 3 deliveries (to A, to B, then to both)",
		Ran:  int(calls), Twice: max(int(calls)-1, 0),
		TwiceOK: fmt.Sprintf("the frozen gateway's call was under way; the effect committed %d time(s), %d stale commit(s) refused by the fence", len(committed), len(refused)),
	}
}

// faultFailover: a burst of events completed on a Redis master whose
// replica gets the replication stream 30ms late; the master is killed
// right after the burst, Sentinel promotes the replica, and every event is
// delivered again (RedisFailover, redisfailover_test.go). With wait_replicas the
// completions waited for the replica: none is lost, none runs twice.
// Without, the completions of the last 30ms are lost with the master, and
// those events run again.
func faultFailover(t *testing.T, waitReplicas int) faultRow {
	sc := RedisFailover{Lag: 30 * time.Millisecond, Store: redisstore.Config{WaitReplicas: waitReplicas}}
	if waitReplicas > 0 {
		sc.Store.WaitTimeout = time.Second
	}
	c := sc.Run(t)
	row := faultRow{
		Sent: fmt.Sprintf("%d events, then each again after the failover", c.Sent),
		Ran:  c.Runs, Lost: c.Sent - c.Ran, Twice: c.RanTwice,
		Note: fmt.Sprintf("%d records lost with the master; burst %v", c.Lost, c.Burst.Round(time.Millisecond)),
	}
	if waitReplicas == 0 {
		row.TwiceOK = "asynchronous replication: completions the replica had not received"
	}
	return row
}
