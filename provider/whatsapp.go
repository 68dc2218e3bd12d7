package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// WhatsAppCloud returns the preset for the WhatsApp Cloud API (Meta Graph
// webhooks).
//
// Key: when the POST holds exactly one item, the inbound message's id
// (wamid...). For a status update it is
// "<status id>:<status>:<recipient_id>", because one wamid goes through
// sent, delivered and read, and a message sent to a group gets each status
// once per recipient. Without recipient_id it is "<status id>:<status>".
// Meta batches up to 1000 updates per request and does not guarantee the
// same batching on a retry, so a batch of several items (or none) falls
// back to the body hash.
//
// Items: each message and each status of a batch runs once
// ([idemhook.Route.Items]), keyed as the key above keys a body of one:
// a message by its id, a status by "<id>:<status>:<recipient_id>" (the
// recipient when present). So a batch Meta sends again, grouped otherwise,
// runs only what did not run, and a body of one item has the same key
// with or without items.
//
// Verify: X-Hub-Signature-256 "sha256=<hex>" = HMAC-SHA256(App Secret, raw
// body). No timestamp is signed, so the key store is the only replay
// defence. A GET or HEAD carrying hub.mode (the subscription challenge,
// unsigned) passes Verify so that it reaches Handshake. Any other request,
// GET and HEAD included, needs the signature, so nothing unsigned reaches
// the handler.
//
// Handshake: Meta's GET subscription challenge. hub.mode=subscribe with a
// hub.verify_token equal (constant time) to WhatsAppCloudOptions.VerifyToken
// is answered 200 text/plain with hub.challenge. Any other GET carrying
// hub.mode is answered 403. Without the verify_token option every challenge is
// refused. GETs without hub.mode are not handshakes (and fail Verify).
//
// Duplicates: the stored status (Meta wants 200). Options: WhatsAppCloudOptions.
func WhatsAppCloud(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("whatsapp-cloud")
	if err != nil {
		return nil, err
	}
	return &idemhook.Preset{
		Name:        "whatsapp-cloud",
		RetryWindow: whatsAppRetryWindow,
		Items:       whatsAppItems(),
		Verify:      metaVerify(s),
		Handshake:   metaHandshake(s, cfg.WhatsAppCloud.VerifyToken),
		Key: func(r *http.Request, body []byte) (string, error) {
			return whatsAppKey(body), nil
		},
	}, nil
}

// whatsAppItems are the items of Meta's batched body: messages and
// statuses, keyed as whatsAppKey keys a body that holds one.
func whatsAppItems() *idemhook.Items {
	return &idemhook.Items{Paths: []idemhook.ItemPath{
		{Path: "entry[*].changes[*].value.messages[*]", Key: "id"},
		{Path: "entry[*].changes[*].value.statuses[*]", Key: "{id}:{status}:{recipient_id?}"},
	}}
}

// whatsAppNotification is the part of a WhatsApp Cloud webhook the key reads.
type whatsAppNotification struct {
	Entry []struct {
		Changes []struct {
			Value struct {
				Messages []struct {
					ID jsonID `json:"id"`
				} `json:"messages"`
				Statuses []struct {
					ID          jsonID `json:"id"`
					Status      jsonID `json:"status"`
					RecipientID jsonID `json:"recipient_id"`
				} `json:"statuses"`
			} `json:"value"`
		} `json:"changes"`
	} `json:"entry"`
}

// whatsAppKey returns the id of the notification's single item, or "".
func whatsAppKey(body []byte) string {
	var n whatsAppNotification
	if !decodeEvent(body, &n) {
		return ""
	}
	items := 0
	key := ""
	for _, e := range n.Entry {
		for _, c := range e.Changes {
			for _, m := range c.Value.Messages {
				items++
				key = string(m.ID)
			}
			for _, st := range c.Value.Statuses {
				items++
				key = ""
				if st.ID != "" && st.Status != "" {
					key = string(st.ID) + ":" + string(st.Status)
					if st.RecipientID != "" {
						key += ":" + string(st.RecipientID)
					}
				}
			}
		}
	}
	if items != 1 {
		return ""
	}
	return key
}
