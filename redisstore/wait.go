package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhook/idemhook/internal/storeconf"
)

// Waiting for replicas ([Config.WaitReplicas], [Config.WaitTimeout],
// [Config.WaitAOF]); the package documentation ("Replicas and failover")
// says what it does for a delivery.
//
// WAIT counts the replicas that acknowledged the last write of the
// connection it is sent on, so it must follow its write on the write's
// connection; it can't run inside a script. Each client sends the write
// and its WAIT together, in one round trip: go-redis by default once at the
// end of a pipeline of the waiting calls (see batch.go), or with
// Config.Unbatched as one pipeline of the write and its WAIT on a
// *redis.Client (one connection); rueidis as a DoMulti,
// which it sends on one dedicated connection because WAIT blocks.
//
// A Claim's WAIT goes out with its SET, before the SET's answer is known.
// When the SET found a record (a replay, a copy of a running delivery),
// nothing was written and the WAIT's answer is ignored. Its time is not:
// it is the replicas catching up with the connection's previous write,
// next to nothing while they keep up, but all of WaitTimeout while fewer
// replicas than asked are connected (one died; a failover left the new
// master without one). Sending WAIT only after a SET that stored would
// take a second round trip on a connection held for both, and neither
// client holds one cleanly: go-redis's Client.Conn shares the client's
// options without its lock (a data race when the two dial at once), and
// rueidis's Dedicated resets the connection with four more commands on
// every release. While replicas are missing, first deliveries fail short
// and open the middleware's breaker, which then skips the store for
// replays too; only traffic of replays alone pays the timeout each time.

// ErrReplicasShort is wrapped by the error of a Claim or Complete whose
// write fewer replicas acknowledged within [Config.WaitTimeout] than
// [Config.WaitReplicas] asks (with [Config.WaitAOF]: fewer fsynced it, or
// the master did not). The error's text gives the counts.
var ErrReplicasShort = errors.New("fewer replicas acknowledged the write than Config.WaitReplicas asks")

// DefaultWaitTimeout is the bound of each WAIT when [Config.WaitReplicas]
// or [Config.WaitAOF] is set and [Config.WaitTimeout] is not.
const DefaultWaitTimeout = storeconf.RedisWaitTimeout

// waiting is what Config.WaitReplicas, WaitTimeout and WaitAOF ask of a
// write. A nil *waiting asks nothing.
type waiting struct {
	replicas int
	aof      bool
	timeout  time.Duration
	ms       int64 // timeout in whole milliseconds, never 0 (which is forever)
}

// acks is the answer of a WAIT (replicas) or WAITAOF (local, replicas), or
// the error that came instead of it.
type acks struct {
	local, replicas int64
	err             error
}

// newWaiting checks the Wait fields of cfg and returns what they ask, nil
// for nothing.
func newWaiting(cfg Config) (*waiting, error) {
	switch {
	case cfg.WaitReplicas < 0:
		return nil, fmt.Errorf("redisstore: Config.WaitReplicas %d is negative (0 waits for no replica)", cfg.WaitReplicas)
	case cfg.WaitTimeout < 0:
		return nil, fmt.Errorf("redisstore: Config.WaitTimeout %v is negative", cfg.WaitTimeout)
	case cfg.WaitReplicas == 0 && !cfg.WaitAOF:
		if cfg.WaitTimeout > 0 {
			return nil, fmt.Errorf("redisstore: Config.WaitTimeout %v does nothing without Config.WaitReplicas or Config.WaitAOF", cfg.WaitTimeout)
		}
		return nil, nil
	}
	w := &waiting{replicas: cfg.WaitReplicas, aof: cfg.WaitAOF, timeout: cfg.WaitTimeout}
	if w.timeout == 0 {
		w.timeout = DefaultWaitTimeout
	}
	w.ms, _ = millis("WaitTimeout", w.timeout) // positive, so no error
	return w, nil
}

// checkGoRedis refuses a go-redis client on which WAIT could not follow
// its write on the write's connection, or whose read timeout would cut a
// WAIT short.
func (w *waiting) checkGoRedis(client redis.UniversalClient) error {
	c, ok := client.(*redis.Client)
	if !ok {
		why := "only a *redis.Client (redis.NewClient, redis.NewFailoverClient) sends a pipeline on one connection"
		if _, cluster := client.(*redis.ClusterClient); cluster {
			why = "WAIT has no key, so the cluster client sends it to a node and connection of its choosing, not after the write it should count"
		}
		return fmt.Errorf("redisstore: Config.WaitReplicas and WaitAOF are not available on a %T: %s", client, why)
	}
	if rt := c.Options().ReadTimeout; rt > 0 && w.timeout >= rt {
		return fmt.Errorf("redisstore: Config.WaitTimeout %v is not below the client's ReadTimeout %v: the client would give up on WAIT before it answers", w.timeout, rt)
	}
	return nil
}

// name is the command waited with.
func (w *waiting) name() string {
	if w.aof {
		return "WAITAOF"
	}
	return "WAIT"
}

// checkAcks returns nil when ack has what s.wait asks, or else the error
// that says what is missing (wrapping ErrReplicasShort for a short count).
func (s *Store) checkAcks(ctx context.Context, ack acks) error {
	w := s.wait
	if w == nil {
		return nil
	}
	if ack.err != nil {
		err := fmt.Errorf("%s after the write: %w", w.name(), ack.err)
		if w.aof && strings.Contains(strings.ToLower(ack.err.Error()), "unknown command") {
			v, verr := s.conn.version(ctx)
			if verr != nil {
				v = "of unknown version (" + verr.Error() + ")"
			}
			err = fmt.Errorf("%w (Config.WaitAOF needs WAITAOF, which Redis 7.2 added; the server is Redis %s)", err, v)
		}
		return err
	}
	if !w.aof {
		if ack.replicas < int64(w.replicas) {
			return fmt.Errorf("%w: %d of %d within %v (WAIT)", ErrReplicasShort, ack.replicas, w.replicas, w.timeout)
		}
		return nil
	}
	if ack.local < 1 || ack.replicas < int64(w.replicas) {
		master := "and by the master"
		if ack.local < 1 {
			master = "but not by the master"
		}
		return fmt.Errorf("%w: fsynced by %d of %d replicas %s within %v (WAITAOF)", ErrReplicasShort, ack.replicas, w.replicas, master, w.timeout)
	}
	return nil
}

// unclaim releases the claim val a Claim stored under rkey without the
// acknowledgements Config asks, and returns err with what became of it.
func (s *Store) unclaim(ctx context.Context, rkey string, val []byte, err error) error {
	if _, _, rerr := s.conn.eval(ctx, releaseScript, rkey, nil, val); rerr != nil {
		return fmt.Errorf("%w; releasing the claim failed too (%v), so it stays until its lease lapses", err, rerr)
	}
	return fmt.Errorf("%w; the claim was released", err)
}

// serverVersion picks redis_version out of an INFO server reply.
func serverVersion(info string) (string, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("INFO server has no redis_version")
}
