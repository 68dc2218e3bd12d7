package provider

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idemhook/idemhook"
)

// Go, not a spec: the key decodes the body into a Go struct: field names match
// in any case and a number is refused where a string is expected
// (TestSpecKnownKeyDifferences); the header option also changes the scheme.

// Evolution returns the preset for Evolution API (self-hosted WhatsApp)
// webhooks (the NestJS guard's "whatsapp" source).
//
// Key: Evolution has no delivery id, so the key depends on the event. For
// messages.upsert it is "<event>:<data.key.id>" (the WhatsApp message id).
// For messages.update it is "<event>:<data.keyId>:<data.status>", because
// one message goes through several statuses. Any other event, or a body
// that is not such JSON, is keyed by the body hash (Evolution re-posts the
// same bytes on its retries).
//
// Verify: Evolution signs nothing. Configure a static header on the
// instance's webhook (its "headers" setting), e.g. {"apikey": "<secret>"}.
// The header named by EvolutionOptions.Header (default "apikey") must
// equal one of cfg.Secrets, compared in constant time. With "header":
// "authorization", a "Bearer " prefix is removed first. Evolution's jwt_key
// mode (a 10-minute JWT that binds no body and expires during Evolution's
// own retries) is not supported. Use a static header instead. The global
// webhook (WEBHOOK_GLOBAL_URL) is
// sent without instance headers, so it cannot pass this check.
//
// Duplicates: the stored status (any 2xx).
func Evolution(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("evolution")
	if err != nil {
		return nil, err
	}
	header := "apikey"
	if h := cfg.Evolution.Header; h != "" {
		if h = strings.TrimSpace(h); h == "" || strings.ContainsAny(h, " \t:\r\n") {
			return nil, &OptionError{Preset: "evolution", Option: "header", Reason: fmt.Sprintf("%q is not a header name", cfg.Evolution.Header)}
		}
		header = h
	}
	bearer := ""
	if strings.EqualFold(header, "authorization") {
		bearer = "Bearer "
	}
	return &idemhook.Preset{
		Name:        "evolution",
		RetryWindow: evolutionRetryWindow,
		Verify:      s.verifyToken(header, bearer),
		Key: func(r *http.Request, body []byte) (string, error) {
			return evolutionKey(body), nil
		},
	}, nil
}

// evolutionEvent is the part of an Evolution webhook body the key reads.
type evolutionEvent struct {
	Event string `json:"event"`
	Data  struct {
		Key struct {
			ID jsonID `json:"id"`
		} `json:"key"`
		KeyID  jsonID `json:"keyId"`
		Status jsonID `json:"status"`
	} `json:"data"`
}

// evolutionKey returns the message key of an Evolution body, or "".
func evolutionKey(body []byte) string {
	var ev evolutionEvent
	if !decodeEvent(body, &ev) || ev.Event == "" {
		return ""
	}
	switch {
	case ev.Data.Key.ID != "":
		return ev.Event + ":" + string(ev.Data.Key.ID)
	case ev.Data.KeyID != "" && ev.Data.Status != "":
		return ev.Event + ":" + string(ev.Data.KeyID) + ":" + string(ev.Data.Status)
	}
	return ""
}
