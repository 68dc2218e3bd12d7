package idemhook

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// whatsAppBody is Meta's batched shape: two entries, the first with a
// change of messages and statuses and a change of another field, the
// second with one message.
const whatsAppBody = `{"object":"whatsapp_business_account","entry":[
 {"id":"A","changes":[
  {"field":"messages","value":{"metadata":{"phone_number_id":"1"},"contacts":[{"wa_id":"5511"}],
   "messages":[{"id":"wamid.1","type":"text"},{"id":"wamid.2","type":"text"}],
   "statuses":[{"id":"wamid.9","status":"sent"},{"id":"wamid.9","status":"delivered"}]}},
  {"field":"account_update","value":{"event":"VERIFIED_ACCOUNT"}}]},
 {"id":"B","changes":[{"field":"messages","value":{"messages":[{"id":"wamid.3"}]}}]}]}`

func whatsAppPlan(t *testing.T) *itemPlan {
	t.Helper()
	plan, _, err := compileItems(&Items{Paths: []ItemPath{
		{Path: "entry[*].changes[*].value.messages[*]", Key: "id"},
		{Path: "entry[*].changes[*].value.statuses[*]", Key: "{id}:{status}"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func TestFindItems(t *testing.T) {
	b := whatsAppPlan(t).findItems([]byte(whatsAppBody))
	if b == nil {
		t.Fatal("no items found")
	}
	var keys []string
	for _, it := range b.items {
		keys = append(keys, it.key)
	}
	want := []string{"wamid.1", "wamid.2", "wamid.9:sent", "wamid.9:delivered", "wamid.3"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if !b.loose {
		t.Error("the account_update change was not seen as loose content")
	}
}

func TestRenderItems(t *testing.T) {
	b := whatsAppPlan(t).findItems([]byte(whatsAppBody))
	only := func(items ...int) func(int) bool {
		return func(i int) bool {
			for _, j := range items {
				if i == j {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name      string
		keep      func(int) bool
		withLoose bool
		want      string
	}{
		{"one message", only(1), false, `{"object":"whatsapp_business_account","entry":[{"id":"A","changes":[{"field":"messages","value":{"metadata":{"phone_number_id":"1"},"contacts":[{"wa_id":"5511"}],"messages":[{"id":"wamid.2","type":"text"}]}}]}]}`},
		{"one status", only(3), false, `{"object":"whatsapp_business_account","entry":[{"id":"A","changes":[{"field":"messages","value":{"metadata":{"phone_number_id":"1"},"contacts":[{"wa_id":"5511"}],"statuses":[{"id":"wamid.9","status":"delivered"}]}}]}]}`},
		{"the second entry's", only(4), true, `{"object":"whatsapp_business_account","entry":[{"id":"A","changes":[{"field":"account_update","value":{"event":"VERIFIED_ACCOUNT"}}]},{"id":"B","changes":[{"field":"messages","value":{"messages":[{"id":"wamid.3"}]}}]}]}`},
		{"all", only(0, 1, 2, 3, 4), true, compactJSON(t, whatsAppBody)},
	} {
		got := string(b.render(tc.keep, tc.withLoose))
		if got != compactJSON(t, got) {
			t.Errorf("%s: not compact JSON as expected: %s", tc.name, got)
		}
		if !json.Valid([]byte(got)) || got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestItemKeyValues: a key field may be a string, a number or a boolean;
// a template whose fields are all optional and missing gives the item's
// hash, as a missing required field does.
func TestItemKeyValues(t *testing.T) {
	const tmpl = "{message.mid?}{postback.mid?}:deleted={message.is_deleted?}"
	k, err := parseItemKey(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	hashOf := func(item string) string {
		return (itemKey{text: []string{"", ""}, fields: [][]string{{"absent"}}, optional: []bool{false}}).of([]byte(item))
	}
	for _, tt := range []struct{ item, want string }{
		{`{"message":{"mid":"m_1","text":"hi"}}`, "m_1"},
		{`{"message":{"mid":"m_1","is_deleted":true}}`, "m_1:deleted=true"},
		{`{"postback":{"mid":"m_2","payload":"P"}}`, "m_2"},
		{`{"message":{"mid":7}}`, "7"},
		{`{"message":{"mid":null}}`, hashOf(`{"message":{"mid":null}}`)},
		{`{"read":{"watermark":1458668856253}}`, hashOf(`{"read":{"watermark":1458668856253}}`)},
	} {
		if got := k.of([]byte(tt.item)); got != tt.want {
			t.Errorf("%s: key %q, want %q", tt.item, got, tt.want)
		}
	}
	if h := hashOf(`{"a":1}`); len(h) != len("sha256:")+64 || h[:7] != "sha256:" {
		t.Fatalf("hash key %q", h)
	}
}

// TestOneItemKey: the key of a body of one item is the key the item flow
// runs it under; a body of several, none, or not JSON has none.
func TestOneItemKey(t *testing.T) {
	items := &Items{Paths: []ItemPath{
		{Path: "entry[*].changes[*].value.messages[*]", Key: "id"},
		{Path: "entry[*].changes[*].value.statuses[*]", Key: "{id}:{status}"},
	}}
	one := `{"entry":[{"changes":[{"field":"account_update","value":{}},{"value":{"statuses":[{"id":"wamid.9","status":"read"}]}}]}]}`
	plan := whatsAppPlan(t)
	if got, want := items.OneItemKey([]byte(one)), plan.findItems([]byte(one)).items[0].key; got != want || got != "wamid.9:read" {
		t.Fatalf("OneItemKey = %q, want %q", got, want)
	}
	for _, body := range []string{whatsAppBody, `{"entry":[]}`, `not json`, `[]`} {
		if got := items.OneItemKey([]byte(body)); got != "" {
			t.Errorf("OneItemKey(%.30q) = %q, want \"\"", body, got)
		}
	}
	if got := (&Items{}).OneItemKey([]byte(one)); got != "" {
		t.Errorf("OneItemKey of Items without paths = %q", got)
	}
}
