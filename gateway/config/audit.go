package config

import (
	"net/url"
	"os"
	"time"

	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/internal/storeconf"
	"go.yaml.in/yaml/v3"
)

// Audit is the audit: section.
type Audit struct {
	Sink      string // sqlite | postgres | redis | memory | log | none
	Path      string // sqlite, when the store is not sqlite
	URL       string // postgres
	Table     string // postgres
	Retention time.Duration
	Size      int    // memory: ring entries; redis: stream length (0: the sink's default)
	Key       string // redis: the stream's key
	Buffer    int    // entries waiting for the sink at most
	Instance  string // names this gateway in the entries
}

// defaultAuditBuffer is audit.buffer by default: how many entries wait for
// a slow or unreachable sink before new ones are dropped (about 3 MB), the
// recorder's own default.
const defaultAuditBuffer = audit.DefaultQueueSize

// auditSchema is the audit: section. The sink's default is the store's
// driver, the instance's the host name.
var auditSchema = table[Audit]{selector: "sink", fields: []field[Audit]{
	{name: "sink", to: func(a *Audit) any { return &a.Sink }, enum: []string{"sqlite", "postgres", "redis", "memory", "log", "none"}},
	{name: "path"}, // read by audit below, as url and key
	{name: "url"},
	{name: "table", to: func(a *Audit) any { return &a.Table }, only: []string{"postgres"}, checkedAnyway: true},
	{name: "retention", to: func(a *Audit) any { return &a.Retention }, def: audit.DefaultRetention},
	{name: "size", to: func(a *Audit) any { return &a.Size }, min: 1, max: maxCount, only: []string{"memory", "redis"}, checkedAnyway: true},
	{name: "key"},
	{name: "buffer", to: func(a *Audit) any { return &a.Buffer }, def: defaultAuditBuffer, min: 1, max: maxCount},
	{name: "instance", to: func(a *Audit) any { return &a.Instance }, check: nonEmpty("empty instance name")},
}}

// defaultInstance is audit.instance by default: the host name (a pod's name
// under Kubernetes), or "idemhook" when it can't be read.
func defaultInstance() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "idemhook"
}

// audit checks the audit: section, n. By default the trail goes where the
// store is: a table in the SQLite file or the PostgreSQL database, a
// stream on the Redis, a ring in memory.
func (c *checker) audit(n *yaml.Node, sc Store) (ac Audit) {
	ac = Audit{Sink: sc.Driver, Instance: defaultInstance()}
	switch sc.Driver {
	case "sqlite":
		ac.Path = sc.Path
	case "postgres":
		ac.URL = sc.URL
	}
	defer func() {
		if ac.Sink == "redis" && ac.Key == "" {
			ac.Key = sc.Prefix + storeconf.RedisAuditKey
		}
	}()
	vals := valuesOf(n)
	auditSchema.read(c, vals, n, "audit", &ac)
	if n == nil {
		return ac
	}
	if ac.Sink != "postgres" {
		ac.URL = ""
	}
	if l := vals["sink"]; l.Node != nil && ac.Sink == "redis" && sc.Driver != "redis" {
		c.errorf(l.Node, "audit.sink", "sink redis writes a stream on the store's Redis: it needs store.driver redis (store is %s)", sc.Driver)
	}
	if v, ok := c.str(vals["key"], "audit.key"); ok {
		if ac.Sink != "redis" {
			c.errorf(vals["key"].Node, "audit.key", "only used by sink redis (sink is %s)", ac.Sink)
		} else if v == "" {
			c.errorf(vals["key"].Node, "audit.key", "empty key")
		}
		ac.Key = v
	}
	if v, ok := c.str(vals["path"], "audit.path"); ok {
		if ac.Sink != "sqlite" {
			c.errorf(vals["path"].Node, "audit.path", "only used by sink sqlite (sink is %s)", ac.Sink)
		}
		ac.Path = v
	} else if ac.Sink == "sqlite" && ac.Path == "" {
		ac.Path = defaultSQLitePath
	}
	l := vals["url"]
	v, hasURL := c.str(l, "audit.url")
	switch {
	case ac.Sink == "postgres" && !hasURL && sc.Driver == "postgres":
		ac.URL = sc.URL
	case ac.Sink == "postgres" && !hasURL:
		at := n
		if s := vals["sink"]; s.Node != nil {
			at = s.Node
		}
		c.errorf(at, "audit.url", "sink postgres needs url (postgres://user:password@host:5432/db), unless the store is PostgreSQL too")
	case ac.Sink == "postgres":
		if u, err := url.Parse(v); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			c.errorf(l.Node, "audit.url", "invalid PostgreSQL URL %q (want postgres://user:password@host:5432/db)", RedactURL(v))
		}
		ac.URL = v
	case hasURL:
		c.errorf(l.Node, "audit.url", "only used by sink postgres (sink is %s)", ac.Sink)
	}
	return ac
}
