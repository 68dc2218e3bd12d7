package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// Go, not a spec: an unsigned HEAD carrying hub.mode passes Verify (and is
// forwarded), where a spec's unsigned handshake lets through only the GET it
// matches (TestSpecHeadChallenge).

// WhatsAppCloud returns the preset for the WhatsApp Cloud API (Meta Graph
// webhooks).
//
// Key: when the POST holds exactly one item, the inbound message's id
// (wamid...). For a status update it is
// "<status id>:<status>:<recipient_id>", because one wamid goes through
// sent, delivered and read, and a message sent to a group gets each status
// once per recipient. Without recipient_id it is "<status id>:<status>".
// An item without its id (or a status without its status) is keyed by the
// SHA-256 of its canonical JSON, as Items keys it
// ([idemhook.Items.OneItemKey]). Meta batches up to 1000 updates per
// request and does not guarantee the same batching on a retry, so a batch
// of several items (or none) falls back to the body hash.
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
	items := whatsAppItems()
	return &idemhook.Preset{
		Name:        "whatsapp-cloud",
		RetryWindow: whatsAppRetryWindow,
		Items:       items,
		Verify:      metaVerify(s),
		Handshake:   metaHandshake(s, cfg.WhatsAppCloud.VerifyToken),
		Key: func(r *http.Request, body []byte) (string, error) {
			return items.OneItemKey(body), nil
		},
	}, nil
}

// whatsAppItems are the items of Meta's batched body: messages and
// statuses. The preset's Key is their OneItemKey, so a body of one is keyed
// as its item.
func whatsAppItems() *idemhook.Items {
	return &idemhook.Items{Paths: []idemhook.ItemPath{
		{Path: "entry[*].changes[*].value.messages[*]", Key: "id"},
		{Path: "entry[*].changes[*].value.statuses[*]", Key: "{id}:{status}:{recipient_id?}"},
	}}
}
