package provider_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/canonjson"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/provider"
)

// TestMetaHandshake: messenger and instagram answer Meta's subscription
// challenge as whatsapp-cloud does, each with its own verify_token, and
// refuse every challenge without one.
func TestMetaHandshake(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  provider.Config
	}{
		{"whatsapp-cloud", provider.Config{Secrets: []string{"s"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt"}}},
		{"messenger", provider.Config{Secrets: []string{"s"}, Messenger: provider.MessengerOptions{VerifyToken: "vt"}}},
		{"instagram", provider.Config{Secrets: []string{"s"}, Instagram: provider.InstagramOptions{VerifyToken: "vt"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPreset(t, tt.name, tt.cfg, baseTime)
			noToken := newPreset(t, tt.name, provider.Config{Secrets: []string{"s"}}, baseTime)
			for _, c := range []struct {
				p      *idemhook.Preset
				query  string
				status int
				body   string
			}{
				{p, "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=vt", 200, "1158201444"},
				{p, "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=guess", 403, tt.name + ": subscription refused"},
				{p, "hub.mode=unsubscribe&hub.challenge=1&hub.verify_token=vt", 403, ""},
				{noToken, "hub.mode=subscribe&hub.challenge=1&hub.verify_token=", 403, ""},
			} {
				r := httptest.NewRequest(http.MethodGet, "/meta?"+c.query, nil)
				w := httptest.NewRecorder()
				if err := c.p.Verify(r, nil); err != nil {
					t.Fatalf("%s: Verify: %v", c.query, err)
				}
				if !c.p.Handshake(w, r, nil) || w.Code != c.status || !strings.HasPrefix(w.Body.String(), c.body) {
					t.Fatalf("%s: %d %q, want %d %q", c.query, w.Code, w.Body, c.status, c.body)
				}
			}
			r := httptest.NewRequest(http.MethodGet, "/meta", nil)
			if err := p.Verify(r, nil); err == nil || p.Handshake(httptest.NewRecorder(), r, nil) {
				t.Fatal("a GET without hub.mode passed Verify or was taken for a handshake")
			}
		})
	}
}

// metaItem is one item of a Meta batch: the array it was in and its JSON.
type metaItem struct {
	array string // messaging, standby or changes
	raw   json.RawMessage
}

// metaItems returns the object and the items of a Meta batch, in order.
func metaItems(t *testing.T, body []byte) (string, []metaItem) {
	t.Helper()
	var env struct {
		Object string
		Entry  []map[string]json.RawMessage
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	var items []metaItem
	for _, e := range env.Entry {
		for _, array := range []string{"messaging", "standby", "changes"} {
			var raws []json.RawMessage
			if v, ok := e[array]; ok {
				if err := json.Unmarshal(v, &raws); err != nil {
					t.Fatal(err)
				}
			}
			for _, raw := range raws {
				items = append(items, metaItem{array, raw})
			}
		}
	}
	return env.Object, items
}

// oneItemBody is a Meta body of object holding just it.
func oneItemBody(object string, it metaItem) []byte {
	return []byte(fmt.Sprintf(`{"object":%q,"entry":[{"id":"E","time":1780000000000,%q:[%s]}]}`, object, it.array, it.raw))
}

// wantMetaKey is the key the messenger and instagram presets document for
// an item, computed here from the documented fields: a message's or a
// postback's mid (an unsent message's with ":deleted=true"), a change's
// "<field>:<value.id>" (each through idemhook.NormalizeKey: a value over
// 128 bytes, such as Instagram's long mids, becomes the hash of the
// value), else "sha256:" and the hash of its canonical JSON, and then
// canonical is true.
func wantMetaKey(t *testing.T, it metaItem) (key string, canonical bool) {
	var v struct {
		Field   string
		Value   struct{ ID string }
		Message struct {
			Mid       string
			IsDeleted bool `json:"is_deleted"`
		}
		Postback struct{ Mid string }
	}
	if err := json.Unmarshal(it.raw, &v); err != nil {
		t.Fatal(err)
	}
	switch {
	case it.array == "changes" && v.Field != "" && v.Value.ID != "":
		return idemhook.NormalizeKey(v.Field + ":" + v.Value.ID), false
	case it.array != "changes" && v.Message.Mid != "" && v.Message.IsDeleted:
		return idemhook.NormalizeKey(v.Message.Mid + ":deleted=true"), false
	case it.array != "changes" && v.Message.Mid != "":
		return idemhook.NormalizeKey(v.Message.Mid), false
	case it.array != "changes" && v.Postback.Mid != "":
		return idemhook.NormalizeKey(v.Postback.Mid), false
	}
	return canonicalKey(string(it.raw)), true
}

// canonicalKey is the key of an item without its key fields: "sha256:" and
// the hex SHA-256 of its canonical JSON.
func canonicalKey(item string) string {
	sum := canonjson.Sum([]byte(item))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestDocumentedMetaBatches reads the Messenger and Instagram batches of
// ../testdata/batches: the preset keys the batch by its body hash, and
// each item, alone in a body, by the key the preset documents for it,
// every one distinct; a body of one item is keyed as the per-item flow
// keys that item (TestMessengerRegroupedRetry checks the flow's side).
func TestDocumentedMetaBatches(t *testing.T) {
	for _, tt := range []struct {
		file, preset, object string
		items, hashed        int
	}{
		{"messenger-batch.json", "messenger", "page", 10, 5},
		{"instagram-batch.json", "instagram", "instagram", 10, 4},
	} {
		t.Run(tt.preset, func(t *testing.T) {
			body, err := readBatch(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			p := newPreset(t, tt.preset, provider.Config{Secrets: []string{"s"}}, baseTime)
			if k, _ := p.Key(nil, body); k != "" {
				t.Fatalf("Key(batch) = %q, want the body hash", k)
			}
			object, items := metaItems(t, body)
			if object != tt.object || len(items) != tt.items {
				t.Fatalf("object %q, %d items; want %q, %d", object, len(items), tt.object, tt.items)
			}
			seen := map[string]bool{}
			hashed := 0
			for i, it := range items {
				want, canonical := wantMetaKey(t, it)
				k, err := p.Key(nil, oneItemBody(object, it))
				if err != nil || k != want || seen[k] {
					t.Fatalf("item %d (%s %s): key %q, %v; want %q, distinct (seen before: %v)", i, it.array, it.raw, k, err, want, seen[k])
				}
				seen[k] = true
				if canonical {
					hashed++
				}
			}
			if hashed != tt.hashed {
				t.Errorf("%d items keyed by their hash, want %d", hashed, tt.hashed)
			}
		})
	}
}

// TestMessengerRegroupedRetry: through idemhook.New(memstore) and a Route
// with the messenger preset (its Items), a signed batch of three messages
// runs each once; Meta's retry, grouped otherwise and with two new
// messages, runs only the new ones; a later body of one of them alone is a
// replay, and every item ran under the key the preset gives a body of it
// alone.
func TestMessengerRegroupedRetry(t *testing.T) {
	const secret = "meta-app-secret"
	p := newPreset(t, "messenger", provider.Config{Secrets: []string{secret}}, baseTime)
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := idemhook.New(st, idemhook.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := m.Route(idemhook.Route{Source: "messenger", Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		runs []string // the item key of each handler run
	)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := idemhook.BatchFromContext(r.Context())
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if !ok {
			k, _ := p.Key(r, body)
			runs = append(runs, "single:"+k)
			return
		}
		for _, it := range b.Items() {
			runs = append(runs, it.Key)
		}
	})))
	t.Cleanup(srv.Close)
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		r := runs
		runs = nil
		slices.Sort(r)
		return r
	}

	msg := func(n int) string {
		return fmt.Sprintf(`{"sender":{"id":"PSID"},"recipient":{"id":"PAGE"},"timestamp":178000000%d000,"message":{"mid":"m_%d","text":"message %d"}}`, n, n, n)
	}
	batch := func(entries ...[]int) string {
		var es []string
		for i, ns := range entries {
			var ms []string
			for _, n := range ns {
				ms = append(ms, msg(n))
			}
			es = append(es, fmt.Sprintf(`{"id":"PAGE","time":17800000%02d000,"messaging":[%s]}`, i, strings.Join(ms, ",")))
		}
		return `{"object":"page","entry":[` + strings.Join(es, ",") + `]}`
	}
	send := func(body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/messenger", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	keyAlone := func(n int) string {
		k, _ := p.Key(nil, []byte(batch([]int{n})))
		return k
	}

	if resp := send(batch([]int{1, 2, 3})); resp.StatusCode != http.StatusOK {
		t.Fatalf("first batch: %d", resp.StatusCode)
	}
	if got, want := take(), []string{keyAlone(1), keyAlone(2), keyAlone(3)}; !slices.Equal(got, want) || want[0] != "m_1" {
		t.Fatalf("first batch ran %q, want %q", got, want)
	}
	if resp := send(batch([]int{3, 1}, []int{2, 4, 5})); resp.StatusCode != http.StatusOK {
		t.Fatalf("regrouped retry: %d", resp.StatusCode)
	}
	if got, want := take(), []string{"m_4", "m_5"}; !slices.Equal(got, want) {
		t.Fatalf("regrouped retry ran %q, want only the new messages %q", got, want)
	}
	if resp := send(batch([]int{4})); resp.StatusCode != http.StatusOK || resp.Header.Get(idemhook.ReplayedHeader) != "true" {
		t.Fatalf("message 4 alone: %d, replayed %q; want a replay", resp.StatusCode, resp.Header.Get(idemhook.ReplayedHeader))
	}
	if resp := send(batch([]int{6})); resp.StatusCode != http.StatusOK {
		t.Fatalf("message 6 alone: %d", resp.StatusCode)
	}
	if got := take(); !slices.Equal(got, []string{"single:m_6"}) {
		t.Fatalf("message 6 alone ran %q, want once, keyed m_6", got)
	}
	if resp := send(batch([]int{6, 1, 7})); resp.StatusCode != http.StatusOK {
		t.Fatalf("batch after: %d", resp.StatusCode)
	}
	if got := take(); !slices.Equal(got, []string{"m_7"}) {
		t.Fatalf("a batch holding message 6, run alone before, ran %q, want only m_7", got)
	}
}
