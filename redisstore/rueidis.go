package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// NewRueidis returns a store that keeps its records through a rueidis
// client (github.com/redis/rueidis), which pipelines the commands of
// concurrent calls on its own: [Config.Batch] has no use here and is
// refused. The client may be standalone, Sentinel or Cluster, as rueidis
// finds from its ClientOption. The caller owns client and closes it after
// the last use of the store; [Store.Close] does nothing.
//
// The records, the keys and the commands are those of [New], so instances
// on go-redis and on rueidis can share one Redis. For a webhook path set
// ClientOption.DisableCache (the store never reads through rueidis's
// client-side cache) and DisableRetry: rueidis otherwise retries a GET
// after a network error, within the call's context, where the middleware
// would rather fail open at once. The store's writes are never
// retried, so a failed write is a store error for the middleware's policy,
// never a second SET of the same claim. See ExampleNewRueidis.
func NewRueidis(client rueidis.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client: pass a rueidis.Client such as rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{\"127.0.0.1:6379\"}})")
	}
	if cfg.Batch {
		return nil, errors.New("redisstore: Config.Batch is for go-redis clients: rueidis pipelines concurrent commands by itself")
	}
	return &Store{conn: rueidisConn{client}, prefix: cfg.Prefix, compact: cfg.CompactKeys}, nil
}

// rueidisConn sends the store's commands through a rueidis client.
type rueidisConn struct{ client rueidis.Client }

func (c rueidisConn) setNXGet(ctx context.Context, key string, val []byte, ms int64) ([]byte, bool, error) {
	cmd := c.client.B().Set().Key(key).Value(rueidis.BinaryString(val)).Nx().Get().PxMilliseconds(ms).Build()
	return bytesOf(c.client.Do(ctx, cmd))
}

func (c rueidisConn) eval(ctx context.Context, sc *script, key string, args ...any) (int64, error) {
	argv := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case []byte:
			argv[i] = rueidis.BinaryString(a)
		case int64:
			argv[i] = strconv.FormatInt(a, 10)
		default:
			return 0, fmt.Errorf("redisstore: script argument of type %T", a)
		}
	}
	return sc.rueidis.Exec(ctx, c.client, []string{key}, argv).AsInt64()
}

func (c rueidisConn) get(ctx context.Context, key string) ([]byte, bool, error) {
	return bytesOf(c.client.Do(ctx, c.client.B().Get().Key(key).Build()))
}

func (c rueidisConn) del(ctx context.Context, key string) (int64, error) {
	return c.client.Do(ctx, c.client.B().Del().Key(key).Build()).AsInt64()
}

func (rueidisConn) close() {}

// bytesOf is the value of a bulk-string reply, found false for a nil one.
func bytesOf(r rueidis.RedisResult) ([]byte, bool, error) {
	val, err := r.AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil
	}
	return val, err == nil, err
}
