package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/adminapi"
)

// TestPrefixRouteKeepsEscapes: on a prefix route the rest of the path is
// forwarded as the sender escaped it. An escaped "/" (%2F) inside a segment
// is data, e.g. an id. Decoding it would forward another path than the one
// received.
func TestPrefixRouteKeepsEscapes(t *testing.T) {
	up := newUpstream(t)
	raw := recordEscapedPaths(up)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "path: /webhooks/test", "path: /hooks/", 1)
	cfg = strings.Replace(cfg, "/hook\n", "/in/\n", 1)
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	tests := []pathCase{
		{"/hooks/orders/a%2Fb", "/in/orders/a%2Fb"},
		{"/hooks/plain/path", "/in/plain/path"},
		{"/hooks/sp%20ace", "/in/sp%20ace"},
	}
	wantForwardedPaths(t, g, up, raw, tests)
}

// TestUpstreamPathKeepsEscapes: an upstream URL whose path holds an escaped
// "/" is called with that path, on an exact and on a prefix route.
func TestUpstreamPathKeepsEscapes(t *testing.T) {
	up := newUpstream(t)
	raw := recordEscapedPaths(up)
	cfg := strings.Replace(routeConfig(up.Srv.URL), "/hook\n", "/tenants/a%2Fb/hook\n", 1) +
		"  - path: /p/\n    upstream: " + up.Srv.URL + "/tenants/a%2Fb/\n    source: p\n"
	g := startGateway(t, writeConfig(t, t.TempDir(), cfg), startOpts{})
	tests := []pathCase{
		{"/webhooks/test", "/tenants/a%2Fb/hook"},
		{"/p/x", "/tenants/a%2Fb/x"},
		{"/p/", "/tenants/a%2Fb/"},
	}
	wantForwardedPaths(t, g, up, raw, tests)
}

// pathCase is a path sent to the gateway and the escaped path the upstream
// must receive.
type pathCase struct{ give, want string }

// recordEscapedPaths makes up record the escaped path of every request.
func recordEscapedPaths(up *upstream) *[]string {
	raw := new([]string)
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		up.Mu.Lock()
		*raw = append(*raw, r.URL.EscapedPath())
		up.Mu.Unlock()
	}
	return raw
}

// wantForwardedPaths posts each case (a new event each) and checks the path
// the upstream received.
func wantForwardedPaths(t *testing.T, g *gw, up *upstream, raw *[]string, tests []pathCase) {
	t.Helper()
	for i, tt := range tests {
		if r := post(t, g.url(tt.give), fmt.Sprintf(`{"n":%d}`, i)); r.Status != 200 {
			t.Fatalf("POST %s = %d %s", tt.give, r.Status, r.Body)
		}
		up.Mu.Lock()
		got := (*raw)[i]
		up.Mu.Unlock()
		if got != tt.want {
			t.Errorf("POST %s reached %s, want %s", tt.give, got, tt.want)
		}
	}
}

// TestForwardChunkedAndLarge sends deliveries whose length is not announced
// (chunked), one exactly at max_body and one a byte over it, with a
// repeated header. The upstream must get every body byte for byte and every
// header value in order. The oversized one must not reach it.
func TestForwardChunkedAndLarge(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "max_body: 64KiB")), startOpts{})
	const limit = 64 << 10
	big := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	send := func(body []byte, chunked bool) *http.Response {
		t.Helper()
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length: sent chunked
		}
		req, err := http.NewRequest(http.MethodPost, g.url("/webhooks/test"), rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("X-Multi", "one")
		req.Header.Add("X-Multi", "two")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	tests := []struct {
		name       string
		body       []byte
		chunked    bool
		wantStatus int
		forwarded  bool
	}{
		{"chunked small", []byte(`{"id":"chunked"}`), true, http.StatusOK, true},
		{"chunked at the limit", big(limit, 1), true, http.StatusOK, true},
		{"announced at the limit", big(limit, 2), false, http.StatusOK, true},
		{"chunked one byte over", big(limit+1, 3), true, http.StatusRequestEntityTooLarge, false},
		{"announced one byte over", big(limit+1, 4), false, http.StatusRequestEntityTooLarge, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(up.Received())
			resp := send(tt.body, tt.chunked)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			got := up.Received()[before:]
			if !tt.forwarded {
				if len(got) != 0 {
					t.Fatalf("an oversized body reached the upstream")
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(got))
			}
			if !bytes.Equal(got[0].Body, tt.body) {
				t.Errorf("body differs: got %d bytes, sent %d", len(got[0].Body), len(tt.body))
			}
			if v := got[0].Header.Values("X-Multi"); !slices.Equal(v, []string{"one", "two"}) {
				t.Errorf("X-Multi = %q, want [one two]", v)
			}
		})
	}
}

