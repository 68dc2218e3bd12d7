package redisstore

import (
	"github.com/redis/go-redis/v9"
)

// OpenConfig configures [Open]: the store's Config and where its Redis is,
// as the gateway's store section says it. Either URL, for one server, or
// Addrs, for a Sentinel-managed master (with MasterName) or a Cluster (more
// than one address), as redis.NewUniversalClient reads them.
type OpenConfig struct {
	// Config is the store's ([New]).
	Config

	// URL is one server's redis:// or rediss:// URL (go-redis's
	// redis.ParseURL): its address, database, TLS, and user and password
	// when it has them. It replaces Addrs.
	URL string

	// Addrs are the addresses of a Cluster's nodes, or of the Sentinels
	// when MasterName is set.
	Addrs []string

	// MasterName is the name of the master the Sentinels at Addrs watch.
	MasterName string

	// Username and Password authenticate to Redis. Those of URL, when it
	// has them, take their place.
	Username string
	Password string
}

// Opened is a store that [Open] opened, with the client it made for it.
type Opened struct {
	// Store is the store.
	Store *Store

	// Client is the store's client, which [Opened.Close] closes. Whatever
	// else uses the same Redis in this process (an audit stream) may share
	// it, and stop using it before Close.
	Client redis.UniversalClient
}

// Open opens the store in one call: it makes a go-redis client for
// cfg.URL or cfg.Addrs with the settings the package documentation advises
// for a webhook path (no command retries, one dial: "Client settings for a
// webhook path"), and the store on it ([New]). The client connects at the
// first command, so a Redis that is down fails that command, not Open. An
// error is redis.ParseURL's or New's, unwrapped; after New's, Open has
// closed the client.
// Use [New] or [NewRueidis] to build the store on a client of your own.
func Open(cfg OpenConfig) (*Opened, error) {
	opts := &redis.UniversalOptions{
		Addrs:      cfg.Addrs,
		MasterName: cfg.MasterName,
		Username:   cfg.Username,
		Password:   cfg.Password,
		// Fail fast: a dead Redis costs ~0.1ms per call instead of the
		// 250ms store deadline, and the middleware fails open instead of
		// retrying.
		MaxRetries:    -1,
		DialerRetries: 1,
	}
	if cfg.URL != "" {
		o, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, err
		}
		opts.Addrs = []string{o.Addr}
		opts.DB = o.DB
		opts.TLSConfig = o.TLSConfig
		if o.Username != "" {
			opts.Username = o.Username
		}
		if o.Password != "" {
			opts.Password = o.Password
		}
	}
	client := redis.NewUniversalClient(opts)
	s, err := New(client, cfg.Config)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &Opened{Store: s, Client: client}, nil
}

// Close closes the store, then the client.
func (o *Opened) Close() error {
	serr := o.Store.Close()
	if err := o.Client.Close(); serr == nil {
		return err
	}
	return serr
}
