package gateway_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook/internal/gatewaytest"
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

// metaBatch is a WhatsApp Cloud body of the given messages, perEntry to an
// entry.
func metaBatch(ids []string, perEntry int) string {
	var entries []string
	for start := 0; start < len(ids); start += perEntry {
		var msgs []string
		for _, id := range ids[start:min(start+perEntry, len(ids))] {
			msgs = append(msgs, fmt.Sprintf(`{"from":"5511999999999","id":%q,"timestamp":"1700000000","type":"text","text":{"body":"hi"}}`, id))
		}
		entries = append(entries, `{"id":"102290129340398","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},"messages":[`+strings.Join(msgs, ",")+`]}}]}`)
	}
	return `{"object":"whatsapp_business_account","entry":[` + strings.Join(entries, ",") + `]}`
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
	var n struct {
		Entry []struct {
			Changes []struct {
				Value struct {
					Messages []struct {
						ID string `json:"id"`
					} `json:"messages"`
				} `json:"value"`
			} `json:"changes"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		b.t.Errorf("backend body: %v", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fail := false
	for _, e := range n.Entry {
		for _, c := range e.Changes {
			for _, m := range c.Value.Messages {
				b.runs[m.ID]++
				b.ids[m.ID] = r.Header.Get(provider.WebhookIDHeader)
				fail = fail || b.failing[m.ID]
			}
		}
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

	if r := metaPost(t, url+"/whatsapp", metaBatch(ids, 10)); r.Status != http.StatusServiceUnavailable {
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
	if r := metaPost(t, url+"/whatsapp", metaBatch(ids, 20)); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("retry while 7 and 30 still fail: %d %s", r.Status, r.Body)
	}
	if runs := backend.take(); fmt.Sprint(runs) != fmt.Sprint(map[string]int{ids[6]: 1, ids[29]: 1}) {
		t.Fatalf("retry while failing: %v, want only messages 7 and 30", runs)
	}
	backend.mu.Lock()
	clear(backend.failing)
	backend.mu.Unlock()
	if r := metaPost(t, url+"/whatsapp", metaBatch(ids, 3)); r.Status != http.StatusOK {
		t.Fatalf("retry: %d %s", r.Status, r.Body)
	}
	if runs := backend.take(); fmt.Sprint(runs) != fmt.Sprint(map[string]int{ids[6]: 1, ids[29]: 1}) {
		t.Fatalf("retry: %v, want only messages 7 and 30", runs)
	}
	if r := metaPost(t, url+"/whatsapp", metaBatch(ids[25:], 7)); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("re-batched retry: %d replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if runs := backend.take(); len(runs) != 0 {
		t.Fatalf("re-batched retry ran %v", runs)
	}

	// Queued: each message is an event of the queue, delivered once.
	queued := ids[:12]
	if r := metaPost(t, url+"/whatsapp-queued", metaBatch(queued, 5)); r.Status != http.StatusOK {
		t.Fatalf("queued: %d %s", r.Status, r.Body)
	}
	if r := metaPost(t, url+"/whatsapp-queued", metaBatch(queued, 4)); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("queued retry: %d replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	got := map[string]int{}
	for deadline := time.Now().Add(10 * time.Second); len(got) < len(queued) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		for id, n := range backend.take() {
			got[id] += n
		}
	}
	for _, id := range queued {
		if got[id] != 1 {
			t.Errorf("queued %s reached the backend %d times, want 1", id, got[id])
		}
		if w := backend.ids[id]; w != "idem:whatsapp-queued:"+id {
			t.Errorf("queued %s came with webhook-id %q", id, w)
		}
	}
}
