// Package redisstore is an [idemhook.Store] kept in Redis (or Valkey) through
// a go-redis [redis.UniversalClient]. The client may be a standalone server,
// a Sentinel-managed master or a Redis Cluster.
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
// Keys are the middleware's store keys ("idem:<source>:<key>", the NestJS
// guard's format) with an optional [Config.Prefix]. Values are
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
// 0.1ms rather than 250ms. The gateway sets them.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/recordio"
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

	// Batch sends the commands of concurrent calls together, as pipelines
	// of whatever is waiting when the previous pipeline has gone out (see
	// batch.go). That means fewer round trips and system calls per command,
	// for Redis and for this process. The price is a few goroutines and
	// [Store.Close]. A lone call is sent at once. The commands and what they
	// do are the same. Default false. The gateway turns it on.
	Batch bool
}

// Store is an [idemhook.Store] in Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	prefix string
	batch  *batcher // nil unless Config.Batch

	closeOnce sync.Once
}

var _ idemhook.Store = (*Store)(nil)

// New returns a store that keeps its records through client. The caller
// owns client and closes it after the last use of the store.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client: pass a redis.UniversalClient such as redis.NewClient(&redis.Options{Addr: \"127.0.0.1:6379\"})")
	}
	s := &Store{client: client, prefix: cfg.Prefix}
	if cfg.Batch {
		s.batch = startBatcher(client)
	}
	return s, nil
}

// Close stops the goroutines of [Config.Batch]. The store must not be used
// afterwards. It doesn't close the client, which belongs to the caller.
// Without Batch it does nothing. Close is safe to call more than once.
func (s *Store) Close() error {
	if s.batch != nil {
		s.closeOnce.Do(s.batch.close)
	}
	return nil
}

// process runs cmd, through the batcher when there is one, and returns its
// error (redis.Nil included). Read cmd's value only when it returns nil,
// because a batched command abandoned by its caller's context may still be
// running.
func (s *Store) process(ctx context.Context, cmd redis.Cmder) error {
	if s.batch != nil {
		return s.batch.do(ctx, cmd)
	}
	return s.client.Process(ctx, cmd)
}

// Key returns the Redis key a store key is kept under: the configured
// prefix followed by key.
func (s *Store) Key(key string) string { return s.prefix + key }

// Name is how the middleware's WARN messages name this store, as the NestJS
// guard's did: "WebhookIdempotencyGuard Redis error for key=...".
func (s *Store) Name() string { return "Redis" }

// The compare-and-set scripts. KEYS[1] is the key, ARGV[1] the encoded claim.
// GET on a missing key gives false, which never equals a string.
var (
	// ARGV[2] is the encoded completed record, ARGV[3] its TTL in ms.
	completeScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
return 0
`)
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
return 0
`)
	// ARGV[2] is the new lease in ms.
	extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)
)

// Claim stores claim under key for lease with SET NX GET PX and returns the
// record found there (nil when the claim was stored).
func (s *Store) Claim(ctx context.Context, key string, claim *idemhook.Record, lease time.Duration) (*idemhook.Record, error) {
	rkey := s.prefix + key
	ms, err := millis("lease", lease)
	if err != nil {
		return nil, opError("claim", rkey, err)
	}
	val, err := claim.MarshalBinary()
	if err != nil {
		return nil, opError("claim", rkey, err)
	}
	cmd := redis.NewStringCmd(ctx, "set", rkey, val, "nx", "get", "px", ms)
	var old string
	err = s.process(ctx, cmd)
	if err == nil {
		old = cmd.Val()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil // the key was absent and now holds the claim
	}
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && strings.Contains(rerr.Error(), "syntax error") {
			err = fmt.Errorf("%w (SET with both NX and GET needs Redis 7.0 or later)", err)
		}
		return nil, opError("claim", rkey, err)
	}
	rec, err := recordio.Decode("", "", []byte(old))
	if err != nil {
		return nil, opError("claim", rkey, err)
	}
	return rec, nil
}

// Complete replaces the claim with done, kept for ttl, if key still holds
// the claim. Otherwise it returns an error wrapping [idemhook.ErrNotOwner].
func (s *Store) Complete(ctx context.Context, key string, claim, done *idemhook.Record, ttl time.Duration) error {
	rkey := s.prefix + key
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
	return s.runCAS(ctx, "complete", completeScript, rkey, cv, dv, ms)
}

// Release deletes key if it still holds claim. Otherwise it returns an
// error wrapping [idemhook.ErrNotOwner].
func (s *Store) Release(ctx context.Context, key string, claim *idemhook.Record) error {
	rkey := s.prefix + key
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
	rkey := s.prefix + key
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
func (s *Store) runCAS(ctx context.Context, op string, script *redis.Script, rkey string, args ...any) error {
	var n int64
	var err error
	if s.batch == nil {
		n, err = script.Run(ctx, s.client, []string{rkey}, args...).Int64()
	} else {
		cmd := redis.NewCmd(ctx, append([]any{"evalsha", script.Hash(), 1, rkey}, args...)...)
		if err = s.batch.do(ctx, cmd); err == nil {
			n, err = cmd.Int64()
		}
		if isNoScript(err) { // not cached on this server yet: EVAL sends and caches it
			n, err = script.Eval(ctx, s.client, []string{rkey}, args...).Int64()
		}
	}
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
	rkey := s.prefix + key
	cmd := redis.NewStringCmd(ctx, "get", rkey)
	var val []byte
	err := s.process(ctx, cmd)
	if err == nil {
		val, err = cmd.Bytes()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, opError("get", rkey, err)
	}
	rec, err := recordio.Decode("", "", val)
	if err != nil {
		return nil, opError("get", rkey, err)
	}
	return rec, nil
}

// Delete removes key whatever it holds and reports whether it existed.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	rkey := s.prefix + key
	cmd := redis.NewIntCmd(ctx, "del", rkey)
	var n int64
	err := s.process(ctx, cmd)
	if err == nil {
		n = cmd.Val()
	}
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
