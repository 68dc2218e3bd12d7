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
// concurrent calls on its own: [Config.Unbatched] (and the deprecated
// [Config.Batch]) have no use here and are refused. The client may be standalone, Sentinel or Cluster, as rueidis
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
//
// With [Config.WaitReplicas] or [Config.WaitAOF], leave
// ClientOption.ConnLifetime unset: when a connection's lifetime ends in the
// middle of a DoMulti, rueidis sends the rest on another connection, and a
// WAIT sent there counts that connection's writes, not the store's.
func NewRueidis(client rueidis.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client: pass a rueidis.Client such as rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{\"127.0.0.1:6379\"}})")
	}
	if cfg.Batch {
		return nil, errors.New("redisstore: Config.Batch is for go-redis clients: rueidis pipelines concurrent commands by itself")
	}
	if cfg.Unbatched {
		return nil, errors.New("redisstore: Config.Unbatched is for go-redis clients: rueidis pipelines concurrent commands by itself (its ClientOption.DisableAutoPipelining turns that off)")
	}
	w, err := newWaiting(cfg)
	if err != nil {
		return nil, err
	}
	if w != nil && client.Mode() == rueidis.ClientModeCluster {
		return nil, errors.New("redisstore: Config.WaitReplicas and WaitAOF are not available on a rueidis Cluster client: WAIT has no key, so the client sends it to a node and connection of its choosing, not after the write it should count")
	}
	return &Store{conn: rueidisConn{client}, prefix: cfg.Prefix, compact: cfg.CompactKeys, wait: w}, nil
}

// rueidisConn sends the store's commands through a rueidis client.
type rueidisConn struct{ client rueidis.Client }

func (c rueidisConn) setNXGet(ctx context.Context, key string, val []byte, ms int64, w *waiting) ([]byte, bool, acks, error) {
	cmd := c.client.B().Set().Key(key).Value(rueidis.BinaryString(val)).Nx().Get().PxMilliseconds(ms).Build()
	if w == nil {
		old, found, err := bytesOf(c.client.Do(ctx, cmd))
		return old, found, acks{}, err
	}
	// SET and WAIT in one round trip, on one dedicated connection (rueidis
	// sends a DoMulti holding a blocking command so); see wait.go.
	res := c.client.DoMulti(ctx, cmd, w.rueidisCmd(c.client))
	old, found, err := bytesOf(res[0])
	return old, found, w.rueidisAcks(res[1]), err
}

func (c rueidisConn) eval(ctx context.Context, sc *script, key string, w *waiting, args ...any) (int64, acks, error) {
	argv, err := rueidisArgs(args)
	if err != nil {
		return 0, acks{}, err
	}
	if w == nil {
		n, err := sc.rueidis.Exec(ctx, c.client, []string{key}, argv).AsInt64()
		return n, acks{}, err
	}
	// EVALSHA, or EVAL when the server hasn't cached the script, each
	// followed by the WAIT in the same round trip (its answer is ignored
	// when the script answers 0). rueidis sends a DoMulti holding a
	// blocking command (WAIT) on one dedicated connection, in order.
	res := c.client.DoMulti(ctx, c.client.B().Evalsha().Sha1(sc.sha1()).Numkeys(1).Key(key).Arg(argv...).Build(), w.rueidisCmd(c.client))
	if rerr, ok := rueidis.IsRedisErr(res[0].Error()); ok && rerr.IsNoScript() {
		res = c.client.DoMulti(ctx, c.client.B().Eval().Script(sc.src).Numkeys(1).Key(key).Arg(argv...).Build(), w.rueidisCmd(c.client))
	}
	n, err := res[0].AsInt64()
	if err != nil {
		return 0, acks{}, err
	}
	return n, w.rueidisAcks(res[1]), nil
}

// rueidisCmd returns the WAIT or WAITAOF command w asks for.
func (w *waiting) rueidisCmd(client rueidis.CommandClient) rueidis.Completed {
	if w.aof {
		return client.B().Waitaof().Numlocal(1).Numreplicas(int64(w.replicas)).Timeout(w.ms).Build()
	}
	return client.B().Wait().Numreplicas(int64(w.replicas)).Timeout(w.ms).Build()
}

// rueidisAcks reads the answer of a command rueidisCmd made.
func (w *waiting) rueidisAcks(r rueidis.RedisResult) acks {
	if !w.aof {
		n, err := r.AsInt64()
		return acks{replicas: n, err: err}
	}
	v, err := r.AsIntSlice()
	switch {
	case err != nil:
		return acks{err: err}
	case len(v) != 2:
		return acks{err: fmt.Errorf("unexpected WAITAOF answer %v", v)}
	}
	return acks{local: v[0], replicas: v[1]}
}

