package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/idemhook/idemhook/internal/testutil/gatewaytest"
)

// TestGatewayMessengerInstagramItems: the messenger and instagram presets
// through the gateway, with their verify_token option and their items.
// Meta's GET challenge is answered by the gateway itself; every event of a
// documented Instagram batch (messages, an unsent message, a reaction, a
// read, comments, a mention...) reaches the backend once, alone in its
// envelope, and a copy of the batch runs nothing; a Messenger batch whose
// message 2 fails is retried grouped otherwise, and only message 2 runs
// again.
func TestGatewayMessengerInstagramItems(t *testing.T) {
	var mu sync.Mutex
	runs := map[string]int{} // an item's JSON -> how often it reached the backend
	requests := 0
	failing := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env struct {
			Entry []map[string]json.RawMessage
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Errorf("backend: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		requests++
		fail := false
		for _, e := range env.Entry {
			for _, array := range []string{"messaging", "standby", "changes"} {
				var items []json.RawMessage
				if v, ok := e[array]; ok {
					if err := json.Unmarshal(v, &items); err != nil {
						t.Errorf("backend: %s: %v", array, err)
					}
				}
				for _, it := range items { // as Meta sent it: the gateway keeps each item's bytes
					runs[string(it)]++
					fail = fail || failing[string(it)]
				}
			}
		}
		if fail {
			http.Error(w, "not now", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	url, _, _ := startGateway(t, sqliteRoutes(t, fmt.Sprintf(`  - path: /messenger
    upstream: %[1]s/hook
    source: messenger
    provider: messenger
    secrets: [%[2]s]
    provider_options: {verify_token: vt-page}
  - path: /instagram
    upstream: %[1]s/hook
    source: instagram
    provider: instagram
    secrets: [%[2]s]
    provider_options: {verify_token: vt-ig}
`, srv.URL, metaSecret)))
	take := func() (map[string]int, int) {
		mu.Lock()
		defer mu.Unlock()
		r, n := runs, requests
		runs, requests = map[string]int{}, 0
		return r, n
	}

	for _, c := range []struct{ path, token string }{{"/messenger", "vt-page"}, {"/instagram", "vt-ig"}} {
		resp, err := http.Get(url + c.path + "?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=" + c.token)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "1158201444" {
			t.Fatalf("%s challenge: %d %q", c.path, resp.StatusCode, b)
		}
	}

	batch, err := os.ReadFile("../testdata/batches/instagram-batch.json")
	if err != nil {
		t.Fatal(err)
	}
	if r := metaPost(t, url+"/instagram", string(batch)); r.Status != http.StatusOK {
		t.Fatalf("instagram batch: %d %s", r.Status, r.Body)
	}
	got, n := take()
	if len(got) != 10 || n != 10 {
		t.Fatalf("instagram batch: %d distinct items in %d requests, want 10 in 10", len(got), n)
	}
	for it, k := range got {
		if k != 1 {
			t.Errorf("%s ran %d times", it, k)
		}
	}
	if r := metaPost(t, url+"/instagram", string(batch)); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("instagram batch again: %d, replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if _, n := take(); n != 0 {
		t.Fatalf("instagram batch again reached the backend %d times", n)
	}

	msg := func(i int) string {
		return fmt.Sprintf(`{"sender":{"id":"PSID"},"recipient":{"id":"PAGE"},"timestamp":178000000%d000,"message":{"mid":"m_%d","text":"message %d"}}`, i, i, i)
	}
	body := func(entries ...[]int) string {
		var es []string
		for _, e := range entries {
			var ms []string
			for _, i := range e {
				ms = append(ms, msg(i))
			}
			es = append(es, `{"id":"PAGE","time":1780000009000,"messaging":[`+strings.Join(ms, ",")+`]}`)
		}
		return `{"object":"page","entry":[` + strings.Join(es, ",") + `]}`
	}
	mu.Lock()
	failing[msg(2)] = true
	mu.Unlock()
	if r := metaPost(t, url+"/messenger", body([]int{1, 2, 3})); r.Status != http.StatusInternalServerError {
		t.Fatalf("messenger batch with message 2 failing: %d %s, want the failure", r.Status, r.Body)
	}
	if got, _ := take(); len(got) != 3 {
		t.Fatalf("messenger batch: %v", got)
	}
	mu.Lock()
	failing = map[string]bool{}
	mu.Unlock()
	if r := metaPost(t, url+"/messenger", body([]int{3}, []int{2, 1})); r.Status != http.StatusOK {
		t.Fatalf("messenger retry: %d %s", r.Status, r.Body)
	}
	if got, n := take(); n != 1 || got[msg(2)] != 1 {
		t.Fatalf("messenger retry ran %v in %d requests, want message 2 alone", got, n)
	}
	// A forged batch claims nothing: its messages run when Meta sends them.
	forged := body([]int{4, 5})
	if r := gatewaytest.Post(t, url+"/messenger", forged, "Content-Type", "application/json", "X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64)); r.Status != http.StatusUnauthorized {
		t.Fatalf("forged batch: %d, want 401", r.Status)
	}
	if r := metaPost(t, url+"/messenger", forged); r.Status != http.StatusOK {
		t.Fatalf("the same batch, signed: %d", r.Status)
	}
	if got, n := take(); n != 2 || got[msg(4)] != 1 || got[msg(5)] != 1 {
		t.Fatalf("after a forged copy, the signed batch ran %v in %d requests, want messages 4 and 5 once each", got, n)
	}
}
