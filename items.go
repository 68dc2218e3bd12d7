package idemhook

// Items says where the items of a batched delivery are and what keys each,
// so that each item runs once: a provider that puts many events in one
// request (Meta's WhatsApp Cloud, Messenger and Instagram webhooks, up to
// 1,000 updates; SendGrid's Event Webhook; HubSpot) retries the whole
// request when any part of it failed, and may group the same events
// differently on the retry. With Items, each item is claimed, stored and
// replayed under its own key; a delivery whose items are all done is
// answered as a replay, and otherwise only the items not yet done reach
// the handler.
//
// A body that is not JSON, or holds no item at any of the paths, is one
// event, keyed as the route says (its Header, its Preset's Key, the body
// hash).
type Items struct {
	// Paths are where the items are, one per kind of item the body holds
	// (WhatsApp's messages and statuses). Required: at least one.
	Paths []ItemPath

	// Mode is how the items not yet done reach the handler. Default:
	// ItemsSplit.
	Mode ItemsMode
}

// ItemPath is one kind of item in a batched body.
type ItemPath struct {
	// Path leads from the body to the items: field names joined by dots,
	// each array that holds several followed by "[*]", and the last step
	// an array of items, e.g. "entry[*].changes[*].value.messages[*]"; "[*]"
	// for a body that is an array of items (SendGrid, HubSpot). Required.
	Path string

	// Key says what keys an item: a field of the item, a dotted path
	// within it ("id", "event.id"), or a template that joins fields, each
	// in braces ("{id}:{status}"). A template's field may be optional,
	// "{recipient_id?}": when the item lacks it, it is left out with the
	// text just before it ("{id}:{status}:{recipient_id?}" gives
	// "wamid.X:read" without it). A field's value is a string or a number
	// as written, or true or false (a flag such as Instagram's
	// "is_deleted", which tells an unsent message's event from the
	// message's). An item without a field (or any of a template's fields
	// that are not optional), or whose field is another JSON value (null,
	// an object, an array), is keyed by the hash of its canonical JSON
	// instead; so is one whose template gives an empty key (every field
	// optional and missing, and no text). Required.
	Key string
}

// OneItemKey returns the key a body holding exactly one item at the
// paths runs under when a route runs these Items (its item's key, see
// [ItemPath.Key]), or "" when the body is not JSON, holds no item or
// several, or the Items are not valid. A preset with Items returns it
// from its Key, so that a body of one item has the same key whether the
// route runs items or not ("items: none" in the gateway); "" then means
// the body hash, as for every Key.
func (it *Items) OneItemKey(body []byte) string {
	plan, _, err := compileItems(it)
	if err != nil {
		return ""
	}
	b := plan.findItems(body)
	if b == nil || len(b.items) != 1 {
		return ""
	}
	return b.items[0].key
}

// ItemsMode is how the new items of a batched delivery reach the handler.
type ItemsMode string

const (
	// ItemsSplit runs the handler once per new item, each with a request
	// whose body is the provider's envelope holding just that item. The
	// requests go one after another, in the body's order (a chat's
	// messages keep theirs), so a batch takes the sum of its items' times. Each
	// item's answer is stored on its own: when the handler fails item 7 of
	// 10, items 1-6 and 8-10 stay done, and the provider's retry runs only
	// item 7. The default, because it is the only mode in which a failed
	// item never makes another run twice.
	ItemsSplit ItemsMode = "split"

	// ItemsFilter runs the handler once with a request whose body holds
	// every new item in the provider's envelope: fewer requests, but the
	// handler's answer is the answer of all of them, so a failure releases
	// every item it carried, and the retry brings them all back. A handler
	// that succeeds for some items only fails the others one by one: a Go
	// handler with [Batch.Fail], any other (the gateway's backend) by
	// naming their keys in a [FailedItemsHeader] of its 2xx answer.
	ItemsFilter ItemsMode = "filter"
)
