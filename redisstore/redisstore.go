// Package redisstore is an [idemhook.Store] kept in Redis (or Valkey) through
// a go-redis [redis.UniversalClient] ([New]) or a rueidis client
// ([NewRueidis]). The client may be a standalone server, a Sentinel-managed
// master or a Redis Cluster. Both send the same commands and keep the same
// records, so instances on either client share one Redis.
//
// Each step is one round trip touching one key, so it works unchanged on a
// Cluster:
//
//   - Claim is a single SET key value NX GET PX lease (Redis 7.0 or later).
//     It stores the pending record when the key is absent and returns the
//     record already there otherwise. A duplicate delivery costs one command.
//   - Complete, Release and Extend are Lua scripts (EVALSHA, falling back to
//     EVAL when the server hasn't cached the script) that act only while the
//     key still holds exactly the encoded claim. The encoding is deterministic
//     and a pending record carries an owner token unique to the claim, so byte
//     equality is ownership.
//   - Get is GET, Delete is DEL.
//
// The store is an [idemhook.BatchStore]: ClaimBatch, CompleteBatch,
// ReleaseBatch and ExtendBatch send the same command per op (SET NX GET
// PX, or the script), all in one pipeline (go-redis's Pipeline, rueidis's
// DoMulti). A Cluster client splits it by node and sends the parts at
// once, so a batch of the middleware's batched delivery (up to 1,000 items
// or more) costs one round trip per master it touches, whatever its keys'
// slots; a script a server has not cached costs one more (EVAL), and with
// [Config.WaitReplicas] the pipeline ends with one WAIT. Two ops on one key
// act as two calls in the batch's order. See batchstore.go.
//
// Keys are the middleware's store keys ("idem:<source>:<key>", the NestJS
// guard's format) with an optional [Config.Prefix], or with
// [Config.CompactKeys] a 24-character digest of them. Values are
// [idemhook.Record] in its binary encoding. A value that can't be decoded
// is reported as an error wrapping [idemhook.ErrCorruptRecord].
//
// The caller owns the client, and the store never closes it. Any client
// satisfying redis.UniversalClient works: redis.NewClient,
// redis.NewFailoverClient (Sentinel), redis.NewClusterClient or
// redis.NewUniversalClient. Claim, Complete, Release and Extend write, so
// they go to the master. With FailoverOptions.ReplicaOnly every command goes
// to a replica, and they fail. A client that routes reads to replicas
// (ReadOnly, RouteByLatency, RouteRandomly) may answer Get with a record a
// replication lag old. That only delays a waiting duplicate.
//
// # Client settings for a webhook path
//
// go-redis's defaults favour patience. A refused connection is dialled again
// (DialerRetries 5, 100ms apart) and a failed command retried (MaxRetries 3,
// with backoff). So against a dead Redis one call takes the middleware's
// whole StoreTimeout (250ms). The middleware fails open and its circuit
// breaker skips the store after a few failures, but each probe of the
// breaker still pays that. For a webhook path set
//
//	MaxRetries:    -1, // no command retries, the middleware fails open instead
//	DialerRetries: 1,
//
// Measured here, this makes a call against a stopped Redis fail in about
// 0.1ms rather than 250ms. [Open] sets them (the gateway opens its store
// with it).
//
// # Replicas and failover
//
// Redis replicates asynchronously: a write is acknowledged once the master
// has it and reaches the replicas a moment later. A master that dies in
// that moment takes it along, and the replica Sentinel promotes doesn't
// have it. For this store a lost claim or completed record means the next
// delivery of the event runs the handler again. [Config.WaitReplicas]
// makes each Claim that stores its claim, and each Complete, wait (WAIT,
// or WAITAOF with [Config.WaitAOF]) until that many replicas acknowledged
// the write, within [Config.WaitTimeout]:
//
//   - A short count is an error wrapping [ErrReplicasShort], so the
//     middleware follows the route's OnStoreError (open: the handler runs
//     unclaimed, with a WARN; closed: 503, the provider retries). A Claim
//     releases the claim it stored first, since an error means "no claim"
//     to the middleware and a claim left behind would hold off the
//     provider's retry until its lease lapsed.
//   - A Complete's record stays written on the master: the handler has
//     run and its answer is sent. The error makes the middleware log its
//     "cache write failed" WARN, which here means "written, but a failover
//     now may run the event again".
//   - Both count as failures for the middleware's circuit breaker, so
//     replicas that stop acknowledging soon make every delivery follow
//     OnStoreError until a probe gets its count again.
//   - Release and Extend don't wait: a lost release delays a retry until
//     the lease lapses, and a lost extension is redone by the next
//     renewal, so neither runs an event twice.
//   - The WAIT goes out with its write, in the same round trip, so a Claim
//     that finds a record (a replay) sends one too and ignores its answer.
//     That costs next to nothing while the replicas keep up, and all of
//     WaitTimeout while fewer than WaitReplicas replicas are connected.
//     Run more replicas than WaitReplicas, so that a failover (which takes
//     one replica to be the master) leaves the new master enough.
//
// WAIT narrows the window; it doesn't close it. Redis's documentation of
// WAIT says so: Sentinel promotes the best replica it can find, on a best
// effort, and an acknowledged write can still be lost. For effects that
// must happen once, use pgstore and commit the record in the handler's own
// transaction (CompleteTx). docs/stores.md ("Redis failover and replicas")
// has the measured cost and a failover test's counts.
//
// # Pipelines by default
//
// Through go-redis the store sends the commands of concurrent calls
// together, as pipelines of whatever is waiting when the previous pipeline
// has gone out (batch.go): Redis and this process make one read and one
// write per pipeline instead of per command, which roughly halves the
// process's CPU per replay (docs/benchmarks.md). A lone call is sent at
// once. Each call keeps its command, result, error and context. One
// pipeline is on the wire at a time, carrying what arrived during the one
// before; another goroutine (up to 4) starts only when a pipeline has been
// on the wire for 10 ms with calls waiting (a WAIT for replicas, a stalled
// server). They exit after a second or two without calls: a store that is
// not in use holds no goroutine, so not calling [Store.Close] leaks
// nothing, and Close stops them at once. [Config.Unbatched] sends each command on a
// pooled connection of its own instead (for go-redis hooks that should
// see each command under its caller's context).
//
// # go-redis or rueidis
//
// rueidis pipelines concurrent commands on a few shared connections by
// itself. Measured on this project's 2-core machine, the two are level:
// behind the middleware, rueidis served first deliveries at 0.37x of a bare
// handler and replays at 0.51x, go-redis with pipelines at 0.34x and 0.55x,
// in the same run, within that run's spread; rueidis makes fewer
// allocations (34 against 58 per first delivery). Use the client your
// service already has. The gateway uses go-redis.
package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemhook/idemhook"
)

