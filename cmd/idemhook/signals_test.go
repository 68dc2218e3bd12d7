package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhook/idemhook/sqlitestore"
)

// signalConfig is a gateway on a SQLite file (store and audit trail) with
// the routes given.
func signalConfig(db, routes string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %s}
admin: {listen: 127.0.0.1:0}
shutdown_timeout: 20s
routes:
%s`, db, routes)
}

func routeYAML(path, upstream, extra string) string {
	return fmt.Sprintf("  - path: %s\n    upstream: %s/hook\n    source: %s\n%s", path, upstream, strings.TrimPrefix(path, "/webhooks/"), extra)
}

// auditRows counts the audit trail's rows in the SQLite file of a stopped
// gateway.
func auditRows(t *testing.T, db string) int {
	t.Helper()
	d, err := sqlitestore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var n int
	if err := d.QueryRow("SELECT count(*) FROM audit_deliveries").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// traffic sends deliveries from workers, each on its own keep-alive
// connection, until stop is closed or each worker sent max: every event
// twice (the second is a replay). It counts the answers and the failures.
type traffic struct {
	answered, failed atomic.Int64
	mu               sync.Mutex
	errs             []string
	wg               sync.WaitGroup
}

func (tr *traffic) run(url string, workers, max int, stop <-chan struct{}) {
	for w := range workers {
		tr.wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			defer client.CloseIdleConnections()
			for i := range max {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf(`{"id":"w%d-%d"}`, w, i/2)
				resp, err := client.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					tr.failed.Add(1)
					tr.mu.Lock()
					tr.errs = append(tr.errs, err.Error())
					tr.mu.Unlock()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					tr.failed.Add(1)
					tr.mu.Lock()
					tr.errs = append(tr.errs, resp.Status)
					tr.mu.Unlock()
				}
				tr.answered.Add(1)
			}
		})
	}
}

// SIGHUP under traffic, then SIGTERM under traffic, to a real gateway
// process: a valid file replaces the routes without a failed request; an
// invalid one is refused with its errors and the previous routes keep
// serving; SIGTERM drains; every answered delivery is in the audit trail.
func TestSignalsUnderTraffic(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "idemhook.db")
	cfgPath := writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.srv.URL, "")))
	c := startProc(t, cfgPath)

	tr := &traffic{}
	stop := make(chan struct{})
	tr.run(c.url("/webhooks/a"), 4, 400, stop)
	waitAnswered := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); tr.answered.Load() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("only %d answers within 30s", tr.answered.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}

	// A valid file: a second route, a smaller max_body on the first.
	waitAnswered(100)
	writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.srv.URL, "    max_body: 1KiB\n")+routeYAML("/webhooks/b", up.srv.URL, "")))
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "idemhook configuration reloaded")
	if r := post(t, c.url("/webhooks/b"), `{"id":"b1"}`); r.Status != 200 {
		t.Errorf("the route added by the reload: %d %s", r.Status, r.Body)
	}
	if r := post(t, c.url("/webhooks/a"), strings.Repeat("x", 2000)); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("the reloaded max_body of 1KiB: a 2000-byte body got %d", r.Status)
	}

	// An invalid file: refused, the running routes keep serving.
	waitAnswered(300)
	writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.srv.URL, "    ttl: soon\n")))
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "idemhook reload refused")
	if !strings.Contains(c.stderr.String(), `routes[0].ttl: invalid duration \"soon\"`) {
		t.Errorf("the refused reload does not log the file's error:\n%s", c.stderr)
	}
	if r := post(t, c.url("/webhooks/b"), `{"id":"b2"}`); r.Status != 200 {
		t.Errorf("after a refused reload, the route of the last good file: %d", r.Status)
	}
	waitAnswered(500)
	if n := tr.failed.Load(); n != 0 {
		t.Fatalf("%d requests failed across the reloads: %v", n, tr.errs[:min(len(tr.errs), 5)])
	}

	// SIGTERM while the traffic goes on: what was answered is in the
	// trail, and the process exits 0.
	c.signal(t, syscall.SIGTERM)
	if err := c.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, c.stderr)
	}
	close(stop)
	tr.wg.Wait()
	answered := tr.answered.Load() + 3 // and the three sent by hand
	if rows := auditRows(t, db); int64(rows) != answered {
		t.Errorf("%d audit rows for %d answered deliveries", rows, answered)
	}
	t.Logf("%d answered, %d failed (after the listener closed), %d upstream calls", tr.answered.Load(), tr.failed.Load(), up.calls.Load())
}

// SIGINT while deliveries are at the upstream: each is answered, the
// process exits 0 once they are, and each is in the audit trail.
func TestSIGINTDrains(t *testing.T) {
	up := newUpstream(t)
	arrived, release := make(chan struct{}, 100), make(chan struct{})
	up.handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		arrived <- struct{}{}
		<-release
		fmt.Fprintf(w, "call %d", n)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "idemhook.db")
	c := startProc(t, writeConfig(t, dir, signalConfig(db, routeYAML("/webhooks/a", up.srv.URL, ""))))
	const n = 10
	answers := make(chan int, n)
	for i := range n {
		go func() {
			resp, err := http.Post(c.url("/webhooks/a"), "application/json", strings.NewReader(fmt.Sprintf(`{"id":%d}`, i)))
			if err != nil {
				t.Logf("delivery %d: %v", i, err)
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	for range n {
		<-arrived
	}
	c.signal(t, syscall.SIGINT)
	c.waitLog(t, "idemhook shutting down")
	close(release)
	for range n {
		if s := <-answers; s != 200 {
			t.Errorf("a delivery running at SIGINT got %d", s)
		}
	}
	if err := c.wait(t); err != nil {
		t.Fatalf("exit after SIGINT: %v\n%s", err, c.stderr)
	}
	if rows := auditRows(t, db); rows != n {
		t.Errorf("%d audit rows for %d answered deliveries", rows, n)
	}
}

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its
// key, and returns its serial number.
func writeCert(t *testing.T, certPath, keyPath string) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "idemhook test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return serial
}

// The TLS listener serves the certificate of the files, and a SIGHUP after
// they are renewed serves the new one to new connections, while an open
// connection goes on.
func TestTLSCertificateReloadedOnSIGHUP(t *testing.T) {
	up := newUpstream(t)
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := writeCert(t, certPath, keyPath)
	cfg := fmt.Sprintf("tls: {cert: %s, key: %s}\n", certPath, keyPath) +
		signalConfig(filepath.Join(dir, "idemhook.db"), routeYAML("/webhooks/a", up.srv.URL, ""))
	c := startProc(t, writeConfig(t, dir, cfg))

	serialOf := func(client *http.Client, body string) *big.Int {
		t.Helper()
		resp, err := client.Post("https://"+c.Listen+"/webhooks/a", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.TLS == nil {
			t.Fatalf("HTTPS delivery: %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber
	}
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test's self-signed certificate
	}
	kept := newClient()
	if got := serialOf(kept, `{"id":1}`); got.Cmp(first) != 0 {
		t.Fatalf("served certificate %v, want %v", got, first)
	}
	second := writeCert(t, certPath, keyPath)
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "idemhook configuration reloaded")
	if got := serialOf(newClient(), `{"id":2}`); got.Cmp(second) != 0 {
		t.Errorf("after the reload a new connection got certificate %v, want the renewed %v", got, second)
	}
	if got := serialOf(kept, `{"id":3}`); got.Cmp(first) != 0 {
		t.Errorf("the connection opened before the reload changed certificate: %v", got)
	}
	c.signal(t, syscall.SIGTERM)
	if err := c.wait(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}
