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

// auditFile is the audit: section as decoded: each field a leaf that the
// checker below reads.
type auditFile struct {
	Sink      leaf `yaml:"sink"`
	Path      leaf `yaml:"path"`
	URL       leaf `yaml:"url"`
	Table     leaf `yaml:"table"`
	Retention leaf `yaml:"retention"`
	Size      leaf `yaml:"size"`
	Key       leaf `yaml:"key"`
	Buffer    leaf `yaml:"buffer"`
	Instance  leaf `yaml:"instance"`
}

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
func (c *checker) audit(a *auditFile, n *yaml.Node, sc Store) (ac Audit) {
	ac = Audit{Sink: sc.Driver, Retention: audit.DefaultRetention, Buffer: defaultAuditBuffer, Instance: defaultInstance()}
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
	if n == nil {
		return ac
	}
	ac.Sink = c.oneOf(a.Sink, "audit.sink", ac.Sink, "sqlite", "postgres", "redis", "memory", "log", "none")
	if ac.Sink != "postgres" {
		ac.URL = ""
	}
	if a.Sink.Node != nil && ac.Sink == "redis" && sc.Driver != "redis" {
		c.errorf(a.Sink.Node, "audit.sink", "sink redis writes a stream on the store's Redis: it needs store.driver redis (store is %s)", sc.Driver)
	}
	ac.Size = c.count(a.Size, "audit.size", 0)
	if a.Size.Node != nil && ac.Sink != "memory" && ac.Sink != "redis" {
		c.errorf(c.key(a.Size), "audit.size", "only used by sinks memory and redis (sink is %s)", ac.Sink)
	}
	if v, ok := c.str(a.Key, "audit.key"); ok {
		if ac.Sink != "redis" {
			c.errorf(a.Key.Node, "audit.key", "only used by sink redis (sink is %s)", ac.Sink)
		} else if v == "" {
			c.errorf(a.Key.Node, "audit.key", "empty key")
		}
		ac.Key = v
	}
	ac.Buffer = c.count(a.Buffer, "audit.buffer", defaultAuditBuffer)
	if v, ok := c.str(a.Instance, "audit.instance"); ok {
		if v == "" {
			c.errorf(a.Instance.Node, "audit.instance", "empty instance name")
		}
		ac.Instance = v
	}
	ac.Retention = c.duration(a.Retention, "audit.retention", audit.DefaultRetention)
	if v, ok := c.str(a.Path, "audit.path"); ok {
		if ac.Sink != "sqlite" {
			c.errorf(a.Path.Node, "audit.path", "only used by sink sqlite (sink is %s)", ac.Sink)
		}
		ac.Path = v
	} else if ac.Sink == "sqlite" && ac.Path == "" {
		ac.Path = defaultSQLitePath
	}
	ac.Table, _ = c.str(a.Table, "audit.table")
	if a.Table.Node != nil && ac.Sink != "postgres" {
		c.errorf(c.key(a.Table), "audit.table", "only used by sink postgres (sink is %s)", ac.Sink)
	}
	v, hasURL := c.str(a.URL, "audit.url")
	switch {
	case ac.Sink == "postgres" && !hasURL && sc.Driver == "postgres":
		ac.URL = sc.URL
	case ac.Sink == "postgres" && !hasURL:
		at := n
		if a.Sink.Node != nil {
			at = a.Sink.Node
		}
		c.errorf(at, "audit.url", "sink postgres needs url (postgres://user:password@host:5432/db), unless the store is PostgreSQL too")
	case ac.Sink == "postgres":
		if u, err := url.Parse(v); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			c.errorf(a.URL.Node, "audit.url", "invalid PostgreSQL URL %q (want postgres://user:password@host:5432/db)", RedactURL(v))
		}
		ac.URL = v
	case hasURL:
		c.errorf(a.URL.Node, "audit.url", "only used by sink postgres (sink is %s)", ac.Sink)
	}
	return ac
}
