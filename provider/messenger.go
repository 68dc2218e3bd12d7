package provider

import (
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
)

// metaMessagingKey keys an event of a Messenger or Instagram "messaging"
// (or "standby") array: a message, its echo included, by message.mid; a
// postback by postback.mid; a message Meta sends again as unsent
// (Instagram's "is_deleted": true, with the message's own mid) by
// "<mid>:deleted=true", so that it is not taken for the message. Every
// other event (message_reactions, message_reads, message_deliveries,
// message_edits, referrals, optins, account_linking, handover events...)
// has neither mid, so the template gives nothing and the event is keyed
// by the SHA-256 of its canonical JSON, which holds its sender, timestamp
// and content: the same on every retry, however Meta groups it, and
// different for two events. A reaction's "mid" is the id of the message
// reacted to, not of the reaction, so react, unreact and react again
// would share any key built from it: the hash, with the event's
// timestamp, tells them apart.
const metaMessagingKey = "{message.mid?}{postback.mid?}:deleted={message.is_deleted?}"

// MessengerOptions are the settings of the messenger preset.
type MessengerOptions struct {
	// VerifyToken answers Meta's GET subscription challenge (option
	// verify_token). Default: "", every challenge is refused.
	VerifyToken string
}

// Go, not a spec: an unsent message (is_deleted: true) and an event without an
// id are keyed in ways a spec's templates don't give
// (TestSpecKnownKeyDifferences).

// Messenger returns the preset for the Messenger Platform's webhooks
// (Meta Graph webhooks of object "page": entry[].messaging[] and, with
// the handover protocol, entry[].standby[]).
//
// Items: each event of entry[*].messaging[*] and entry[*].standby[*] runs
// once ([idemhook.Route.Items]), keyed as metaMessagingKey says: a
// message (or its echo) by message.mid, a postback by postback.mid, an
// unsent message by "<mid>:deleted=true", every other kind (reactions,
// reads, deliveries, edits, referrals, optins, handover events) by the
// SHA-256 of its canonical JSON. Meta batches up to 1000 updates per
// request and does not promise the same batching on a retry, so a batch
// Meta sends again, grouped otherwise, runs only what did not run.
//
// Key: the key of the body's single event, as Items keys it
// ([idemhook.Items.OneItemKey]), so that a body of one event has the same
// key with or without items; a body of several events (or none) falls
// back to the body hash.
//
// Verify and Handshake: as whatsapp-cloud's. X-Hub-Signature-256
// "sha256=<hex>" = HMAC-SHA256(App Secret, raw body), no timestamp; Meta's
// GET hub.challenge with MessengerOptions.VerifyToken.
//
// Duplicates: the stored status (Meta wants 200). Options:
// MessengerOptions.
func Messenger(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("messenger")
	if err != nil {
		return nil, err
	}
	return metaMessagingPreset(s, cfg.Messenger.VerifyToken, messengerRetryWindow, messengerItems()), nil
}

// messengerItems are the events of a Messenger body.
func messengerItems() *idemhook.Items {
	return &idemhook.Items{Paths: []idemhook.ItemPath{
		{Path: "entry[*].messaging[*]", Key: metaMessagingKey},
		{Path: "entry[*].standby[*]", Key: metaMessagingKey},
	}}
}

// metaMessagingPreset is the preset of messenger and instagram: Meta's
// signature and challenge, and a Key that is the Items' key of a body of
// one item.
func metaMessagingPreset(s settings, verifyToken string, window time.Duration, items *idemhook.Items) *idemhook.Preset {
	return &idemhook.Preset{
		Name:        s.name,
		RetryWindow: window,
		Items:       items,
		Verify:      metaVerify(s),
		Handshake:   metaHandshake(s, verifyToken),
		Key: func(r *http.Request, body []byte) (string, error) {
			return items.OneItemKey(body), nil
		},
	}
}