// Config configures a [Store]. The zero value is valid.
type Config struct {
	// Prefix is prepended to every key. The middleware's keys are already
	// "idem:<source>:<key>", the format of the NestJS guard. So a team moving
	// from the guard to idemhook on the same Redis keeps its records. Set a
	// prefix only to separate several deployments sharing one database. On a
	// Cluster, a prefix holding a hash tag ("{...}") sends every key to one
	// slot. Default "".
	Prefix string

	// CompactKeys keeps each record under a key of 24 characters after
	// the prefix ("i:" and 128 bits of the store key's SHA-256, in
	// base64url) instead of the store key itself, which for a body-hash
	// route is 77 characters and the source's name. That saves 64 bytes of
	// Redis memory per key or more: a typical small answer takes about 161
	// bytes instead of 225 at 1M keys, 178 instead of 242 at 10M
	// (docs/benchmarks.md). The price:
	// the keys in Redis no longer say their source or event (the audit
	// trail and the store's own calls still take the readable key), and
	// the records are not those of the NestJS guard or of a store without
	// CompactKeys. Changing it on a running deployment is like starting on
	// an empty Redis: a retry of an event completed before the change runs
	// again. Change it only on a new Redis, or once the providers' retries
	// of the events before the change are over (the routes' TTL). Default
	// false.
	CompactKeys bool

	// Unbatched turns off the pipelining that [New] does by default, and
	// sends each command on a pooled connection of its own, as go-redis
	// does by itself. By default the commands of concurrent calls go
	// together, as pipelines of whatever is waiting when the previous
	// pipeline has gone out (see batch.go): fewer round trips and system
	// calls per command, for Redis and for this process (about half the
	// CPU of a replay, docs/benchmarks.md). A lone call is sent at once.
	// The commands, what they do, each call's result and error, and its
	// context's say are the same either way. One pipeline is on the wire
	// at a time (up to 4 when one stalls for 10 ms with calls waiting),
	// sent by goroutines that start when calls come and exit after a
	// second or two without any, so a store that is never closed leaks none;
	// [Store.Close] stops them at once.
	//
	// Set it for go-redis hooks that should see each command with its
	// caller's context (a tracing hook, redisotel, parents a command's span
	// under the delivery's only without batching: a pipeline goes out under
	// a context of its own, so its hook sees one "pipeline" span without a
	// parent), or to compare. [NewRueidis] refuses it: rueidis pipelines
	// concurrent commands by itself (its ClientOption.DisableAutoPipelining
	// turns that off). Default false.
	Unbatched bool

	// Batch was the switch that turned batching on, before it became the
	// default. It does nothing now, and keeps code that sets it compiling.
	// Setting it with Unbatched is an error, as is setting it for
	// [NewRueidis].
	//
	// Deprecated: batching is the default; set Unbatched to turn it off.
	Batch bool

	// WaitReplicas makes the writes a failover could undo into a second run
	// wait for that many replicas: each Claim that stores its claim and
	// each Complete is followed, on the same connection and in the same
	// round trip, by WAIT WaitReplicas WaitTimeout, and fails with an error
	// wrapping [ErrReplicasShort] when fewer replicas acknowledged the write
	// in time. The middleware then treats the call as a store error, under
	// the route's OnStoreError. A Claim that stored its claim releases it
	// before it returns that error; a Complete's record stays written on
	// the master (the package documentation's "Replicas and failover" says
	// why, and what WAIT still doesn't promise). It needs a client that
	// sends a pipeline on one connection: New accepts a *redis.Client
	// (redis.NewClient, redis.NewFailoverClient) and refuses a Cluster or a
	// Ring; [NewRueidis] refuses a Cluster. Default 0: no waiting.
	WaitReplicas int

	// WaitTimeout bounds each WAIT (or WAITAOF). Keep it below the
	// middleware's StoreTimeout (250ms by default), or the call's deadline
	// ends it first and the call fails with the deadline instead of the
	// count; New refuses one that is not below the go-redis client's
	// ReadTimeout. Set without WaitReplicas or WaitAOF it would do nothing,
	// and New refuses it. Default 100ms when WaitReplicas or WaitAOF is set.
	WaitTimeout time.Duration

	// WaitAOF sends WAITAOF 1 WaitReplicas WaitTimeout instead of WAIT: the
	// write must be fsynced to the append-only file of the master and of
	// WaitReplicas replicas, which survives a restart of all of them, where
	// WAIT only says the replicas hold it in memory. WAITAOF needs Redis 7.2
	// or later with appendonly yes on the master (and on the replicas
	// counted); against an older server every Claim and Complete fails with
	// an error naming the server's version. Default false.
	WaitAOF bool
}

