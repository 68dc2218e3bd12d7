package provider

import (
	"net/http"
	"strings"

	"github.com/idemhook/idemhook"
)

// AsaasTokenHeader is the header Asaas sends the configured authToken in.
const AsaasTokenHeader = "asaas-access-token"

// asaasPreset is the asaas preset, a spec.
var asaasPreset = builtin{
	spec: Spec{
		Name:        "asaas",
		Signature:   Signature{Algorithm: "token", Header: AsaasTokenHeader},
		Key:         KeySpec{Templates: []string{"{json:id}"}},
		Success:     Success{Status: http.StatusOK},
		RetryWindow: asaasRetryWindow,
	},
}

// Asaas returns the preset for Asaas webhooks.
//
// Key: the event's "id" (evt_...), which Asaas recommends for idempotency.
//
// Verify: Asaas signs nothing. It sends the authToken configured on the
// webhook in the asaas-access-token header. The header must equal one of
// cfg.Secrets (compared in constant time). Anyone who learns the token can
// forge deliveries, so keep it long and random, and serve the route over
// HTTPS only.
//
// Duplicates: exactly 200, because Asaas counts only 200 as success (another
// 2xx would make it retry and, after 15 failures, pause the queue). No
// options.
func Asaas(cfg Config) (*idemhook.Preset, error) {
	return asaasPreset.build(cfg)
}

// verifyToken returns a Verify that compares a static token header with the
// configured secrets. A prefix (e.g. "Bearer "), in any case, is removed
// first when the value has more than it.
func (s settings) verifyToken(header, prefix string) func(*http.Request, []byte) error {
	return func(r *http.Request, _ []byte) error {
		got := r.Header.Get(header)
		if n := len(prefix); n > 0 && len(got) > n && strings.EqualFold(got[:n], prefix) {
			got = got[n:]
		}
		if got == "" {
			return s.fail(header, ErrMissingHeader, "")
		}
		if !anyToken(s.secrets, got) {
			return s.fail(header, ErrTokenMismatch, "")
		}
		return nil
	}
}
