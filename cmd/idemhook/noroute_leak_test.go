package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestNoRouteHidesConfigPath: anyone on the internet can request an
// unknown path; the 404 must not tell them where the gateway's
// configuration file is on disk.
func TestNoRouteHidesConfigPath(t *testing.T) {
	up := newUpstream(t)
	path := writeConfig(t, t.TempDir(), routeConfig(up.srv.URL))
	g := startGateway(t, path, startOpts{})
	r := post(t, g.url("/elsewhere"), `{}`)
	if r.Status != http.StatusNotFound {
		t.Fatalf("status = %d, want 404", r.Status)
	}
	if strings.Contains(r.Body, path) || strings.Contains(r.Body, "idemhook.yaml") {
		t.Errorf("404 body shows the config file: %s", r.Body)
	}
	if !strings.Contains(r.Body, "/elsewhere") {
		t.Errorf("404 body does not name the path: %s", r.Body)
	}
}