// Store is an [idemhook.Store] in Redis. It is safe for concurrent use.
type Store struct {
	conn    conn
	prefix  string
	compact bool     // Config.CompactKeys
	wait    *waiting // Config.WaitReplicas, WaitTimeout, WaitAOF; nil: no waiting

	closeOnce sync.Once
}

var _ idemhook.NamedStore = (*Store)(nil)

// conn sends the store's commands through one client library. Each method
// is one command on one key; eval is EVALSHA, followed by EVAL when the
// server doesn't have the script cached.
//
// setNXGet and eval take a *waiting: when it is not nil, the command is
// followed on the same connection, in the same round trip, by the WAIT (or
// WAITAOF) it describes, and ack is that command's answer. WAIT can't run
// inside a script, and it counts the acknowledgements of the connection's
// last write, so it must follow the write on the write's connection.
type conn interface {
	// setNXGet runs SET key val NX GET PX ms and returns the value the key
	// held, or found false when it held none (and now holds val).
	setNXGet(ctx context.Context, key string, val []byte, ms int64, w *waiting) (old []byte, found bool, ack acks, err error)
	// eval runs a compare-and-set script and returns its answer. Each
	// argument is an encoded record ([]byte) or a lifetime in ms (int64).
	eval(ctx context.Context, sc *script, key string, w *waiting, args ...any) (int64, acks, error)
	get(ctx context.Context, key string) (val []byte, found bool, err error)
	del(ctx context.Context, key string) (int64, error)
	// version returns the server's redis_version (INFO server), for an
	// error that depends on it.
	version(ctx context.Context) (string, error)
	close()
	// The batched calls' commands (batchstore.go).
	batchConn
}

