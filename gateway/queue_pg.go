package gateway

import (
	"context"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/pgstore"
	"github.com/idemhook/idemhook/queue"
)

// pgQueue returns the opener of a PostgreSQL store's queue, when store is one.
func pgQueue(ctx context.Context, store idemhook.Store) (func() (queue.Engine, error), bool) {
	s, ok := store.(*pgstore.Store)
	if !ok {
		return nil, false
	}
	return func() (queue.Engine, error) { return s.Queue(ctx) }, true
}
