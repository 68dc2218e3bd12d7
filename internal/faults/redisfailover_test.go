package faults

import (
	"testing"
	"time"

	"github.com/idemhook/idemhook/redisstore"
)

// TestRedisFailover kills a Sentinel-managed master right after a run of
// completed events, lets Sentinel promote its replica, and delivers every
// event again. Waiting for the replica (Config.WaitReplicas, as the gateway
// runs it, with Batch) no event runs twice. Without it the test measures
// how many do, with the replica a little behind (Lag) and in step; that
// count depends on the machine and is logged, not asserted
// (docs/stores.md reports it). Every event runs at least once either way.
func TestRedisFailover(t *testing.T) {
	const lag = 30 * time.Millisecond
	tests := []struct {
		name string
		sc   RedisFailover
		once bool // assert that no event ran twice
	}{
		{"WaitReplicas1Lagging", RedisFailover{Lag: lag, Store: redisstore.Config{WaitReplicas: 1, WaitTimeout: time.Second}}, true},
		{"NoWaitLagging", RedisFailover{Lag: lag, Store: redisstore.Config{}}, false},
		{"NoWaitInStep", RedisFailover{Store: redisstore.Config{}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.sc.Run(t)
			t.Logf("%s (lag %v, WaitReplicas %d): %v", tt.name, tt.sc.Lag, tt.sc.Store.WaitReplicas, c)
			if c.Ran != c.Sent {
				t.Errorf("%d of %d events ran: every event must run at least once", c.Ran, c.Sent)
			}
			if tt.once && (c.RanTwice != 0 || c.Lost != 0) {
				t.Errorf("with WaitReplicas, %d events ran twice and %d records were lost; want 0 and 0", c.RanTwice, c.Lost)
			}
		})
	}
}
