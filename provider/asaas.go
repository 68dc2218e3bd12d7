package provider

import (
	"net/http"

	"github.com/idemhook/idemhook"
)

// AsaasTokenHeader is the header Asaas sends the configured authToken in.
const AsaasTokenHeader = "asaas-access-token"

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
	s, err := cfg.check("asaas")
	if err != nil {
		return nil, err
	}
	return &idemhook.Preset{
		Name:        "asaas",
		RetryWindow: asaasRetryWindow,
		Verify:      s.verifyToken(AsaasTokenHeader, false),
		Key: func(r *http.Request, body []byte) (string, error) {
			return topLevelID(body, "id"), nil
		},
		DuplicateStatus: http.StatusOK,
		SuccessStatus:   http.StatusOK,
	}, nil
}

// verifyToken returns a Verify that compares a static token header with the
// configured secrets. With bearer, a "Bearer " prefix is removed first.
func (s settings) verifyToken(header string, bearer bool) func(*http.Request, []byte) error {
	return func(r *http.Request, _ []byte) error {
		got := r.Header.Get(header)
		if bearer {
			if len(got) > 7 && (got[:7] == "Bearer " || got[:7] == "bearer ") {
				got = got[7:]
			}
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
