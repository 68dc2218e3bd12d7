package idemhook_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// A route for a provider that batches its events (SendGrid's Event
// Webhook posts an array, each event with its sg_event_id). Mode filter
// gives the handler one request with the new events only; the handler
// fails the one it can't handle now, and the provider's retry, which adds
// a new event to the old ones, brings just that one and the new one.
func ExampleBatchFromContext() {
	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	events, err := mw.Route(idemhook.Route{
		Source: "sendgrid",
		Items: &idemhook.Items{
			Paths: []idemhook.ItemPath{{Path: "[*]", Key: "sg_event_id"}},
			Mode:  idemhook.ItemsFilter,
		},
	})
	if err != nil {
		panic(err)
	}
	down := true // the mailbox service behind event "b" is down at first
	handler := events(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var evs []struct {
			ID string `json:"sg_event_id"`
		}
		json.NewDecoder(r.Body).Decode(&evs) //nolint:errcheck // the example's bodies are JSON
		batch, _ := idemhook.BatchFromContext(r.Context())
		for i, ev := range evs {
			if ev.ID == "b" && down {
				batch.Fail(i) //nolint:errcheck // i is in range
				continue
			}
			fmt.Println("  handled", ev.ID, "stored as", batch.Items()[i].StoreKey)
		}
	}))

	for _, body := range []string{
		`[{"sg_event_id":"a"},{"sg_event_id":"b"},{"sg_event_id":"c"}]`,
		`[{"sg_event_id":"a"},{"sg_event_id":"b"},{"sg_event_id":"c"},{"sg_event_id":"d"}]`,
		`[{"sg_event_id":"d"},{"sg_event_id":"a"}]`,
	} {
		fmt.Println("delivery", body)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/sendgrid", strings.NewReader(body)))
		fmt.Println("  answered", rec.Code, "replayed:", rec.Header().Get(idemhook.ReplayedHeader) == "true")
		down = false
	}
	// Output:
	// delivery [{"sg_event_id":"a"},{"sg_event_id":"b"},{"sg_event_id":"c"}]
	//   handled a stored as idem:sendgrid@/webhooks/sendgrid:a
	//   handled c stored as idem:sendgrid@/webhooks/sendgrid:c
	//   answered 502 replayed: false
	// delivery [{"sg_event_id":"a"},{"sg_event_id":"b"},{"sg_event_id":"c"},{"sg_event_id":"d"}]
	//   handled b stored as idem:sendgrid@/webhooks/sendgrid:b
	//   handled d stored as idem:sendgrid@/webhooks/sendgrid:d
	//   answered 200 replayed: false
	// delivery [{"sg_event_id":"d"},{"sg_event_id":"a"}]
	//   answered 200 replayed: true
}
