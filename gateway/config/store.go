package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/storeconf"
	"go.yaml.in/yaml/v3"
)

// Store is the store: section.
type Store struct {
	Driver     string        // sqlite | redis | postgres | memory
	Timeout    time.Duration // bound of every call to the store; 0: the middleware's default for the store
	Path       string        // sqlite
	URL        string        // redis, postgres
	Table      string        // postgres
	Addrs      []string
	MasterName string
	Username   string
	Password   string
	Prefix     string
	Compact    bool // redis: compact_keys
	// redis: wait_replicas, wait_timeout, wait_aof (redisstore.Config's
	// WaitReplicas, WaitTimeout, WaitAOF). Parse sets WaitTimeout to the
	// store's default when waiting and none is given.
	WaitReplicas int
	WaitTimeout  time.Duration
	WaitAOF      bool
}

const defaultSQLitePath = "idemhook.db"

// storeSchema is the store: section. Its driver selects the fields read:
// another driver's are refused.
var storeSchema = table[Store]{selector: "driver", fields: []field[Store]{
	{name: "driver", to: func(s *Store) any { return &s.Driver }, def: "sqlite", enum: []string{"sqlite", "redis", "postgres", "memory"}},
	{name: "path", to: func(s *Store) any { return &s.Path }, def: defaultSQLitePath, check: nonEmpty("empty path"), only: onlySQLite},
	{name: "url", only: []string{"redis", "postgres"}}, // read by store below
	{name: "addrs", only: onlyRedis},                   // read by store below
	{name: "master_name", to: func(s *Store) any { return &s.MasterName }, only: onlyRedis},
	{name: "username", to: func(s *Store) any { return &s.Username }, only: onlyRedis},
	{name: "password", to: func(s *Store) any { return &s.Password }, only: onlyRedis},
	{name: "prefix", to: func(s *Store) any { return &s.Prefix }, only: onlyRedis, checkedAnyway: true},
	{name: "compact_keys", to: func(s *Store) any { return &s.Compact }, only: onlyRedis, checkedAnyway: true},
	{name: "table", to: func(s *Store) any { return &s.Table }, def: storeconf.PostgresTable, check: storeconf.CheckTable, only: []string{"postgres"}},
	{name: "timeout", to: func(s *Store) any { return &s.Timeout }}, // 0: the library's default
	{name: "wait_replicas", to: func(s *Store) any { return &s.WaitReplicas }, min: 0, max: maxWaitReplicas,
		bad: fmt.Sprintf("want a whole number from 0 (no waiting) to %d, got %%q", maxWaitReplicas), only: onlyRedis, checkedAnyway: true},
	{name: "wait_timeout", to: func(s *Store) any { return &s.WaitTimeout }, only: onlyRedis, checkedAnyway: true},
	{name: "wait_aof", to: func(s *Store) any { return &s.WaitAOF }, only: onlyRedis, checkedAnyway: true},
}}

// The drivers of store fields.
var onlySQLite, onlyRedis = []string{"sqlite"}, []string{"redis"}

