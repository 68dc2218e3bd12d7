package memstore

import (
	"context"

	"github.com/idemhook/idemhook/queue"
)

var _ queue.EngineStore = (*Store)(nil)

// QueueEngine returns a new, empty queue kept in memory beside the store's
// keys ([queue.NewMemory]), for [queue.EngineStore]. Each call returns
// another queue: keep the one.
func (s *Store) QueueEngine(context.Context) (queue.Engine, error) {
	return queue.NewMemory(s), nil
}