func (c rueidisConn) get(ctx context.Context, key string) ([]byte, bool, error) {
	return bytesOf(c.client.Do(ctx, c.client.B().Get().Key(key).Build()))
}

func (c rueidisConn) del(ctx context.Context, key string) (int64, error) {
	return c.client.Do(ctx, c.client.B().Del().Key(key).Build()).AsInt64()
}

func (c rueidisConn) version(ctx context.Context) (string, error) {
	info, err := c.client.Do(ctx, c.client.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", err
	}
	return serverVersion(info)
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

// setNXGetMany sends a SET NX GET PX per key as one DoMulti, which a
// Cluster client splits by node (see batchstore.go).
func (c rueidisConn) setNXGetMany(ctx context.Context, keys []string, vals [][]byte, ms int64, w *waiting) multiResult {
	cmds := make(rueidis.Commands, 0, len(keys)+1)
	for i, key := range keys {
		cmds = append(cmds, c.client.B().Set().Key(key).Value(rueidis.BinaryString(vals[i])).Nx().Get().PxMilliseconds(ms).Build())
	}
	res := multiResult{replies: make([]multiReply, len(keys))}
	out := c.doWait(ctx, cmds, w, &res.acks[0])
	for i := range keys {
		r := &res.replies[i]
		r.val, r.found, r.err = bytesOf(out[i])
	}
	return res
}

// evalMany sends an EVALSHA of sc per key as one DoMulti, and those a
// server answered NOSCRIPT again as EVAL, in a second one (see
// batchstore.go).
func (c rueidisConn) evalMany(ctx context.Context, sc *script, keys []string, args [][]any, w *waiting) multiResult {
	res := multiResult{replies: make([]multiReply, len(keys))}
	argv := make([][]string, len(keys))
	cmds := make(rueidis.Commands, 0, len(keys)+1)
	for i, key := range keys {
		a, err := rueidisArgs(args[i])
		if err != nil {
			res.replies[i].err = err // never the case: the store passes []byte and int64
			continue
		}
		argv[i] = a
		cmds = append(cmds, c.client.B().Evalsha().Sha1(sc.sha1()).Numkeys(1).Key(key).Arg(a...).Build())
	}
	out := c.doWait(ctx, cmds, w, &res.acks[0])
	results := make([]rueidis.RedisResult, len(keys))
	var again []int
	for i, k := 0, 0; i < len(keys); i++ {
		if argv[i] == nil {
			continue
		}
		results[i] = out[k]
		k++
		if rerr, ok := rueidis.IsRedisErr(results[i].Error()); ok && rerr.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		// Not cached on a server yet: EVAL sends and caches the script.
		cmds = make(rueidis.Commands, 0, len(again)+1)
		for _, i := range again {
			cmds = append(cmds, c.client.B().Eval().Script(sc.src).Numkeys(1).Key(keys[i]).Arg(argv[i]...).Build())
			res.replies[i].pipe = 1
		}
		out = c.doWait(ctx, cmds, w, &res.acks[1])
		for k, i := range again {
			results[i] = out[k]
		}
	}
	for i := range keys {
		if argv[i] == nil {
			continue
		}
		r := &res.replies[i]
		r.n, r.err = results[i].AsInt64()
	}
	return res
}

// doWait sends cmds as one DoMulti, followed by w's WAIT when w is not nil
// (rueidis sends a DoMulti holding a blocking command on one dedicated
// connection, in order), and sets ack to the WAIT's answer. It returns
// the results of cmds.
func (c rueidisConn) doWait(ctx context.Context, cmds rueidis.Commands, w *waiting, ack *acks) []rueidis.RedisResult {
	if w != nil {
		cmds = append(cmds, w.rueidisCmd(c.client))
	}
	out := c.client.DoMulti(ctx, cmds...)
	if w != nil {
		*ack = w.rueidisAcks(out[len(out)-1])
		out = out[:len(out)-1]
	}
	return out
}

// rueidisArgs is a script's arguments as rueidis takes them.
func rueidisArgs(args []any) ([]string, error) {
	argv := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case []byte:
			argv[i] = rueidis.BinaryString(a)
		case int64:
			argv[i] = strconv.FormatInt(a, 10)
		default:
			return nil, fmt.Errorf("redisstore: script argument of type %T", a)
		}
	}
	return argv, nil
}

// isReply reports whether err is an error reply of Redis.
func (rueidisConn) isReply(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}
