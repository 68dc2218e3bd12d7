package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// goredisConn sends the store's commands through a go-redis client, in the
// pipelines of batch.go unless [Config.Unbatched].
type goredisConn struct {
	client redis.UniversalClient
	batch  *batcher // nil with Config.Unbatched
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

func (c *goredisConn) setNXGet(ctx context.Context, key string, val []byte, ms int64, w *waiting) ([]byte, bool, acks, error) {
	cmd := redis.NewStringCmd(ctx, "set", key, val, "nx", "get", "px", ms)
	ack, err := c.run(ctx, cmd, w)
	old, found, err := stringReply(cmd, err)
	return old, found, ack, err
}

func (c *goredisConn) eval(ctx context.Context, sc *script, key string, w *waiting, args ...any) (int64, acks, error) {
	if c.batch == nil && w == nil {
		n, err := sc.goredis.Run(ctx, c.client, []string{key}, args...).Int64()
		return n, acks{}, err
	}
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", sc.sha1(), 1, key}, args...)...)
	ack, err := c.run(ctx, cmd, w)
	if isNoScript(err) {
		// Not cached on this server yet: EVAL sends and caches it. Sent
		// apart from the batches, as it is rare (once per script and
		// server).
		cmd = redis.NewCmd(ctx, append([]any{"eval", sc.src, 1, key}, args...)...)
		if w == nil {
			err = c.client.Process(ctx, cmd)
		} else {
			ack, err = c.pipelined(ctx, cmd, w)
		}
	}
	if err != nil {
		return 0, acks{}, err
	}
	n, err := cmd.Int64()
	return n, ack, err
}

// run runs cmd, through the batcher when there is one, followed by the
// WAIT w asks for when w is not nil. It returns that WAIT's answer and
// cmd's error, or the context's when the caller's context ended while cmd
// waited in a batch: as with process, read cmd only when the error is nil
// (or redis.Nil).
func (c *goredisConn) run(ctx context.Context, cmd redis.Cmder, w *waiting) (acks, error) {
	switch {
	case w == nil:
		return acks{}, c.process(ctx, cmd)
	case c.batch != nil:
		return c.batch.doWait(ctx, cmd)
	}
	return c.pipelined(ctx, cmd, w)
}

// pipelined sends cmd and then w's WAIT as one pipeline, which a
// *redis.Client (the only client New accepts with w) sends on one
// connection. It returns the WAIT's answer and cmd's error.
func (c *goredisConn) pipelined(ctx context.Context, cmd redis.Cmder, w *waiting) (acks, error) {
	pipe := c.client.Pipeline()
	pipe.Process(ctx, cmd) //nolint:errcheck // a pipeline's Process only queues
	wc := w.goredisCmd(ctx)
	pipe.Process(ctx, wc) //nolint:errcheck // a pipeline's Process only queues
	pipe.Exec(ctx)        //nolint:errcheck // every command carries its own error
	return w.goredisAcks(wc), cmd.Err()
}

// goredisCmd returns the WAIT or WAITAOF command w asks for.
func (w *waiting) goredisCmd(ctx context.Context) redis.Cmder {
	if w.aof {
		return redis.NewIntSliceCmd(ctx, "waitaof", 1, w.replicas, w.ms)
	}
	return redis.NewIntCmd(ctx, "wait", w.replicas, w.ms)
}

// goredisAcks reads the answer of a command goredisCmd made.
func (w *waiting) goredisAcks(cmd redis.Cmder) acks {
	if err := cmd.Err(); err != nil {
		return acks{err: err}
	}
	switch cmd := cmd.(type) {
	case *redis.IntCmd:
		return acks{replicas: cmd.Val()}
	case *redis.IntSliceCmd:
		if v := cmd.Val(); len(v) == 2 {
			return acks{local: v[0], replicas: v[1]}
		}
		return acks{err: fmt.Errorf("unexpected WAITAOF answer %v", cmd.Val())}
	}
	return acks{err: fmt.Errorf("unexpected command %T", cmd)}
}

func (c *goredisConn) get(ctx context.Context, key string) ([]byte, bool, error) {
	return c.bytes(ctx, redis.NewStringCmd(ctx, "get", key))
}

// bytes runs cmd and returns its bulk-string reply, found false for a nil
// one.
func (c *goredisConn) bytes(ctx context.Context, cmd *redis.StringCmd) ([]byte, bool, error) {
	return stringReply(cmd, c.process(ctx, cmd))
}

// stringReply returns the bulk-string reply of cmd, found false for a nil
// one, given err, what running cmd returned.
func stringReply(cmd *redis.StringCmd, err error) ([]byte, bool, error) {
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

func (c *goredisConn) version(ctx context.Context) (string, error) {
	info, err := c.client.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return serverVersion(info)
}

func (c *goredisConn) close() {
	if c.batch != nil {
		c.batch.close()
	}
}

// setNXGetMany sends a SET NX GET PX per key as one pipeline, which a
// Cluster client splits by node (see batchstore.go).
func (c *goredisConn) setNXGetMany(ctx context.Context, keys []string, vals [][]byte, ms int64, w *waiting) multiResult {
	cmds := make([]*redis.StringCmd, len(keys))
	pipe := c.client.Pipeline()
	for i, key := range keys {
		cmds[i] = redis.NewStringCmd(ctx, "set", key, vals[i], "nx", "get", "px", ms)
		pipe.Process(ctx, cmds[i]) //nolint:errcheck // a pipeline's Process only queues
	}
	res := multiResult{replies: make([]multiReply, len(keys))}
	res.acks[0] = c.execWait(ctx, pipe, w)
	for i, cmd := range cmds {
		r := &res.replies[i]
		r.val, r.found, r.err = stringReply(cmd, cmd.Err())
	}
	return res
}

// evalMany sends an EVALSHA of sc per key as one pipeline, which a Cluster
// client splits by node, and those a server answered NOSCRIPT again as
// EVAL, in a second one (see batchstore.go).
func (c *goredisConn) evalMany(ctx context.Context, sc *script, keys []string, args [][]any, w *waiting) multiResult {
	res := multiResult{replies: make([]multiReply, len(keys))}
	cmds := make([]*redis.Cmd, len(keys))
	pipe := c.client.Pipeline()
	for i, key := range keys {
		cmds[i] = redis.NewCmd(ctx, append([]any{"evalsha", sc.sha1(), 1, key}, args[i]...)...)
		pipe.Process(ctx, cmds[i]) //nolint:errcheck // a pipeline's Process only queues
	}
	res.acks[0] = c.execWait(ctx, pipe, w)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		// Not cached on a server yet: EVAL sends and caches the script.
		pipe = c.client.Pipeline()
		for _, i := range again {
			cmds[i] = redis.NewCmd(ctx, append([]any{"eval", sc.src, 1, keys[i]}, args[i]...)...)
			pipe.Process(ctx, cmds[i]) //nolint:errcheck // a pipeline's Process only queues
			res.replies[i].pipe = 1
		}
		res.acks[1] = c.execWait(ctx, pipe, w)
	}
	for i, cmd := range cmds {
		r := &res.replies[i]
		if r.err = cmd.Err(); r.err == nil {
			r.n, r.err = cmd.Int64()
		}
	}
	return res
}

// execWait sends pipe, followed by w's WAIT when w is not nil (New accepts
// a w only with a *redis.Client, which sends a pipeline on one
// connection), and returns the WAIT's answer. Every command of pipe
// carries its own error.
func (c *goredisConn) execWait(ctx context.Context, pipe redis.Pipeliner, w *waiting) acks {
	var wc redis.Cmder
	if w != nil {
		wc = w.goredisCmd(ctx)
		pipe.Process(ctx, wc) //nolint:errcheck // a pipeline's Process only queues
	}
	pipe.Exec(ctx) //nolint:errcheck // every command carries its own error
	if w == nil {
		return acks{}
	}
	return w.goredisAcks(wc)
}

// isReply reports whether err is an error reply of Redis.
func (c *goredisConn) isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