// store checks the store: section, n.
func (c *checker) store(n *yaml.Node) Store {
	var sc Store
	vals := valuesOf(n)
	storeSchema.read(c, vals, n, "store", &sc)
	if n == nil {
		return sc
	}
	// The line of a "needs" error: the driver's, or the section's.
	needs := n
	if l := vals["driver"]; l.Node != nil {
		needs = l.Node
	}
	urlValue, addrsValue := vals["url"], vals["addrs"]
	switch sc.Driver {
	case "redis":
		before := len(c.errs)
		u, hasURL := c.str(urlValue, "store.url")
		addrs, hasAddrs := c.strList(addrsValue, "store.addrs")
		switch {
		case hasURL && hasAddrs:
			c.errorf(addrsValue.Node, "store.addrs", "give either url or addrs, not both")
		case hasURL:
			if err := c.checkRedisURL(u); err != nil {
				c.errorf(urlValue.Node, "store.url", "invalid Redis URL %q: %v (want redis://[user:password@]host:port/db)", RedactURL(u), unwrapURLError(err))
			}
			sc.URL = u
		case hasAddrs:
			if len(addrs) == 0 {
				c.errorf(addrsValue.Node, "store.addrs", "empty list: give at least one host:port")
			}
			for i, a := range addrs {
				if _, _, err := net.SplitHostPort(a); err != nil {
					c.errorf(addrsValue.Content[i], fmt.Sprintf("store.addrs[%d]", i), "invalid address %q: want host:port", a)
				}
			}
			sc.Addrs = addrs
		case len(c.errs) == before: // neither given, and no error said why
			c.errorf(needs, "store", "driver redis needs url (redis://host:port/db) or addrs (a list of host:port)")
		}
		if sc.MasterName != "" && !hasAddrs {
			c.errorf(c.key(vals["master_name"]), "store.master_name", "Sentinel needs addrs (the Sentinels' host:port list)")
		}
	case "postgres":
		before := len(c.errs)
		u, hasURL := c.str(urlValue, "store.url")
		switch {
		case !hasURL && len(c.errs) > before:
			// The url was given but is unusable, and the error says why.
		case !hasURL:
			c.errorf(needs, "store.url", "driver postgres needs url (postgres://user:password@host:5432/db)")
		default:
			if err := c.checkPostgresURL(u); err != nil {
				c.errorf(urlValue.Node, "store.url", "invalid PostgreSQL URL %q: %v (want postgres://user:password@host:5432/db)", RedactURL(u), err)
			}
			sc.URL = u
		}
	}
	c.storeWait(vals, &sc)
	return sc
}

// storeWait checks what wait_replicas, wait_timeout and wait_aof of the
// store: section, of values vals, ask of the rest of sc.
func (c *checker) storeWait(vals values, sc *Store) {
	if sc.Driver != "redis" {
		return
	}
	waits := sc.WaitReplicas > 0 || sc.WaitAOF
	// Where an error about waiting goes: the field that turns it on.
	on, onField := c.key(vals["wait_replicas"]), "store.wait_replicas"
	if sc.WaitReplicas == 0 {
		on, onField = c.key(vals["wait_aof"]), "store.wait_aof"
	}
	switch {
	case !waits && sc.WaitTimeout > 0:
		c.errorf(c.key(vals["wait_timeout"]), "store.wait_timeout", "does nothing without wait_replicas or wait_aof")
	case waits && len(sc.Addrs) > 1 && sc.MasterName == "":
		c.errorf(on, onField, "not available on a Redis Cluster (several addrs and no master_name): WAIT has no key, so the cluster client can't send it after the write it counts; use a standalone server or Sentinel, or leave it off")
	case waits:
		sc.WaitTimeout = cmp.Or(sc.WaitTimeout, storeconf.RedisWaitTimeout)
		wait, store := sc.WaitTimeout, cmp.Or(sc.Timeout, idemhook.DefaultStoreTimeout)
		if wait < store {
			break
		}
		if l := vals["wait_timeout"]; l.Node != nil {
			c.errorf(l.Node, "store.wait_timeout", "%s is not below store.timeout %s: the store call would give up before WAIT answers", FormatDuration(wait), FormatDuration(store))
		} else {
			c.errorf(vals["timeout"].Node, "store.timeout", "%s is not above wait_timeout's default %s: the store call would give up before WAIT answers (set a shorter wait_timeout)", FormatDuration(store), FormatDuration(wait))
		}
	}
}

// checkRedisURL checks a Redis URL the way go-redis will read it, with the
// [URLChecker] if there is one.
func (c *checker) checkRedisURL(u string) error {
	if c.urls == nil {
		return nil
	}
	return c.urls.CheckRedisURL(u)
}

// checkPostgresURL checks a PostgreSQL URL the way pgx will read it, without
// connecting: its scheme here, the rest with the [URLChecker] if there is
// one. The error never holds the URL (nor its password).
func (c *checker) checkPostgresURL(u string) error {
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return errors.New("the scheme must be postgres:// or postgresql://")
	}
	if c.urls == nil {
		return nil
	}
	return c.urls.CheckPostgresURL(u)
}