// TestUpstreamErrorHidesAddress: the 502 a sender gets when the upstream is
// down says why (connection refused) but not where the upstream is. The
// webhook listener faces the internet. The backend's internal address and
// port are for the operator's log, which has them.
func TestUpstreamErrorHidesAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig("http://"+addr)), startOpts{})
	r := post(t, g.url("/webhooks/test"), `{"id":"evt_hidden"}`)
	if r.Status != http.StatusBadGateway {
		t.Fatalf("status = %d %s, want 502", r.Status, r.Body)
	}
	if !strings.Contains(r.Body, "connection refused") {
		t.Errorf("502 body %s does not say why", r.Body)
	}
	_, port, _ := net.SplitHostPort(addr)
	if strings.Contains(r.Body, addr) || strings.Contains(r.Body, ":"+port) {
		t.Errorf("502 body shows the upstream address %s: %s", addr, r.Body)
	}
	if !strings.Contains(g.stderr.String(), addr) {
		t.Errorf("the log does not name the upstream %s:\n%s", addr, g.stderr)
	}
}

// TestForwardedHeadersReplaced: X-Forwarded-* and Forwarded sent by the
// caller are not trusted. The upstream gets the gateway's own values, as
// docs/gateway.md says.
func TestForwardedHeadersReplaced(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL)), startOpts{})
	r := post(t, g.url("/webhooks/test"), `{"id":"xff"}`,
		"X-Forwarded-For", "203.0.113.9", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https",
		"Forwarded", "for=203.0.113.9")
	if r.Status != http.StatusOK {
		t.Fatalf("status = %d %s", r.Status, r.Body)
	}
	in := up.Received()[0]
	checks := []struct{ name, got, want string }{
		{"X-Forwarded-For", in.Header.Get("X-Forwarded-For"), "127.0.0.1"},
		{"X-Forwarded-Host", in.Header.Get("X-Forwarded-Host"), g.Listen},
		{"X-Forwarded-Proto", in.Header.Get("X-Forwarded-Proto"), "http"},
		{"Forwarded", in.Header.Get("Forwarded"), ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("upstream %s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

// TestSenderDisconnectStillStores: providers give up on a slow answer
// (iFood after 5 s, Slack after 3 s) and retry. The backend, like most
// (NestJS included), keeps processing when the gateway's connection to it
// closes. So the gateway must not abort its upstream call when the sender
// hangs up. It lets the backend answer, stores the answer, and replays it
// to the retry. Aborting released the claim and forwarded the retry again,
// and the event was processed twice.
func TestSenderDisconnectStillStores(t *testing.T) {
	up := newUpstream(t)
	arrived, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	up.Handle = func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			close(arrived)
			<-release // a backend that does not watch its connection
			defer close(finished)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("call " + string(rune('0'+n))))
	}
	g := startGateway(t, writeConfig(t, t.TempDir(), routeConfig(up.Srv.URL, "header: x-key")), startOpts{})

	ctx, hangUp := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url("/webhooks/test"), strings.NewReader(`{"id":"evt_slow"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-key", "k1")
	sent := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	<-arrived
	hangUp() // the provider's timeout
	if err := <-sent; err == nil {
		t.Fatal("the sender's request was not cut")
	}
	close(release)
	<-finished
	state := ""
	eventually(t, "the first delivery to be settled", func() bool {
		r := do(t, "GET", g.adminURL("/admin/keys/test/k1"), "")
		if r.Status == http.StatusNotFound {
			state = "absent"
			return true
		}
		state = decodeJSON[adminapi.Record](t, r).State
		return state != "pending"
	})
	if state != "completed" {
		t.Fatalf("after the sender hung up and the backend answered, the key is %s, want completed", state)
	}
	r := post(t, g.url("/webhooks/test"), `{"id":"evt_slow"}`, "x-key", "k1")
	if r.Body != "call 1" || r.Header.Get(idemhook.ReplayedHeader) != "true" || up.Calls.Load() != 1 {
		t.Fatalf("retry = %d %q replayed=%q, upstream calls %d; want the stored \"call 1\" replayed, 1 call",
			r.Status, r.Body, r.Header.Get(idemhook.ReplayedHeader), up.Calls.Load())
	}
}
