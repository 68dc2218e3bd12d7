package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strconv"
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

// storeFile is the store: section as decoded: each field a leaf that the
// checker below reads.
type storeFile struct {
	Driver       leaf `yaml:"driver"`
	Path         leaf `yaml:"path"`
	URL          leaf `yaml:"url"`
	Addrs        leaf `yaml:"addrs"`
	MasterName   leaf `yaml:"master_name"`
	Username     leaf `yaml:"username"`
	Password     leaf `yaml:"password"`
	Prefix       leaf `yaml:"prefix"`
	Compact      leaf `yaml:"compact_keys"`
	Table        leaf `yaml:"table"`
	Timeout      leaf `yaml:"timeout"`
	WaitReplicas leaf `yaml:"wait_replicas"`
	WaitTimeout  leaf `yaml:"wait_timeout"`
	WaitAOF      leaf `yaml:"wait_aof"`
}

// store checks the store: section, n.
func (c *checker) store(s *storeFile, n *yaml.Node) Store {
	sc := Store{Driver: "sqlite", Path: defaultSQLitePath}
	if n == nil {
		return sc
	}
	sc.Driver = c.oneOf(s.Driver, "store.driver", "sqlite", "sqlite", "redis", "postgres", "memory")
	sc.Timeout = c.duration(s.Timeout, "store.timeout", 0) // 0: the library's default
	// The line of a "needs" error: the driver's, or the section's.
	needs := n
	if s.Driver.Node != nil {
		needs = s.Driver.Node
	}
	switch sc.Driver {
	case "sqlite":
		if v, ok := c.str(s.Path, "store.path"); ok {
			if v == "" {
				c.errorf(s.Path.Node, "store.path", "empty path")
			}
			sc.Path = v
		}
	case "redis":
		sc.Path = ""
		before := len(c.errs)
		u, hasURL := c.str(s.URL, "store.url")
		addrs, hasAddrs := c.strList(s.Addrs, "store.addrs")
		switch {
		case hasURL && hasAddrs:
			c.errorf(s.Addrs.Node, "store.addrs", "give either url or addrs, not both")
		case hasURL:
			if err := c.checkRedisURL(u); err != nil {
				c.errorf(s.URL.Node, "store.url", "invalid Redis URL %q: %v (want redis://[user:password@]host:port/db)", RedactURL(u), unwrapURLError(err))
			}
			sc.URL = u
		case hasAddrs:
			if len(addrs) == 0 {
				c.errorf(s.Addrs.Node, "store.addrs", "empty list: give at least one host:port")
			}
			for i, a := range addrs {
				if _, _, err := net.SplitHostPort(a); err != nil {
					c.errorf(s.Addrs.Content[i], fmt.Sprintf("store.addrs[%d]", i), "invalid address %q: want host:port", a)
				}
			}
			sc.Addrs = addrs
		case len(c.errs) == before: // neither given, and no error said why
			c.errorf(needs, "store", "driver redis needs url (redis://host:port/db) or addrs (a list of host:port)")
		}
		sc.MasterName, _ = c.str(s.MasterName, "store.master_name")
		sc.Username, _ = c.str(s.Username, "store.username")
		sc.Password, _ = c.str(s.Password, "store.password")
		if sc.MasterName != "" && !hasAddrs {
			c.errorf(c.key(s.MasterName), "store.master_name", "Sentinel needs addrs (the Sentinels' host:port list)")
		}
	case "postgres":
		sc.Path = ""
		before := len(c.errs)
		u, hasURL := c.str(s.URL, "store.url")
		switch {
		case !hasURL && len(c.errs) > before:
			// The url was given but is unusable, and the error says why.
		case !hasURL:
			c.errorf(needs, "store.url", "driver postgres needs url (postgres://user:password@host:5432/db)")
		default:
			if err := c.checkPostgresURL(u); err != nil {
				c.errorf(s.URL.Node, "store.url", "invalid PostgreSQL URL %q: %v (want postgres://user:password@host:5432/db)", RedactURL(u), err)
			}
			sc.URL = u
		}
		sc.Table = storeconf.PostgresTable
		if v, ok := c.str(s.Table, "store.table"); ok {
			if err := storeconf.CheckTable(v); err != nil {
				c.errorf(s.Table.Node, "store.table", "%v", err)
			}
			sc.Table = v
		}
	case "memory":
		sc.Path = ""
	}
	sc.Prefix, _ = c.str(s.Prefix, "store.prefix")
	sc.Compact = c.boolean(s.Compact, "store.compact_keys")
	c.storeWait(s, &sc)
	// Fields of another driver.
	for _, f := range []struct {
		name, driver string
		l            leaf
	}{
		{"path", "sqlite", s.Path}, {"addrs", "redis", s.Addrs}, {"master_name", "redis", s.MasterName},
		{"username", "redis", s.Username}, {"password", "redis", s.Password}, {"table", "postgres", s.Table},
		{"prefix", "redis", s.Prefix}, {"compact_keys", "redis", s.Compact},
		{"wait_replicas", "redis", s.WaitReplicas}, {"wait_timeout", "redis", s.WaitTimeout}, {"wait_aof", "redis", s.WaitAOF},
	} {
		if f.l.Node != nil && sc.Driver != f.driver {
			c.errorf(c.key(f.l), "store."+f.name, "only used by driver %s (driver is %s)", f.driver, sc.Driver)
		}
	}
	if s.URL.Node != nil && sc.Driver != "redis" && sc.Driver != "postgres" {
		c.errorf(c.key(s.URL), "store.url", "only used by drivers redis and postgres (driver is %s)", sc.Driver)
	}
	return sc
}

