package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/testutil"
	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
	"github.com/idemhook/idemhook/provider"
)

// metaSecret is the App Secret the whatsapp-cloud routes check.
const metaSecret = "meta-app-secret"

// metaPost sends body signed as Meta signs it.
func metaPost(t *testing.T, url, body string) gatewaytest.Response {
	t.Helper()
	mac := hmac.New(sha256.New, []byte(metaSecret))
	mac.Write([]byte(body))
	return gatewaytest.Post(t, url, body, "Content-Type", "application/json", "X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
}

// metaBackend is a backend that checks the gateway's forward signature on
// every request and counts the messages it gets, by id. It fails the ids
// in failing.
type metaBackend struct {
	t       *testing.T
	verify  func(*http.Request, []byte) error // the forward signature's check
	mu      sync.Mutex
	runs    map[string]int
	ids     map[string]string // message id -> the webhook-id it came with
	failing map[string]bool
}

func (b *metaBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := b.verify(r, body); err != nil {
		b.t.Errorf("forward signature: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	ids, err := gatewaytest.WhatsAppMessageIDs(body)
	if err != nil {
		b.t.Errorf("backend body: %v", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fail := false
	for _, id := range ids {
		b.runs[id]++
		b.ids[id] = r.Header.Get(provider.WebhookIDHeader)
		fail = fail || b.failing[id]
	}
	if fail {
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated) // Meta counts any 2xx
}

func (b *metaBackend) take() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	runs := b.runs
	b.runs = map[string]int{}
	return runs
}

// TestGatewayItems: a WhatsApp Cloud batch through the gateway, with the
// whatsapp-cloud preset's items, on the proxy path and queued. Each new
// message reaches the backend once, in a request of its own that carries
// the provider's envelope and the gateway's forward signature, whose
// webhook-id is the message's own key. On the proxy path the backend fails
// messages 7 and 30, and Meta's retry runs exactly those; a retry grouped
// otherwise runs nothing.
func TestGatewayItems(t *testing.T) {
	check, err := provider.StandardWebhooks(provider.Config{Secrets: []string{forwardSecret}})
	if err != nil {
		t.Fatal(err)
	}
	backend := &metaBackend{t: t, verify: check.Verify, runs: map[string]int{}, ids: map[string]string{}, failing: map[string]bool{}}
	srv := httptest.NewServer(backend)
	defer srv.Close()
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /whatsapp
    upstream: %[1]s/hook
    source: whatsapp
    provider: whatsapp-cloud
    secrets: [%[2]s]
    forward_secret: %[3]s
  - path: /whatsapp-queued
    upstream: %[1]s/hook
    source: whatsapp-queued
    provider: whatsapp-cloud
    secrets: [%[2]s]
    forward_secret: %[3]s
    deliver: queue
    queue: {backoff_min: 10ms, backoff_max: 50ms}
`, srv.URL, metaSecret, forwardSecret)))

	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("wamid.HBgLNTUxMTk5OTk5OTk5%02d", i+1)
	}
	backend.mu.Lock()
	backend.failing[ids[6]], backend.failing[ids[29]] = true, true
	backend.mu.Unlock()

	if r := metaPost(t, url+"/whatsapp", gatewaytest.WhatsAppBatch(ids, 10)); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("first delivery: %d %s, want the failure 503", r.Status, r.Body)
	}
	runs := backend.take()
	if len(runs) != 50 {
		t.Fatalf("first delivery: %d messages reached the backend, want 50", len(runs))
	}
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	if got, want := backend.ids[ids[0]], "idem:whatsapp:"+ids[0]; got != want {
		t.Errorf("webhook-id %q, want the message's key %q", got, want)
	}
	if r := metaPost(t, url+"/whatsapp", gatewaytest.WhatsAppBatch(ids, 20)); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("retry while 7 and 30 still fail: %d %s", r.Status, r.Body)
	}
	if runs := backend.take(); fmt.Sprint(runs) != fmt.Sprint(map[string]int{ids[6]: 1, ids[29]: 1}) {
		t.Fatalf("retry while failing: %v, want only messages 7 and 30", runs)
	}
	backend.mu.Lock()
	clear(backend.failing)
	backend.mu.Unlock()
	if r := metaPost(t, url+"/whatsapp", gatewaytest.WhatsAppBatch(ids, 3)); r.Status != http.StatusOK {
		t.Fatalf("retry: %d %s", r.Status, r.Body)
	}
	if runs := backend.take(); fmt.Sprint(runs) != fmt.Sprint(map[string]int{ids[6]: 1, ids[29]: 1}) {
		t.Fatalf("retry: %v, want only messages 7 and 30", runs)
	}
	if r := metaPost(t, url+"/whatsapp", gatewaytest.WhatsAppBatch(ids[25:], 7)); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-batched retry: %d replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if runs := backend.take(); len(runs) != 0 {
		t.Fatalf("re-batched retry ran %v", runs)
	}

	// Queued: each message is an event of the queue, delivered once. A
	// batch and a body of one message get the same answer: the route's
	// accept answer.
	queued := ids[:13]
	accepted := func(what string, r gatewaytest.Response, replayed bool) {
		t.Helper()
		if r.Status != http.StatusAccepted || r.Body != config.DefaultAcceptBody || r.Header.Get("Content-Type") != "application/json" ||
			(r.Header.Get("Idempotent-Replayed") == "true") != replayed {
			t.Fatalf("%s: %d %q %v; want the accept answer (202, %q, application/json), replayed %v", what, r.Status, r.Body, r.Header, config.DefaultAcceptBody, replayed)
		}
	}
	accepted("queued batch", metaPost(t, url+"/whatsapp-queued", gatewaytest.WhatsAppBatch(queued[:12], 5)), false)
	accepted("queued retry", metaPost(t, url+"/whatsapp-queued", gatewaytest.WhatsAppBatch(queued[:12], 4)), true)
	accepted("queued single message", metaPost(t, url+"/whatsapp-queued", gatewaytest.WhatsAppBatch(queued[12:], 1)), false)
	accepted("queued single message's retry", metaPost(t, url+"/whatsapp-queued", gatewaytest.WhatsAppBatch(queued[12:], 1)), true)
	got := map[string]int{}
	testutil.Eventually(t, "every queued message delivered", func() bool {
		for id, n := range backend.take() {
			got[id] += n
		}
		return len(got) == len(queued)
	})
	for _, id := range queued {
		if got[id] != 1 {
			t.Errorf("queued %s reached the backend %d times, want 1", id, got[id])
		}
		if w := backend.ids[id]; w != "idem:whatsapp-queued:"+id {
			t.Errorf("queued %s came with webhook-id %q", id, w)
		}
	}
}

// TestGatewaySendGridItems: SendGrid retries its Event Webhook's array
// three times, each time with new events appended (as an array that kept
// failing would grow); every sg_event_id reaches the backend exactly once,
// through the sendgrid preset's signature check and items.
func TestGatewaySendGridItems(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var evs []struct {
			ID string `json:"sg_event_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&evs); err != nil {
			t.Errorf("backend: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		requests++
		for _, e := range evs {
			runs[e.ID]++
		}
	}))
	defer srv.Close()
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /sendgrid
    upstream: %s/events
    source: sendgrid
    provider: sendgrid
    provider_options: {public_key: %s}
`, srv.URL, base64.StdEncoding.EncodeToString(der))))
	post := func(ids ...string) gatewaytest.Response {
		var evs []string
		for _, id := range ids {
			evs = append(evs, fmt.Sprintf(`{"email":"example@test.com","timestamp":1513299569,"event":"delivered","sg_event_id":%q,"sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0"}`, id))
		}
		body := "[" + strings.Join(evs, ",") + "]"
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		sum := sha256.Sum256([]byte(ts + body))
		sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return gatewaytest.Post(t, url+"/sendgrid", body, "Content-Type", "application/json",
			provider.SendGridTimestampHeader, ts, provider.SendGridSignatureHeader, base64.StdEncoding.EncodeToString(sig))
	}
	var all []string
	for round := range 4 {
		for i := range 5 {
			all = append(all, fmt.Sprintf("sg-%d-%d", round, i))
		}
		if r := post(all...); r.Status != http.StatusOK {
			t.Fatalf("round %d: %d %s", round, r.Status, r.Body)
		}
	}
	if r := post(all[3], all[17], all[0]); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a copy of old events: %d, replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range all {
		if runs[id] != 1 {
			t.Errorf("%s reached the backend %d times, want 1", id, runs[id])
		}
	}
	if len(runs) != len(all) || requests != len(all) {
		t.Errorf("%d events in %d requests, want %d in %d (one request each, mode split)", len(runs), requests, len(all), len(all))
	}
	// A forged array claims nothing.
	if r := gatewaytest.Post(t, url+"/sendgrid", `[{"sg_event_id":"sg-forged"}]`, provider.SendGridTimestampHeader, "1", provider.SendGridSignatureHeader, "Zm9yZ2Vk"); r.Status != http.StatusUnauthorized {
		t.Errorf("forged: %d, want 401", r.Status)
	}
}

// TestGatewayItemsFilter: in mode filter the backend gets one request with
// the new messages, and fails some of them by naming their keys in
// Idempotent-Failed-Items beside its 2xx: the provider is told to retry,
// and the retry carries only those.
func TestGatewayItemsFilter(t *testing.T) {
	var mu sync.Mutex
	var got [][]string
	failNext := []string{"wamid.f2", "wamid.f4"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ids, err := gatewaytest.WhatsAppMessageIDs(body)
		if err != nil {
			t.Errorf("backend body: %v", err)
		}
		mu.Lock()
		got = append(got, ids)
		fail := failNext
		failNext = nil
		mu.Unlock()
		if len(fail) > 0 {
			w.Header().Set("Idempotent-Failed-Items", strings.Join(fail, ", "))
		}
	}))
	defer srv.Close()
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /whatsapp
    upstream: %s/hook
    source: whatsapp
    provider: whatsapp-cloud
    secrets: [%s]
    items: {mode: filter}
`, srv.URL, metaSecret)))
	ids := []string{"wamid.f1", "wamid.f2", "wamid.f3", "wamid.f4", "wamid.f5"}
	r := metaPost(t, url+"/whatsapp", gatewaytest.WhatsAppBatch(ids, 2))
	if r.Status != http.StatusBadGateway || r.Header.Get("Idempotent-Failed-Items") != "" {
		t.Fatalf("first delivery: %d %s (header %q), want 502 and the header kept from the provider", r.Status, r.Body, r.Header.Get("Idempotent-Failed-Items"))
	}
	if r := metaPost(t, url+"/whatsapp", gatewaytest.WhatsAppBatch(ids, 3)); r.Status != http.StatusOK {
		t.Fatalf("retry: %d %s", r.Status, r.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[[wamid.f1 wamid.f2 wamid.f3 wamid.f4 wamid.f5] [wamid.f2 wamid.f4]]" {
		t.Fatalf("the backend got %v, want all five, then only the two it failed", got)
	}
}
