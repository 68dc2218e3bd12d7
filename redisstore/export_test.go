package redisstore

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// NewIdle is New with the batch workers' idle period set to idle instead
// of batchIdle, so that a test needn't wait seconds for them to exit.
func NewIdle(client redis.UniversalClient, cfg Config, idle time.Duration) (*Store, error) {
	st, err := New(client, cfg)
	if err != nil || cfg.Unbatched {
		return st, err
	}
	c := st.conn.(*goredisConn)
	c.batch = newBatcher(client, st.wait, idle)
	return st, nil
}

// BatchWorkers is the number of batch worker goroutines the store counts
// as running, 0 with Unbatched.
func (s *Store) BatchWorkers() int {
	if c, ok := s.conn.(*goredisConn); ok && c.batch != nil {
		return c.batch.workers.Running()
	}
	return 0
}
