package memstore

import (
	"net/http"
	"time"

	"github.com/idemhook/idemhook"
)

// TypicalAnswer is the record the size figures of this package are for:
// what the middleware stores for a body-hash route answered with status
// 200, Content-Type: application/json and the body {"ok":true} (no
// fingerprint: the key is the body's hash already).
func TypicalAnswer(createdAt time.Time) *idemhook.Record {
	return &idemhook.Record{
		State:     idemhook.StateCompleted,
		CreatedAt: createdAt,
		Status:    http.StatusOK,
		Header:    http.Header{"Content-Type": {"application/json"}},
		Body:      []byte(`{"ok":true}`),
	}
}
