package provider

import (
	"github.com/idemhook/idemhook"
)

// InstagramOptions are the settings of the instagram preset.
type InstagramOptions struct {
	// VerifyToken answers Meta's GET subscription challenge (option
	// verify_token). Default: "", every challenge is refused.
	VerifyToken string
}

// Go, not a spec: as messenger's (TestSpecKnownKeyDifferences).

// Instagram returns the preset for Instagram's webhooks (Meta Graph
// webhooks of object "instagram": messaging events in entry[].messaging[]
// and entry[].standby[], and the changes of comments, mentions,
// story_insights and the other fields in entry[].changes[]).
//
// Items: each event of entry[*].messaging[*] and entry[*].standby[*] runs
// once, keyed as messenger's are (metaMessagingKey: a message by
// message.mid, a postback by postback.mid, an unsent message, which
// Instagram sends with the message's mid and "is_deleted": true, by
// "<mid>:deleted=true", every other kind by the SHA-256 of its canonical
// JSON); each change of entry[*].changes[*] by "<field>:<value.id>"
// ("comments:<comment id>", "live_comments:<comment id>"), or, when its
// value has no id (mentions, story_insights), by the SHA-256 of its
// canonical JSON.
//
// Key: the key of the body's single item, as Items keys it, so that a
// body of one item has the same key with or without items; a body of
// several (or none): the body hash.
//
// Verify and Handshake: as whatsapp-cloud's (X-Hub-Signature-256 with the
// App Secret; Meta's GET hub.challenge with InstagramOptions.VerifyToken).
//
// Duplicates: the stored status (Meta wants 200). Options:
// InstagramOptions.
func Instagram(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("instagram")
	if err != nil {
		return nil, err
	}
	return metaMessagingPreset(s, cfg.Instagram.VerifyToken, instagramRetryWindow, instagramItems()), nil
}

// instagramItems are the events and changes of an Instagram body.
func instagramItems() *idemhook.Items {
	return &idemhook.Items{Paths: []idemhook.ItemPath{
		{Path: "entry[*].messaging[*]", Key: metaMessagingKey},
		{Path: "entry[*].standby[*]", Key: metaMessagingKey},
		{Path: "entry[*].changes[*]", Key: "{field}:{value.id}"},
	}}
}
