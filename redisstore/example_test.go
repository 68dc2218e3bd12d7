package redisstore_test

import (
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/redisstore"
)

// New takes a client the caller owns. Nothing is sent to Redis until the
// first store call. By default a record lives under the middleware's key
// unchanged, which is the NestJS guard's key.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	shared, err := redisstore.New(client, redisstore.Config{Prefix: "billing:"})
	if err != nil {
		log.Fatal(err)
	}

	key := idemhook.StoreKey("stripe", "evt_1NG8Du2eZvKYlo2CUI79vXWy")
	fmt.Println(store.Key(key))
	fmt.Println(shared.Key(key))

	_, err = redisstore.New(nil, redisstore.Config{})
	fmt.Println(err != nil)
	// Output:
	// idem:stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy
	// billing:idem:stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy
	// true
}

// With Sentinel, a failover client follows the master Sentinel names. The
// store is the same. (No output: it needs running Sentinels.)
func ExampleNew_sentinel() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = store // pass to idemhook.New
}

// With WaitReplicas each claim and each completion waits until a replica
// has it, so that a failover doesn't lose it and run the event again; a
// short count is a store error, under the route's OnStoreError. WAIT must
// follow its write on the same connection, which a Cluster client can't
// promise: New refuses it. (Nothing is sent: New doesn't connect.)
func ExampleNew_waitReplicas() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	fmt.Println(store != nil, err)

	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.1:6379"}})
	defer cluster.Close()
	_, err = redisstore.New(cluster, redisstore.Config{WaitReplicas: 1})
	fmt.Println(err)
	// Output:
	// true <nil>
	// redisstore: Config.WaitReplicas and WaitAOF are not available on a *redis.ClusterClient: WAIT has no key, so the cluster client sends it to a node and connection of its choosing, not after the write it should count
}

// With a Cluster every step touches one key, so records spread over the
// slots. (No output: it needs a running cluster.)
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = store // pass to idemhook.New
}

// NewRueidis takes a rueidis client the caller owns, standalone, Sentinel
// or Cluster. rueidis connects in NewClient, so this example needs a
// running Redis and has no output.
func ExampleNewRueidis() {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{"127.0.0.1:6379"},
		DisableCache: true, // the store never reads through the client-side cache
		DisableRetry: true, // a GET that failed is a store error, as a write is
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.NewRueidis(client, redisstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idemhook.New(store, idemhook.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_ = mw // protect routes with mw.Route
}
