package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestUpstreamErrorHidesAddress: the 502 a sender gets when the upstream is
// down says why (connection refused) but not where the upstream is: the
// webhook listener faces the internet, and the backend's internal address
// and port are for the operator's log, which has them.
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
