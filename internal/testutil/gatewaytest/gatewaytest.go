// Package gatewaytest holds the helpers that the tests of the gateway
// (package gateway, its config, command idemhook and the tests module)
// share: a recording upstream, requests, configuration texts, a getenv
// over pairs, and the comparison of the admin API's statistics. It is for
// tests only.
package gatewaytest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhook/idemhook/gateway/adminapi"
)

// Minimal is the smallest valid configuration.
const Minimal = `routes:
  - path: /webhooks/stone
    upstream: http://127.0.0.1:3000/webhook
    source: stone
`

// EnvOf is a getenv over the pairs kv (name, value, ...).
func EnvOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// WriteConfig writes text to a file in dir and returns its path.
func WriteConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "idemhook.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// RouteConfig is a one-route configuration over the memory store with the
// admin listener on a free port. The extra lines are appended to the route.
func RouteConfig(upstreamURL string, extra ...string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: memory}
admin: {listen: 127.0.0.1:0}
audit: {sink: none}
log: {level: debug}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
%s`, upstreamURL, indent(extra))
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// SQLiteConfig is a one-route configuration on SQLite (store and audit
// trail in one file in dir), admin on a free port.
func SQLiteConfig(dir, upstreamURL string, adminExtra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: sqlite, path: %q}
admin: {listen: 127.0.0.1:0%s}
log: {level: debug}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
  - path: /webhooks/other
    upstream: %s/other
    source: other
`, filepath.Join(dir, "idemhook.db"), adminExtra, upstreamURL, upstreamURL)
}

// QueueConfig is a one-route configuration whose route /webhooks/test
// (source test, keyed by X-Event-Id) queues its events for upstream with
// the queue settings given (the inside of queue: {...}), on the store of
// storeLine (the inside of store: {...}), admin and audit off.
func QueueConfig(storeLine, upstreamURL, settings string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {%s}
admin: {listen: off}
audit: {sink: none}
routes:
  - path: /webhooks/test
    upstream: %s/hook
    source: test
    header: x-event-id
    deliver: queue
    queue: {%s}
`, storeLine, upstreamURL, settings)
}

// SourceStats returns the statistics of source in s; the test fails
// without them.
func SourceStats(t *testing.T, s adminapi.Stats, source string) adminapi.SourceStats {
	t.Helper()
	for _, x := range s.Sources {
		if x.Source == source {
			return x
		}
	}
	t.Fatalf("source %q not in %+v", source, s.Sources)
	return adminapi.SourceStats{}
}

// Rate returns a pointer to f, a duplicate rate.
func Rate(f float64) *float64 { return &f }

// SameWindow fails the test when got is not want.
func SameWindow(t *testing.T, what string, got adminapi.Window, want adminapi.Window) {
	t.Helper()
	rateOf := func(p *float64) string {
		if p == nil {
			return "null"
		}
		return fmt.Sprintf("%.6f", *p)
	}
	if got.Total != want.Total || got.Processed != want.Processed || got.Replayed != want.Replayed ||
		got.Refused != want.Refused || got.Failed != want.Failed || got.Unprotected != want.Unprotected ||
		got.Other != want.Other || got.Duplicates != want.Duplicates ||
		rateOf(got.DuplicateRate) != rateOf(want.DuplicateRate) || fmt.Sprint(got.Outcomes) != fmt.Sprint(want.Outcomes) {
		t.Errorf("%s:\n got %+v Rate %s\nwant %+v Rate %s", what, got, rateOf(got.DuplicateRate), want, rateOf(want.DuplicateRate))
	}
}

// Received is one request the test Upstream got.
type Received struct {
	Method, Path, Query, Host string
	Header                    http.Header
	Body                      []byte
}

// Upstream is a backend that records what it receives. By default it
// answers 200 with a JSON body naming the call number and the body's hash,
// a Set-Cookie header (which must never be replayed) and X-Upstream.
type Upstream struct {
	Srv   *httptest.Server
	Mu    sync.Mutex // held while a request is recorded; a Handle may hold it to record more
	got   []Received
	Calls atomic.Int64
	// Handle, if set, answers call n (1-based) instead of the default.
	Handle func(w http.ResponseWriter, r *http.Request, n int64)
}

// NewUpstream starts an Upstream, closed when the test ends.
func NewUpstream(t *testing.T) *Upstream {
	t.Helper()
	u := &Upstream{}
	u.Srv = httptest.NewServer(u)
	t.Cleanup(u.Srv.Close)
	return u
}

// ServeHTTP records the request and answers it.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.Mu.Lock() // n and the append in one step: Received()[n-1] is this request
	n := u.Calls.Add(1)
	u.got = append(u.got, Received{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), body})
	u.Mu.Unlock()
	if u.Handle != nil {
		u.Handle(w, r, n)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Upstream", "yes")
	fmt.Fprintf(w, `{"call":%d,"sha256":%q}`, n, SHA(body))
}

// Received returns the requests so far, in order.
func (u *Upstream) Received() []Received {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	return append([]Received(nil), u.got...)
}

// SHA is the hex SHA-256 of b.
func SHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Response is what a sender got back.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Post sends a POST. header is name, value pairs.
func Post(t *testing.T, url, body string, header ...string) Response {
	t.Helper()
	return Do(t, http.MethodPost, url, body, header...)
}

// Do sends a request. header is name, value pairs.
func Do(t *testing.T, method, url, body string, header ...string) Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{resp.StatusCode, resp.Header, string(b)}
}

// DecodeJSON decodes the body of r into a T; the test fails if it can't.
func DecodeJSON[T any](t *testing.T, r Response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.Body), &v); err != nil {
		t.Fatalf("decode %q: %v", r.Body, err)
	}
	return v
}