// New returns a store that keeps its records through client. The caller
// owns client and closes it after the last use of the store.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client: pass a redis.UniversalClient such as redis.NewClient(&redis.Options{Addr: \"127.0.0.1:6379\"})")
	}
	w, err := newWaiting(cfg)
	if err != nil {
		return nil, err
	}
	if w != nil {
		if err := w.checkGoRedis(client); err != nil {
			return nil, err
		}
	}
	if cfg.Batch && cfg.Unbatched {
		return nil, errors.New("redisstore: Config.Batch and Config.Unbatched are both set: batching is the default, leave Batch unset")
	}
	c := &goredisConn{client: client}
	if !cfg.Unbatched {
		c.batch = newBatcher(client, w, batchIdle)
	}
	return &Store{conn: c, prefix: cfg.Prefix, compact: cfg.CompactKeys, wait: w}, nil
}

// Close stops the goroutines that send the store's pipelines (see
// [Config.Unbatched]) at once, after the pipelines on the wire, and makes
// every later call fail. It doesn't close the client, which belongs to the
// caller. Calling it is not needed to free anything: the goroutines exit by
// themselves once the store is idle. With Unbatched, and for [NewRueidis],
// it does nothing. Close is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(s.conn.close)
	return nil
}

// Key returns the Redis key a store key is kept under: the configured
// prefix followed by key, or with [Config.CompactKeys] by the key's
// compact form.
func (s *Store) Key(key string) string {
	if !s.compact {
		return s.prefix + key
	}
	sum := sha256.Sum256([]byte(key))
	buf := make([]byte, 0, len(s.prefix)+len(compactMark)+compactLen)
	buf = append(append(buf, s.prefix...), compactMark...)
	return string(base64.RawURLEncoding.AppendEncode(buf, sum[:compactBytes]))
}

// A compact key is compactMark and the first compactBytes of the key's
// SHA-256 in unpadded base64url: 24 characters, which Redis holds in a
// 32-byte allocation where a body-hash key of the guard's format
// ("idem:<source>:sha256:<64 hex>") takes 96 or more.
const (
	compactMark  = "i:"
	compactBytes = 16 // 128 bits: no two of 2^40 keys meet but with odds below 10^-14
	compactLen   = 22 // base64.RawURLEncoding.EncodedLen(compactBytes)
)

// Name is how the middleware's WARN messages name this store, as the NestJS
// guard's did: "WebhookIdempotencyGuard Redis error for key=...".
func (s *Store) Name() string { return "Redis" }

// The compare-and-set scripts. KEYS[1] is the key, ARGV[1] the encoded claim.
// GET on a missing key gives false, which never equals a string.
var (
	// ARGV[2] is the encoded completed record, ARGV[3] its TTL in ms.
	completeScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
return 0
`)
	releaseScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
return 0
`)
	// ARGV[2] is the new lease in ms.
	extendScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)
)

// script is a compare-and-set script as each client library runs it: by
// its SHA-1 (EVALSHA), and by its source (EVAL) when the server hasn't
// cached it yet.
type script struct {
	src     string
	goredis *redis.Script
	rueidis *rueidis.Lua
}

func newScript(src string) *script {
	return &script{src: src, goredis: redis.NewScript(src), rueidis: rueidis.NewLuaScript(src)}
}

// sha1 is the script's SHA-1 in hex, which EVALSHA names it by.
func (sc *script) sha1() string { return sc.goredis.Hash() }