// storeWait checks wait_replicas, wait_timeout and wait_aof of the store:
// section into sc (their driver is checked with the other fields').
func (c *checker) storeWait(s *storeFile, sc *Store) {
	if v, ok := c.str(s.WaitReplicas, "store.wait_replicas"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxWaitReplicas {
			c.errorf(s.WaitReplicas.Node, "store.wait_replicas", "want a whole number from 0 (no waiting) to %d, got %q", maxWaitReplicas, v)
		} else {
			sc.WaitReplicas = n
		}
	}
	sc.WaitAOF = c.boolean(s.WaitAOF, "store.wait_aof")
	sc.WaitTimeout = c.duration(s.WaitTimeout, "store.wait_timeout", 0)
	if sc.Driver != "redis" {
		return
	}
	waits := sc.WaitReplicas > 0 || sc.WaitAOF
	// Where an error about waiting goes: the field that turns it on.
	on, onField := c.key(s.WaitReplicas), "store.wait_replicas"
	if sc.WaitReplicas == 0 {
		on, onField = c.key(s.WaitAOF), "store.wait_aof"
	}
	switch {
	case !waits && sc.WaitTimeout > 0:
		c.errorf(c.key(s.WaitTimeout), "store.wait_timeout", "does nothing without wait_replicas or wait_aof")
	case waits && len(sc.Addrs) > 1 && sc.MasterName == "":
		c.errorf(on, onField, "not available on a Redis Cluster (several addrs and no master_name): WAIT has no key, so the cluster client can't send it after the write it counts; use a standalone server or Sentinel, or leave it off")
	case waits:
		sc.WaitTimeout = cmp.Or(sc.WaitTimeout, storeconf.RedisWaitTimeout)
		wait, store := sc.WaitTimeout, cmp.Or(sc.Timeout, idemhook.DefaultStoreTimeout)
		if wait < store {
			break
		}
		if s.WaitTimeout.Node != nil {
			c.errorf(s.WaitTimeout.Node, "store.wait_timeout", "%s is not below store.timeout %s: the store call would give up before WAIT answers", FormatDuration(wait), FormatDuration(store))
		} else {
			c.errorf(s.Timeout.Node, "store.timeout", "%s is not above wait_timeout's default %s: the store call would give up before WAIT answers (set a shorter wait_timeout)", FormatDuration(store), FormatDuration(wait))
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
