package provider_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/provider"
)

// readBatch reads a file of ../testdata/batches.
func readBatch(name string) ([]byte, error) {
	return os.ReadFile("../testdata/batches/" + name)
}

// TestDocumentedBatches reads the batched bodies of ../testdata/batches
// (their sources are in its README): each holds distinct items, the
// presets key the whole batch by its body hash, and each item alone, as the
// per-item flow would hand it over, gets its own id as the key.
func TestDocumentedBatches(t *testing.T) {
	read := func(name string) []byte {
		b, err := readBatch(name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tt := range []struct {
		file, preset, key, id string
		items                 int
	}{
		{"sendgrid-events.json", "sendgrid", "sg_event_id", "sg_event_id", 8},
		{"hubspot-events.json", "hubspot", "{subscriptionId}:{eventId}", "eventId", 4},
	} {
		t.Run(tt.preset, func(t *testing.T) {
			body := read(tt.file)
			var items []map[string]json.RawMessage
			if err := json.Unmarshal(body, &items); err != nil || len(items) != tt.items {
				t.Fatalf("%s: %d items, %v; want %d", tt.file, len(items), err, tt.items)
			}
			cfg := provider.Config{Secrets: []string{"s"}}
			if tt.preset == "sendgrid" {
				cfg.Secrets = []string{sendGridTestKeys(t).public(0)}
			}
			p := newPreset(t, tt.preset, cfg, baseTime)
			if k, _ := p.Key(nil, body); k != "" {
				t.Fatalf("Key(batch) = %q, want the body hash", k)
			}
			if p.Items == nil || p.Items.Paths[0].Key != tt.key {
				t.Fatalf("Items %+v", p.Items)
			}
			seen := map[string]bool{}
			for i, it := range items {
				one, _ := json.Marshal([]map[string]json.RawMessage{it})
				k, _ := p.Key(nil, one)
				if k == "" || seen[k] || !strings.Contains(k, strings.Trim(string(it[tt.id]), `"`)) {
					t.Fatalf("item %d: key %q (field %s), seen before %v", i, k, it[tt.id], seen[k])
				}
				seen[k] = true
			}
		})
	}
	t.Run("whatsapp-cloud", func(t *testing.T) {
		p := newPreset(t, "whatsapp-cloud", provider.Config{Secrets: []string{"s"}}, baseTime)
		var env struct {
			Object string
			Entry  []struct {
				Changes []struct {
					Field string
					Value struct {
						Messages []struct{ ID string }
						Statuses []struct {
							ID          string
							Status      string
							RecipientID string `json:"recipient_id"`
						}
					}
				}
			}
		}
		for _, tt := range []struct {
			file            string
			messages, stats int
		}{{"whatsapp-messages-batch.json", 3, 0}, {"whatsapp-statuses-batch.json", 0, 4}} {
			body := read(tt.file)
			env.Entry = nil
			if err := json.Unmarshal(body, &env); err != nil || env.Object != "whatsapp_business_account" {
				t.Fatalf("%s: %v %q", tt.file, err, env.Object)
			}
			seen := map[string]bool{}
			messages, stats := 0, 0
			for _, e := range env.Entry {
				for _, c := range e.Changes {
					if c.Field != "messages" {
						t.Fatalf("%s: field %q", tt.file, c.Field)
					}
					for _, m := range c.Value.Messages {
						messages++
						seen[m.ID] = true
					}
					for _, s := range c.Value.Statuses {
						stats++
						seen[s.ID+":"+s.Status+":"+s.RecipientID] = true
					}
				}
			}
			if messages != tt.messages || stats != tt.stats || len(seen) != messages+stats {
				t.Fatalf("%s: %d messages, %d statuses, %d distinct keys; want %d, %d, all distinct", tt.file, messages, stats, len(seen), tt.messages, tt.stats)
			}
			if k, _ := p.Key(nil, body); k != "" {
				t.Fatalf("%s: Key(batch) = %q, want the body hash", tt.file, k)
			}
		}
	})
}
