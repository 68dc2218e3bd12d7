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
