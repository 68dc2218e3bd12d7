package gateway_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/config"
)

// A Config built by hand that the gateway could not serve (here two routes
// on one path, which would make ServeMux panic) is refused by New with its
// problems, before anything is opened; Reload refuses it the same way and
// the running configuration keeps serving.
func TestNewRefusesAConfigItCannotServe(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:1/hook")
	good := &config.Config{
		Store:  config.Store{Driver: "memory"},
		Audit:  config.Audit{Sink: "none"},
		Routes: []config.Route{{Path: "/a", Upstream: up, Route: idemhook.Route{Source: "a"}}},
	}
	bad := *good
	bad.Routes = append(append([]config.Route(nil), good.Routes...), config.Route{Path: "/a", Upstream: up, Route: idemhook.Route{Source: "b"}})

	var errs config.Errors
	if g, err := gateway.New(t.Context(), &bad, gateway.Options{}); !errors.As(err, &errs) || g != nil {
		t.Fatalf("New(two routes on /a) = %v, %v; want config.Errors", g, err)
	}
	g, err := gateway.New(t.Context(), good, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(t.Context())
	if err := g.Reload(&bad); !errors.As(err, &errs) {
		t.Fatalf("Reload(two routes on /a) = %v, want config.Errors", err)
	}
}

// twilioPost sends a Twilio status callback for message sid to url, signed
// for signedURL (the URL Twilio called), with the X-Forwarded-* a balancer
// in front of the gateway would add.
func twilioPost(t *testing.T, url, signedURL, sid string) gatewaytest.Response {
	t.Helper()
	m := hmac.New(sha1.New, []byte("twilio-auth-token"))
	m.Write([]byte(signedURL + "MessageSid" + sid + "MessageStatusdelivered"))
	return gatewaytest.Post(t, url, "MessageSid="+sid+"&MessageStatus=delivered",
		"Content-Type", "application/x-www-form-urlencoded",
		"X-Twilio-Signature", base64.StdEncoding.EncodeToString(m.Sum(nil)),
		"X-Forwarded-Proto", "https", "X-Forwarded-Host", "hooks.example.com")
}

// A twilio route behind a balancer (a trusted proxy) checks Twilio's
// signature against its public_url, whatever address the gateway listens
// on; the balancer's X-Forwarded-Host and -Proto reach the backend but
// play no part in the check, so the route without public_url refuses the
// same request, 401, though the headers name the right URL. The retry is
// replayed and the backend runs once.
func TestTwilioRouteBehindTrustedProxy(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	url, _, _ := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: {driver: memory}
admin: {listen: off}
audit: {sink: none}
trusted_proxies: [127.0.0.0/8]
routes:
  - path: /twilio/status
    upstream: %[1]s/status
    source: twilio
    provider: twilio
    secrets: [twilio-auth-token]
    provider_options: {public_url: "https://hooks.example.com"}
  - path: /twilio/no-public-url
    upstream: %[1]s/status
    source: twilio-plain
    provider: twilio
    secrets: [twilio-auth-token]
`, up.Srv.URL))
	for attempt := 1; attempt <= 2; attempt++ {
		r := twilioPost(t, url+"/twilio/status", "https://hooks.example.com/twilio/status", "SM1")
		if replayed := r.Header.Get("Idempotent-Replayed") == "true"; r.Status != http.StatusOK || replayed != (attempt == 2) {
			t.Fatalf("attempt %d: %d %q replayed %v", attempt, r.Status, r.Body, replayed)
		}
	}
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("the backend ran %d times, want 1", n)
	}
	got := up.Received()[0].Header
	if got.Get("X-Forwarded-Host") != "hooks.example.com" || got.Get("X-Forwarded-Proto") != "https" {
		t.Fatalf("the backend got X-Forwarded-Host %q, -Proto %q: the trusted balancer's are kept", got.Get("X-Forwarded-Host"), got.Get("X-Forwarded-Proto"))
	}
	r := twilioPost(t, url+"/twilio/no-public-url", "https://hooks.example.com/twilio/no-public-url", "SM2")
	if r.Status != http.StatusUnauthorized || up.Calls.Load() != 1 {
		t.Fatalf("without public_url: %d %q, backend calls %d; want 401 and none", r.Status, r.Body, up.Calls.Load())
	}
	// Signed for the address the gateway really listens on, it passes: the
	// URL is rebuilt from the request itself.
	r = twilioPost(t, url+"/twilio/no-public-url", url+"/twilio/no-public-url", "SM2")
	if r.Status != http.StatusOK || up.Calls.Load() != 2 {
		t.Fatalf("signed for the gateway's own URL: %d %q", r.Status, r.Body)
	}
}

// A reload keeps the keys of a source: the routes of the new configuration
// take over those of the routes they replace, on the same path or another,
// so an event delivered before a reload is replayed after it, not run
// again. Two routes of one configuration with share_keys share them too.
func TestReloadKeepsTheKeysOfASource(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	route := func(path string, extra ...string) string {
		return fmt.Sprintf("  - path: %s\n    upstream: %s/hook\n    source: test\n    header: x-event-id\n", path, up.Srv.URL) + strings.Join(extra, "")
	}
	head := "listen: 127.0.0.1:0\nstore: {driver: memory}\nadmin: {listen: off}\naudit: {sink: none}\nroutes:\n"
	parse := func(text string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("idemhook.yaml", []byte(text), gatewaytest.EnvOf())
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	url, g, _ := serveConfig(t, parse(head+route("/webhooks/test")))
	expect := func(what, path, event string, status int, replayed bool, runs int64) {
		t.Helper()
		r := gatewaytest.Post(t, url+path, `{}`, "X-Event-Id", event)
		if got := r.Header.Get(idemhook.ReplayedHeader) == "true"; r.Status != status || got != replayed || up.Calls.Load() != runs {
			t.Fatalf("%s: %d %q replayed %v, backend runs %d; want %d replayed %v, %d runs", what, r.Status, r.Body, got, up.Calls.Load(), status, replayed, runs)
		}
	}
	expect("evt_1", "/webhooks/test", "evt_1", 200, false, 1)

	if err := g.Reload(parse(head + route("/webhooks/test"))); err != nil {
		t.Fatalf("reload of the same configuration: %v", err)
	}
	expect("evt_1 after a reload", "/webhooks/test", "evt_1", 200, true, 1)
	expect("evt_2 after a reload", "/webhooks/test", "evt_2", 200, false, 2)

	shared := "    share_keys: true\n"
	if err := g.Reload(parse(head + route("/webhooks/moved", shared) + route("/webhooks/also", shared))); err != nil {
		t.Fatalf("reload onto two paths of the source: %v", err)
	}
	expect("the old path after the move", "/webhooks/test", "evt_1", 404, false, 2)
	expect("evt_1 on the new path", "/webhooks/moved", "evt_1", 200, true, 2)
	expect("evt_2 on the other new path", "/webhooks/also", "evt_2", 200, true, 2)
	expect("evt_3 on the new path", "/webhooks/moved", "evt_3", 200, false, 3)
	expect("evt_3 on the other new path", "/webhooks/also", "evt_3", 200, true, 3)
}
