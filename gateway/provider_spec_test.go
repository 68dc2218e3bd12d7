package gateway_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// TestProviderSpecRoute: a route whose provider: is a spec, served over
// HTTP. The GET challenge is answered by the gateway; a signed delivery is
// forwarded once and answered the spec's success status; its re-signed
// retry is replayed; a forgery and a stale signature get 401 and reach
// nothing.
func TestProviderSpecRoute(t *testing.T) {
	up := gatewaytest.NewUpstream(t)
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /acme
    upstream: %s/hook
    source: acme
    secrets: [acme-old, acme-secret]
    provider:
      signature:
        algorithm: hmac-sha256
        header: Acme-Signature
        format: pairs
        timestamp_key: t
        signature_key: v1
        signed: "{header:Acme-Delivery}.{timestamp}.{body}"
      key:
        - "{json:event.id}"
        - "{header:Acme-Delivery}"
      success: {status: 200}
      handshakes:
        - match: {method: GET, query: {challenge: "*"}}
          unsigned: true
          verify_token_from: "{query:verify_token}"
          verify_token: vt-1
          require:
            - value: "{query:challenge}"
          answer: {body: "{query:challenge}"}
          refuse: {status: 403}
`, up.Srv.URL)))
	send := func(secret, delivery, body string, at time.Time) gatewaytest.Response {
		ts := strconv.FormatInt(at.Unix(), 10)
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(delivery + "." + ts + "." + body))
		return gatewaytest.Post(t, url+"/acme", body, "Content-Type", "application/json",
			"Acme-Delivery", delivery, "Acme-Signature", "t="+ts+",v1="+hex.EncodeToString(m.Sum(nil)))
	}
	now := time.Now()
	steps := []struct {
		name   string
		do     func() gatewaytest.Response
		status int
		body   string // a prefix
		calls  int64
	}{
		{"challenge", func() gatewaytest.Response {
			return gatewaytest.Do(t, http.MethodGet, url+"/acme?challenge=c-7&verify_token=vt-1", "")
		}, 200, "c-7", 0},
		{"challenge with a wrong token", func() gatewaytest.Response {
			return gatewaytest.Do(t, http.MethodGet, url+"/acme?challenge=c-7&verify_token=nope", "")
		}, 403, "acme: handshake refused", 0},
		{"an unsigned GET without challenge", func() gatewaytest.Response {
			return gatewaytest.Do(t, http.MethodGet, url+"/acme", "")
		}, 401, "", 0},
		{"delivery", func() gatewaytest.Response { return send("acme-secret", "d-1", `{"event":{"id":"ev_1"}}`, now) }, 200, `{"call":1`, 1},
		{"its retry, re-signed, another delivery id", func() gatewaytest.Response {
			return send("acme-secret", "d-2", `{"event":{"id":"ev_1"}}`, now.Add(time.Second))
		}, 200, `{"call":1`, 1},
		{"signed with the old secret", func() gatewaytest.Response { return send("acme-old", "d-3", `{"event":{"id":"ev_2"}}`, now) }, 200, `{"call":2`, 2},
		{"forged", func() gatewaytest.Response { return send("guess", "d-4", `{"event":{"id":"ev_3"}}`, now) }, 401, "", 2},
		{"stale", func() gatewaytest.Response {
			return send("acme-secret", "d-5", `{"event":{"id":"ev_3"}}`, now.Add(-10*time.Minute))
		}, 401, "", 2},
		{"keyed by the delivery header without an event id", func() gatewaytest.Response { return send("acme-secret", "d-6", `{}`, now) }, 200, `{"call":3`, 3},
	}
	for _, s := range steps {
		got := s.do()
		if got.Status != s.status || !strings.HasPrefix(got.Body, s.body) || up.Calls.Load() != s.calls {
			t.Fatalf("%s: %d %q, backend calls %d; want %d %q..., %d", s.name, got.Status, got.Body, up.Calls.Load(), s.status, s.body, s.calls)
		}
		if s.status == 401 && !strings.Contains(got.Body, `"detail":"acme: header Acme-`) {
			t.Errorf("%s: the problem does not name the header: %s", s.name, got.Body)
		}
	}
}
