package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// goredisConn sends the store's commands through a go-redis client, in the
// pipelines of [Config.Batch] when batch is set.
type goredisConn struct {
	client redis.UniversalClient
	batch  *batcher // nil unless Config.Batch
}

// process runs cmd, through the batcher when there is one, and returns its
// error (redis.Nil included). Read cmd's value only when it returns nil,
// because a batched command abandoned by its caller's context may still be
// running.
func (c *goredisConn) process(ctx context.Context, cmd redis.Cmder) error {
	if c.batch != nil {
		return c.batch.do(ctx, cmd)
	}
	return c.client.Process(ctx, cmd)
}

func (c *goredisConn) setNXGet(ctx context.Context, key string, val []byte, ms int64) ([]byte, bool, error) {
	return c.bytes(ctx, redis.NewStringCmd(ctx, "set", key, val, "nx", "get", "px", ms))
}

func (c *goredisConn) eval(ctx context.Context, sc *script, key string, args ...any) (int64, error) {
	if c.batch == nil {
		return sc.goredis.Run(ctx, c.client, []string{key}, args...).Int64()
	}
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", sc.goredis.Hash(), 1, key}, args...)...)
	err := c.batch.do(ctx, cmd)
	if err == nil {
		return cmd.Int64()
	}
	if isNoScript(err) { // not cached on this server yet: EVAL sends and caches it
		return sc.goredis.Eval(ctx, c.client, []string{key}, args...).Int64()
	}
	return 0, err
}

func (c *goredisConn) get(ctx context.Context, key string) ([]byte, bool, error) {
	return c.bytes(ctx, redis.NewStringCmd(ctx, "get", key))
}

// bytes runs cmd and returns its bulk-string reply, found false for a nil
// one.
func (c *goredisConn) bytes(ctx context.Context, cmd *redis.StringCmd) ([]byte, bool, error) {
	err := c.process(ctx, cmd)
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	val, err := cmd.Bytes()
	return val, err == nil, err
}

func (c *goredisConn) del(ctx context.Context, key string) (int64, error) {
	cmd := redis.NewIntCmd(ctx, "del", key)
	if err := c.process(ctx, cmd); err != nil {
		return 0, err
	}
	return cmd.Val(), nil
}

func (c *goredisConn) close() {
	if c.batch != nil {
		c.batch.close()
	}
}
