package gatewaytest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// WhatsAppBatch is a WhatsApp Cloud webhook body holding the text
// messages ids, perEntry of them to an entry, in the shape of Meta's
// documented examples (testdata/batches): Meta batches up to 1,000 updates
// in one request and groups them as it likes, so a retry may hold the same
// messages grouped otherwise.
func WhatsAppBatch(ids []string, perEntry int) string {
	var entries []string
	for start := 0; start < len(ids); start += perEntry {
		var msgs []string
		for _, id := range ids[start:min(start+perEntry, len(ids))] {
			msgs = append(msgs, fmt.Sprintf(`{"from":"5511999999999","id":%q,"timestamp":"1700000000","type":"text","text":{"body":"hello %s"}}`, id, id))
		}
		entries = append(entries, `{"id":"102290129340398","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},"messages":[`+strings.Join(msgs, ",")+`]}}]}`)
	}
	return `{"object":"whatsapp_business_account","entry":[` + strings.Join(entries, ",") + `]}`
}

// WhatsAppMessageIDs returns the ids of the messages a WhatsApp Cloud body
// holds, in order.
func WhatsAppMessageIDs(body []byte) ([]string, error) {
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
		return nil, err
	}
	var ids []string
	for _, e := range n.Entry {
		for _, c := range e.Changes {
			for _, m := range c.Value.Messages {
				ids = append(ids, m.ID)
			}
		}
	}
	return ids, nil
}