// Claim stores claim under key for lease with SET NX GET PX and returns the
// record found there (nil when the claim was stored).
func (s *Store) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	rkey := s.Key(key)
	ms, err := millis("lease", lease)
	if err != nil {
		return nil, opError("claim", rkey, err)
	}
	val, err := claim.MarshalBinary()
	if err != nil {
		return nil, opError("claim", rkey, err)
	}
	old, found, ack, err := s.conn.setNXGet(ctx, rkey, val, ms, s.wait)
	if err != nil {
		if strings.Contains(err.Error(), "ERR syntax error") {
			err = fmt.Errorf("%w (SET with both NX and GET needs Redis 7.0 or later)", err)
		}
		return nil, opError("claim", rkey, err)
	}
	if !found {
		// The key was absent and now holds the claim.
		if err := s.checkAcks(ctx, ack); err != nil {
			return nil, opError("claim", rkey, s.unclaim(ctx, rkey, val, err))
		}
		return nil, nil
	}
	// Nothing was written: the WAIT's answer, if any, says nothing of this
	// call.
	rec := new(idemhook.Record)
	if err := rec.UnmarshalBinary(old); err != nil {
		return nil, opError("claim", rkey, err)
	}
	return rec, nil
}

// Complete replaces the claim with done, kept for ttl, if key still holds
// the claim. Otherwise it returns an error wrapping [idemhook.ErrNotOwner].
func (s *Store) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	rkey := s.Key(key)
	ms, err := millis("ttl", ttl)
	if err != nil {
		return opError("complete", rkey, err)
	}
	cv, err := claim.MarshalBinary()
	if err != nil {
		return opError("complete", rkey, err)
	}
	dv, err := done.MarshalBinary()
	if err != nil {
		return opError("complete", rkey, err)
	}
	n, ack, err := s.conn.eval(ctx, completeScript, rkey, s.wait, cv, dv, ms)
	switch {
	case err != nil:
		return opError("complete", rkey, err)
	case n != 1:
		return opError("complete", rkey, idemhook.ErrNotOwner)
	}
	if err := s.checkAcks(ctx, ack); err != nil {
		return opError("complete", rkey, fmt.Errorf("%w; the record is written on the master, but a failover now may lose it", err))
	}
	return nil
}

// Release deletes key if it still holds claim. Otherwise it returns an
// error wrapping [idemhook.ErrNotOwner].
func (s *Store) Release(ctx context.Context, key string, claim *idemhook.Record) error {
	rkey := s.Key(key)
	cv, err := claim.MarshalBinary()
	if err != nil {
		return opError("release", rkey, err)
	}
	return s.runCAS(ctx, "release", releaseScript, rkey, cv)
}

// Extend sets the lifetime of the claim under key to lease from now if key
// still holds it. Otherwise it returns an error wrapping
// [idemhook.ErrNotOwner].
func (s *Store) Extend(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) error {
	rkey := s.Key(key)
	ms, err := millis("lease", lease)
	if err != nil {
		return opError("extend", rkey, err)
	}
	cv, err := claim.MarshalBinary()
	if err != nil {
		return opError("extend", rkey, err)
	}
	return s.runCAS(ctx, "extend", extendScript, rkey, cv, ms)
}

// runCAS runs one of the compare-and-set scripts, which answer 1 when they
// acted and 0 when the key no longer held the claim.
func (s *Store) runCAS(ctx context.Context, op string, sc *script, rkey string, args ...any) error {
	n, _, err := s.conn.eval(ctx, sc, rkey, nil, args...)
	if err != nil {
		return opError(op, rkey, err)
	}
	if n != 1 {
		return opError(op, rkey, idemhook.ErrNotOwner)
	}
	return nil
}

// Get returns the record under key, or nil when there is none.
func (s *Store) Get(ctx context.Context, key string) (*idemhook.Record, error) {
	rkey := s.Key(key)
	val, found, err := s.conn.get(ctx, rkey)
	if err != nil {
		return nil, opError("get", rkey, err)
	}
	if !found {
		return nil, nil
	}
	rec := new(idemhook.Record)
	if err := rec.UnmarshalBinary(val); err != nil {
		return nil, opError("get", rkey, err)
	}
	return rec, nil
}

// Delete removes key whatever it holds and reports whether it existed.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	rkey := s.Key(key)
	n, err := s.conn.del(ctx, rkey)
	if err != nil {
		return false, opError("delete", rkey, err)
	}
	return n > 0, nil
}

// millis converts a lifetime to whole milliseconds, rounding up so that a
// positive duration never becomes 0 (which Redis rejects).
func millis(what string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("%s must be positive, got %v", what, d)
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond), nil
}

func opError(op, rkey string, err error) error {
	return fmt.Errorf("redisstore: %s %s: %w", op, rkey, err)
}
