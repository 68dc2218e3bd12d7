package config

import (
	"cmp"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/storeconf"
	"github.com/idemhook/idemhook/provider"
	"go.yaml.in/yaml/v3"
)

// maxBodyWarn is the max_body above which check and serve warn: bodies are
// buffered whole, so a few concurrent deliveries of this size take that
// much memory each.
const maxBodyWarn = 64 << 20

// check is the second phase of Parse: it checks every value of f
// and returns the configuration with the defaults applied.
func (c *checker) check(f *configFile) *Config {
	cfg := &Config{File: c.file, Listen: defaultListen}
	if v, ok := c.str(f.Listen, "listen"); ok {
		if err := checkListen(v); err != nil {
			c.errorf(f.Listen.Node, "listen", "%v", err)
		}
		cfg.Listen = v
	}
	cfg.ShutdownTimeout = c.duration(f.ShutdownTimeout, "shutdown_timeout", defaultShutdownTimeout)
	cfg.Store = c.store(&f.Store, section(f.root, "store"))
	cfg.Admin = c.admin(&f.Admin, section(f.root, "admin"), cfg.Listen)
	cfg.Audit = c.audit(&f.Audit, section(f.root, "audit"), cfg.Store)
	cfg.Log = Log{
		Format: c.oneOf(f.Log.Format, "log.format", "text", "text", "json"),
		Level:  c.oneOf(f.Log.Level, "log.level", "info", "debug", "info", "warn", "error"),
	}
	cfg.Routes = c.checkRoutes(f)
	c.queueStore(cfg)
	if n := section(f.root, "tls"); n != nil {
		cfg.TLS = c.tls(&f.TLS, n)
	}
	cfg.TrustedProxies = c.trustedProxies(f.TrustedProxies)
	cfg.Limits = c.limits(&f.Limits, cfg.Routes)
	return cfg
}

// limits checks the limits: section. A route whose max_body is not under an
// explicit body_memory is refused at its max_body: its bodies could never
// be held.
func (c *checker) limits(l *limitsFile, routes []Route) Limits {
	var lim Limits
	if v, ok := c.str(l.BodyMemory, "limits.body_memory"); ok {
		size, err := parseSize(v)
		switch {
		case err != nil:
			c.errorf(l.BodyMemory.Node, "limits.body_memory", "%v", err)
		case size < 1<<20:
			c.errorf(l.BodyMemory.Node, "limits.body_memory", "%s is under 1MiB: a few ordinary deliveries would be refused with 503", v)
		default:
			lim.BodyMemory = size
			for _, rc := range routes {
				if rc.Route.MaxBodyBytes >= size {
					c.errorf(l.BodyMemory.Node, "limits.body_memory", "%s is not above %s.max_body (%d bytes): a body of that size could never be held, and its deliveries would be refused with 503 for good",
						v, rc.Field, rc.Route.MaxBodyBytes)
				}
			}
		}
	}
	lim.MaxConnections = c.count(l.MaxConnections, "limits.max_connections", 0)
	lim.MaxDeliveries = c.count(l.MaxDeliveries, "limits.max_deliveries", 0)
	if lim.MaxConnections > 0 && lim.MaxDeliveries > lim.MaxConnections {
		c.warnf(c.key(l.MaxDeliveries), "limits.max_deliveries", "%d is above max_connections %d: one connection carries one delivery at a time over HTTP/1.1, so the bound is max_connections", lim.MaxDeliveries, lim.MaxConnections)
	}
	return lim
}

// section returns the value of the section name of the mapping root, or
// nil when it is absent or null.
func section(root *yaml.Node, name string) *yaml.Node {
	if n := valueOf(root, name); n != nil && !isNull(n) {
		return n
	}
	return nil
}

// valueOf returns the value of the field name of the mapping n, or nil.
func valueOf(n *yaml.Node, name string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i+1]
		}
	}
	return nil
}

// key returns the node of l's field name, where "only used by" errors
// point, or l's own node when it has no key.
func (c *checker) key(l leaf) *yaml.Node {
	if k := c.keys[l.Node]; k != nil {
		return k
	}
	return l.Node
}

// str returns the value of l, with ${VAR} expanded, and whether it is set
// and usable. A value that is not a single one, or names an unset
// variable, is reported at its field, at.
func (c *checker) str(l leaf, at string) (string, bool) {
	if l.Node == nil {
		return "", false
	}
	if l.Kind != yaml.ScalarNode {
		c.errorf(l.Node, at, "expected a single value, got %s", describe(l.Node))
		return "", false
	}
	v, err := expand(l.Value, c.getenv)
	if err != nil {
		c.errorf(l.Node, at, "%v", err)
		return "", false
	}
	return v, true
}

// strList returns the list value of l, each element expanded, and whether
// it is set and every element usable.
func (c *checker) strList(l leaf, at string) ([]string, bool) {
	if l.Node == nil {
		return nil, false
	}
	if l.Kind != yaml.SequenceNode {
		c.errorf(l.Node, at, "expected a list ([a, b] or - lines), got %s", describe(l.Node))
		return nil, false
	}
	out := make([]string, 0, len(l.Content))
	good := true
	for i, e := range l.Content {
		if v, ok := c.str(leaf{resolve(e)}, fmt.Sprintf("%s[%d]", at, i)); ok {
			out = append(out, v)
		} else {
			good = false
		}
	}
	return out, good
}

// duration returns the duration value of l, or def when absent. It must be
// positive.
func (c *checker) duration(l leaf, at string, def time.Duration) time.Duration {
	v, ok := c.str(l, at)
	if !ok {
		return def
	}
	d, err := parseDuration(v)
	if err != nil {
		c.errorf(l.Node, at, "%v", err)
		return def
	}
	if d <= 0 {
		c.errorf(l.Node, at, "must be positive, got %q", v)
		return def
	}
	return d
}

// oneOf returns the value of l, which must be one of allowed, or def when
// absent.
func (c *checker) oneOf(l leaf, at, def string, allowed ...string) string {
	v, ok := c.str(l, at)
	if !ok {
		return def
	}
	if !slices.Contains(allowed, v) {
		c.errorf(l.Node, at, "invalid %s %q%s (want %s)", lastName(at), v, didYouMean(v, allowed), orList(allowed))
		return def
	}
	return v
}

// boolean returns the true/false value of l; false when absent.
func (c *checker) boolean(l leaf, at string) bool {
	v, ok := c.str(l, at)
	if !ok {
		return false
	}
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	c.errorf(l.Node, at, "invalid %s %q (want true or false)", lastName(at), v)
	return false
}

// count returns the value of l, a positive whole number, or def when
// absent.
func (c *checker) count(l leaf, at string, def int) int {
	v, ok := c.str(l, at)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > 100_000_000 {
		c.errorf(l.Node, at, "want a whole number from 1 to 100000000, got %q", v)
		return def
	}
	return n
}

// lastName returns the last name of a field's path: "ttl" for
// "routes[0].ttl".
func lastName(at string) string {
	return at[strings.LastIndexByte(at, '.')+1:]
}

func orList(vs []string) string {
	if len(vs) == 1 {
		return vs[0]
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
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

// maxWaitReplicas bounds store.wait_replicas: a larger count is a typo,
// which would make every claim wait its whole timeout and fail.
const maxWaitReplicas = 100

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

// admin checks the admin: section, n, against the main listener's address.
func (c *checker) admin(a *adminFile, n *yaml.Node, listen string) Admin {
	ac := Admin{Listen: defaultAdminListen}
	if n == nil {
		return ac
	}
	if v, ok := c.str(a.Listen, "admin.listen"); ok {
		ac.Listen = v
		switch {
		case v == "off":
			ac.Listen = ""
		case checkListen(v) != nil:
			c.errorf(a.Listen.Node, "admin.listen", "%v", checkListen(v))
		case v == listen && !strings.HasSuffix(v, ":0"):
			c.errorf(a.Listen.Node, "admin.listen", "same address as listen (%s): give the admin listener its own port", v)
		}
	}
	tok, hasTok := c.str(a.Token, "admin.token")
	if hasTok && tok == "" {
		c.errorf(a.Token.Node, "admin.token", "empty token")
	}
	ac.Token = tok
	if ac.Listen != "" && !hasTok && !isLoopback(ac.Listen) {
		at := n
		if a.Listen.Node != nil {
			at = a.Listen.Node
		}
		c.errorf(at, "admin.token", "required when admin.listen (%s) is not a loopback address: the admin API can delete keys (use token: ${IDEMHOOK_ADMIN_TOKEN})", ac.Listen)
	}
	return ac
}

// tls checks the tls: section, n.
func (c *checker) tls(t *tlsFile, n *yaml.Node) TLS {
	cert, hasCert := c.str(t.Cert, "tls.cert")
	key, hasKey := c.str(t.Key, "tls.key")
	switch {
	case t.Cert.Node == nil:
		c.errorf(n, "tls.cert", "missing: the certificate file (PEM), with key: the private key file")
	case t.Key.Node == nil:
		c.errorf(n, "tls.key", "missing: the private key file (PEM), with cert: the certificate file")
	case hasCert && hasKey:
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			c.errorf(t.Cert.Node, "tls.cert", "cannot load the certificate and key: %v", err)
		}
		return TLS{Cert: cert, Key: key}
	}
	return TLS{}
}

// trustedProxies checks trusted_proxies: addresses or CIDR prefixes.
func (c *checker) trustedProxies(l leaf) []netip.Prefix {
	list, ok := c.strList(l, "trusted_proxies")
	if !ok {
		return nil
	}
	var out []netip.Prefix
	for i, v := range list {
		pf, err := netip.ParsePrefix(v)
		if err != nil {
			addr, aerr := netip.ParseAddr(v)
			if aerr != nil {
				c.errorf(l.Content[i], fmt.Sprintf("trusted_proxies[%d]", i), "invalid address or CIDR %q (e.g. 10.0.0.0/8, 192.168.1.10, fd00::/8)", v)
				continue
			}
			pf = netip.PrefixFrom(addr, addr.BitLen())
		}
		out = append(out, pf.Masked())
	}
	return out
}

// routeInputs is what the build phase needs of a route the check phase
// read: its entry, and its preset's settings once they are checked.
type routeInputs struct {
	f    *routeFile
	at   string     // "routes[i]"
	node *yaml.Node // the entry
	i    int        // index in Config.Routes

	preset     bool            // provider, secrets and options are checked: build the preset
	config     provider.Config // its settings
	optionKeys map[string]*yaml.Node
	items      itemsInput     // items:, merged with the preset's by build
	spec       *provider.Spec // provider: as a mapping (provider_spec.go)
	tenants    []tenantInput  // tenants: (tenants.go)
	specNodes  specNodes
}

// own returns the value of the entry's own field name, or the entry when
// the field is absent or merged from another mapping: an error about a
// merged value points at the route that merges it.
func (in *routeInputs) own(name string) *yaml.Node {
	if v := valueOf(in.node, name); v != nil {
		return v
	}
	return in.node
}

// checkRoutes checks the routes: list, each entry and what entries must
// not share.
func (c *checker) checkRoutes(f *configFile) []Route {
	seq := section(f.root, "routes")
	switch {
	case seq == nil && c.wrong[valueOf(f.root, "routes")]:
		return nil // reported by shape
	case seq == nil:
		c.errorf(f.root, "routes", "missing: the gateway needs at least one route (path, upstream, source)")
		return nil
	case seq.Kind != yaml.SequenceNode:
		return nil // reported by shape
	case len(seq.Content) == 0:
		c.errorf(seq, "routes", "empty: the gateway needs at least one route (path, upstream, source)")
		return nil
	}
	var out []Route
	seen := map[string]string{} // path -> "routes[i], line n"
	type sourceUse struct {
		at   string
		node *yaml.Node // the source value
		i    int        // in out
	}
	sources := map[string][]sourceUse{}
	var order []string
	for i, n := range seq.Content {
		if c.wrong[n] {
			continue // reported by shape
		}
		in := routeInputs{f: &f.Routes[i], at: fmt.Sprintf("routes[%d]", i), node: n, i: len(out)}
		rc := c.route(&in)
		if rc.Path != "" {
			if prev, dup := seen[rc.Path]; dup {
				c.errorf(in.own("path"), join(in.at, "path"), "duplicate path %q (also %s)", rc.Path, prev)
			} else {
				seen[rc.Path] = fmt.Sprintf("%s, line %d", in.at, in.own("path").Line)
			}
		}
		if src := rc.Route.Source; src != "" {
			if _, ok := sources[src]; !ok {
				order = append(order, src)
			}
			sources[src] = append(sources[src], sourceUse{at: in.at, node: in.own("source"), i: len(out)})
		}
		out = append(out, rc)
		c.routes = append(c.routes, in)
	}
	// The source names the keys (idem:<source>:<key>). Two routes with one
	// source answer each other's deliveries, so they must both say so.
	for _, src := range order {
		uses := sources[src]
		if len(uses) < 2 {
			continue
		}
		for i, u := range uses {
			if out[u.i].ShareKeys {
				continue
			}
			var others []string
			for j, o := range uses {
				if j != i {
					others = append(others, fmt.Sprintf("%s, line %d", o.at, o.node.Line))
				}
			}
			c.errorf(u.node, join(u.at, "source"), "%s", sharedSource(src, others))
		}
	}
	return out
}

// sharedSource is the error of a route whose source the routes named in
// others also have, none of them saying share_keys.
func sharedSource(src string, others []string) string {
	return fmt.Sprintf("source %q is also used by %s: routes with one source share keys and answer each other's deliveries; give each route its own source, or set share_keys: true on every route of the source", src, strings.Join(others, "; "))
}

// route checks one entry of routes:.
func (c *checker) route(in *routeInputs) Route {
	f, at := in.f, in.at
	field := func(name string) string { return join(at, name) }
	rc := Route{Line: in.node.Line, Field: at}

	if v, ok := c.str(f.Path, field("path")); ok {
		if err := checkPath(v); err != nil {
			c.errorf(f.Path.Node, field("path"), "%v", err)
		}
		rc.Path = v
	} else if f.Path.Node == nil { // absent, not of the wrong type (reported by str)
		c.errorf(in.node, field("path"), "missing: the path this route receives, e.g. /webhooks/stone")
	}

	if v, ok := c.str(f.Upstream, field("upstream")); ok {
		u, err := checkUpstream(v)
		if err != nil {
			c.errorf(f.Upstream.Node, field("upstream"), "%v", err)
		}
		rc.Upstream = u
	} else if f.Upstream.Node == nil {
		c.errorf(in.node, field("upstream"), "missing: the URL deliveries are forwarded to, e.g. http://127.0.0.1:3000/webhook")
	}

	r := &rc.Route
	if v, ok := c.str(f.Source, field("source")); ok {
		if v == "" || strings.ContainsAny(v, " \t") || !idemhook.ValidSource(v) {
			c.errorf(f.Source.Node, field("source"), "invalid source %q: a non-empty label without ':', '@' or spaces, e.g. stone", v)
		}
		r.Source = v
	} else if f.Source.Node == nil {
		c.errorf(in.node, field("source"), "missing: the provider's label, e.g. source: stone (it names the keys: idem:<source>:<key>)")
	}

	r.TTL = c.duration(f.TTL, field("ttl"), 0) // 0: the preset's default, set by build
	r.WaitTimeout = c.duration(f.WaitTimeout, field("wait_timeout"), idemhook.DefaultWaitTimeout)
	rc.UpstreamTimeout = c.duration(f.UpstreamTimeout, field("upstream_timeout"), defaultUpstreamTimeout)
	r.InFlight = idemhook.InFlightPolicy(c.oneOf(f.InFlight, field("in_flight"), "wait", "proceed", "wait", "reject"))
	r.RequireKey = c.boolean(f.RequireKey, field("require_key"))
	rc.ShareKeys = c.boolean(f.ShareKeys, field("share_keys"))
	if vs, ok := c.strList(f.StoreStatuses, field("store_statuses")); ok {
		for i, v := range vs {
			st, err := strconv.Atoi(v)
			if err != nil || !idemhook.StorableStatus(st) {
				c.errorf(f.StoreStatuses.Content[i], fmt.Sprintf("%s[%d]", field("store_statuses"), i),
					"invalid status %q: want a 3xx or 4xx status to store and replay like a success (2xx always is; 1xx and 5xx never are)", v)
				continue
			}
			r.StoreStatuses = append(r.StoreStatuses, st)
		}
	}
	r.OnStoreError = idemhook.StoreErrorPolicy(c.oneOf(f.OnStoreError, field("on_store_error"), "open", "open", "closed"))

	if v, ok := c.str(f.Header, field("header")); ok {
		if !validHeaderName(v) {
			c.errorf(f.Header.Node, field("header"), "invalid header name %q", v)
		}
		r.Header = v
	}
	r.MaxBodyBytes = idemhook.DefaultMaxBodyBytes
	if v, ok := c.str(f.MaxBody, field("max_body")); ok {
		if size, err := parseSize(v); err != nil {
			c.errorf(f.MaxBody.Node, field("max_body"), "%v", err)
		} else {
			r.MaxBodyBytes = size
		}
	}
	if hs, ok := c.strList(f.ReplayHeaders, field("replay_headers")); ok {
		for i, h := range hs {
			if !validHeaderName(h) {
				c.errorf(f.ReplayHeaders.Content[i], fmt.Sprintf("%s[%d]", field("replay_headers"), i), "invalid header name %q", h)
			}
		}
		r.ReplayHeaders = hs
	}
	c.providerSettings(in, &rc)
	c.items(in)

	r.Lease = c.duration(f.Lease, field("lease"), 0)
	if v, ok := c.str(f.MaxStoredBody, field("max_stored_body")); ok {
		size, err := parseSize(v)
		switch {
		case err != nil:
			c.errorf(f.MaxStoredBody.Node, field("max_stored_body"), "%v", err)
		case size > 1<<30:
			c.errorf(f.MaxStoredBody.Node, field("max_stored_body"), "%s is over 1GiB: a stored answer that large would be replayed from the store on every duplicate", v)
		default:
			r.MaxStoredBodyBytes = int(size)
		}
	}
	r.RetryAfter = c.duration(f.RetryAfter, field("retry_after"), 0)

	// Settings that do nothing here are warned about.
	if f.WaitTimeout.Node != nil && r.InFlight != idemhook.InFlightWait {
		c.warnf(c.key(f.WaitTimeout), field("wait_timeout"), "does nothing with in_flight: %s (only in_flight: wait waits)", r.InFlight)
	}
	if f.RetryAfter.Node != nil && r.InFlight != idemhook.InFlightReject && r.OnStoreError != idemhook.StoreErrorClosed {
		c.warnf(c.key(f.RetryAfter), field("retry_after"), "does nothing here: it is the Retry-After of in_flight: reject and of on_store_error: closed")
	}
	if r.MaxBodyBytes > maxBodyWarn {
		c.warnf(in.own("max_body"), field("max_body"), "%d bytes: each delivery buffers its whole body, so 10 concurrent deliveries of that size take %d MiB",
			r.MaxBodyBytes, 10*r.MaxBodyBytes>>20)
	}
	c.delivery(in, &rc)
	if v, ok := c.str(f.ForwardSecret, field("forward_secret")); ok {
		key, err := parseWebhookSecret(v)
		if err != nil {
			c.errorf(f.ForwardSecret.Node, field("forward_secret"), "%v", err)
		}
		rc.ForwardKey = key
	}
	return rc
}

// providerSettings checks provider, secret_env, secrets, provider_options
// and tolerance. When they are usable, in holds the preset's settings for
// the build phase.
func (c *checker) providerSettings(in *routeInputs, rc *Route) {
	f, at := in.f, in.at
	field := func(name string) string { return join(at, name) }
	spec, isSpec := c.providerSpec(in)
	name, hasProvider := "", isSpec
	if !isSpec {
		name, hasProvider = c.str(f.Provider, field("provider"))
	} else if spec != nil {
		spec.Name = cmp.Or(spec.Name, rc.Route.Source)
		name, in.spec = spec.Name, spec
	}
	secrets, secretFile, secretsOK := c.secrets(secretFields{f.SecretEnv, f.Secrets, f.SecretFile}, "route", field, hasProvider)
	rc.SecretFile = secretFile
	tenantsOK := c.tenants(in, rc, hasProvider)
	type option struct {
		key   *yaml.Node
		value string
	}
	var opts []option // in file order
	if on := f.ProviderOptions.Node; on != nil {
		if on.Kind != yaml.MappingNode {
			c.errorf(on, field("provider_options"), "expected a mapping (option: value lines), got %s", describe(on))
			secretsOK = false
		} else {
			firstLine := map[string]int{}
			for i := 0; i+1 < len(on.Content); i += 2 {
				k, v := resolve(on.Content[i]), resolve(on.Content[i+1])
				fp := join(field("provider_options"), k.Value)
				if line, dup := firstLine[k.Value]; dup {
					c.errorf(k, fp, "field given twice (first at line %d)", line)
					secretsOK = false
					continue
				}
				firstLine[k.Value] = k.Line
				ev, ok := c.str(leaf{v}, fp)
				if !ok {
					secretsOK = false
					continue
				}
				opts = append(opts, option{k, ev})
			}
		}
	}
	tolerance := c.duration(f.Tolerance, field("tolerance"), 0)

	if !hasProvider {
		for _, o := range []struct {
			name string
			l    leaf
		}{{"secret_env", f.SecretEnv}, {"secrets", f.Secrets}, {"secret_file", f.SecretFile}, {"tenants", f.Tenants}, {"provider_options", f.ProviderOptions}, {"tolerance", f.Tolerance}} {
			if o.l.Node != nil {
				c.errorf(c.key(o.l), field(o.name), "only used with provider: (the signature check of a preset); set provider or remove %s", o.name)
			}
		}
		return
	}
	rc.Provider = name
	if isSpec && (spec == nil || c.specOptions(in)) {
		return // the spec's own errors were reported
	}
	if !isSpec && !slices.Contains(provider.Names(), name) {
		c.errorf(f.Provider.Node, field("provider"), "unknown provider %q%s (known: %s)", name, didYouMean(name, provider.Names()), strings.Join(provider.Names(), ", "))
		return
	}
	if !secretsOK || !tenantsOK {
		return // the secret's own error was reported
	}
	// A preset's key option (sendgrid's public_key, a public verification
	// key) stands in for its secrets.
	keyOption := provider.KeyOption(name)
	hasKeyOption := keyOption != "" && slices.ContainsFunc(opts, func(o option) bool { return o.key.Value == keyOption && o.value != "" })
	if len(rc.Tenants) == 0 && !hasKeyOption && !slices.ContainsFunc(secrets, func(s string) bool { return s != "" }) {
		node, name := c.key(f.Provider), "provider"
		if v := valueOf(in.node, "secrets"); v != nil { // also when null
			node, name = v, "secrets"
		}
		orKey := ""
		if keyOption != "" {
			orKey = fmt.Sprintf(", or provider_options: {%s: ...}", keyOption)
		}
		c.errorf(node, field(name), "provider %s needs a secret: set secret_env: NAME_OF_VARIABLE, or secret_file: FILE (one secret per line, read again on every reload: several during a rotation)%s", rc.Provider, orKey)
		return
	}
	rc.SecretCount = len(secrets)
	in.config = provider.Config{Secrets: secrets, Tolerance: tolerance}
	in.optionKeys = map[string]*yaml.Node{}
	for _, o := range opts {
		in.optionKeys[o.key.Value] = o.key
		if err := in.config.SetOption(name, o.key.Value, o.value); err != nil {
			c.errorf(o.key, join(field("provider_options"), o.key.Value), "%v%s", err, didYouMean(o.key.Value, provider.OptionNames(name)))
			return
		}
	}
	in.preset = true
}

// secretFields are the fields that give secrets: a route's, or one of its
// tenants'.
type secretFields struct {
	Env     leaf `yaml:"secret_env"`
	Secrets leaf `yaml:"secrets"`
	File    leaf `yaml:"secret_file"`
}

// secrets reads the secrets of sf, the secret fields of a route or a
// tenant (owner), whose fields field names. A secret_file is read only when hasProvider
// (without a provider, the caller refuses it). good is false when a problem
// was reported.
func (c *checker) secrets(sf secretFields, owner string, field func(string) string, hasProvider bool) (secrets []string, file string, good bool) {
	good = true
	if l := sf.Env; l.Node != nil && l.Kind == yaml.ScalarNode && strings.Contains(l.Value, "$") {
		// Not expanded: ${NAME} would put the secret itself in the error.
		c.errorf(l.Node, field("secret_env"), "%s", secretEnvAdvice(l.Value))
		good = false
	} else if v, ok := c.str(sf.Env, field("secret_env")); ok {
		switch {
		case !validEnvName(v):
			c.errorf(sf.Env.Node, field("secret_env"), "invalid environment variable name %q", v)
			good = false
		case c.getenv(v) == "":
			c.errorf(sf.Env.Node, field("secret_env"), "environment variable %s is not set or empty (export it, or use secrets: [${%s}])", v, v)
			good = false
		default:
			secrets = append(secrets, c.getenv(v))
		}
	}
	if list, ok := c.strList(sf.Secrets, field("secrets")); ok {
		secrets = append(secrets, list...)
	} else if sf.Secrets.Node != nil {
		good = false
	}
	if l := sf.File; l.Node != nil && hasProvider { // without a provider, refused below
		if path, ok := c.str(l, field("secret_file")); !ok {
			good = false
		} else if sf.Env.Node != nil || sf.Secrets.Node != nil {
			c.errorf(c.key(l), field("secret_file"), "give %[1]s secrets in one place: secret_file, or secret_env and secrets (the file's lines are then every secret the %[2]s accepts, so that removing a line and reloading removes that secret)", "a "+owner+"'s", owner)
			good = false
		} else if list, warns, err := readSecretFile(path); err != nil {
			c.errorf(l.Node, field("secret_file"), "%v", err)
			good = false
		} else {
			for _, w := range warns {
				c.warnf(l.Node, field("secret_file"), "%s", w)
			}
			secrets, file = list, path
		}
	}
	return secrets, file, good
}

// maxSecretFile bounds the size of a secret file: a few keys take a few
// KiB.
const maxSecretFile = 1 << 20

// readSecretFile reads the secrets of a route's secret_file, at start and
// at every reload. It returns them, with warnings about the file, or an
// error that names the file and what is wrong with it.
func readSecretFile(path string) (secrets, warns []string, err error) {
	// Stat first: opening a named pipe would block the reload, and with it
	// the gateway's signal handling, until something writes to it.
	fi, err := os.Stat(path)
	if err == nil {
		switch {
		case fi.IsDir():
			return nil, nil, fmt.Errorf("secret file %s is a directory: give the file holding the secrets, one per line", path)
		case !fi.Mode().IsRegular():
			return nil, nil, fmt.Errorf("secret file %s is not a regular file (%s)", path, fi.Mode().Type())
		}
	}
	var f *os.File
	if err == nil {
		f, err = os.Open(path)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil, fmt.Errorf("secret file %s does not exist", path)
	case errors.Is(err, os.ErrPermission):
		return nil, nil, fmt.Errorf("cannot read secret file %s: permission denied (the gateway runs as uid %d, gid %d)", path, os.Getuid(), os.Getgid())
	case err != nil:
		return nil, nil, fmt.Errorf("cannot read secret file: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read secret file: %v", err)
	}
	if len(data) > maxSecretFile {
		return nil, nil, fmt.Errorf("secret file %s is larger than 1MiB: not a file of secrets", path)
	}
	secrets, warns, err = parseSecrets(data)
	if err != nil {
		return nil, nil, fmt.Errorf("secret file %s: %v", path, err)
	}
	if len(secrets) == 0 {
		return nil, nil, fmt.Errorf("secret file %s holds no secret (one per line; blank lines and # comments are ignored)", path)
	}
	for i, w := range warns {
		warns[i] = fmt.Sprintf("secret file %s: %s", path, w)
	}
	switch perm := fi.Mode().Perm(); {
	case perm&0o002 != 0:
		warns = append(warns, fmt.Sprintf("secret file %s is writable by every user (mode %04o): anyone on the machine can add a secret and sign deliveries with it; chmod o-rw %s (0600, or 0640 to share it with a group)", path, perm, path))
	case perm&0o004 != 0:
		warns = append(warns, fmt.Sprintf("secret file %s is readable by every user (mode %04o): chmod o-r %s (0600, or 0640 to share it with a group)", path, perm, path))
	}
	return secrets, warns, nil
}

// parseSecrets reads the text of a secret file: one secret per line,
// surrounding spaces, tabs and CRs trimmed, blank lines and lines starting
// with # ignored. A PEM block (-----BEGIN ...----- to -----END ...-----,
// such as a stone private key) is one secret of several lines. It warns
// about a " #" inside a secret, which is likely a comment that became part
// of it.
func parseSecrets(data []byte) (secrets, warns []string, err error) {
	var block []string // the PEM block being read
	begin := 0         // its first line
	for i, line := range strings.Split(strings.TrimPrefix(string(data), "\ufeff"), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case block != nil:
			block = append(block, line)
			if strings.HasPrefix(line, "-----END ") {
				secrets, block = append(secrets, strings.Join(block, "\n")+"\n"), nil
			}
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "-----BEGIN "):
			block, begin = []string{line}, i+1
		default:
			if strings.Contains(line, " #") {
				warns = append(warns, fmt.Sprintf("line %d: the text after # is part of the secret (a comment goes on a line of its own)", i+1))
			}
			secrets = append(secrets, line)
		}
	}
	if block != nil {
		return nil, nil, fmt.Errorf("the PEM block of line %d has no -----END line", begin)
	}
	return secrets, warns, nil
}

// secretEnvAdvice is the refusal of v, a secret_env holding a $: the field
// takes the variable's name, which it reads itself.
func secretEnvAdvice(v string) string {
	name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(v, "$"), "{"), "}")
	if name, _, _ = strings.Cut(name, ":-"); validEnvName(name) {
		return fmt.Sprintf("secret_env takes the variable's name: secret_env: %s", name)
	}
	return "secret_env takes the name of an environment variable, without $: secret_env: STRIPE_WEBHOOK_SECRET"
}

// checkListen checks a host:port listen address.
func checkListen(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("invalid address %q: want host:port, e.g. 127.0.0.1:8080 or :8080", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		if _, err := net.LookupPort("tcp", port); err != nil {
			return fmt.Errorf("invalid address %q: bad port %q", v, port)
		}
	}
	return nil
}

// isLoopback reports whether a listen address only accepts local
// connections.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkPath checks a route path: absolute, clean, usable as an exact
// net/http.ServeMux pattern (or a prefix one when it ends in /).
func checkPath(v string) error {
	if !strings.HasPrefix(v, "/") {
		return fmt.Errorf("invalid path %q: must start with /", v)
	}
	if strings.ContainsAny(strings.TrimSuffix(v, "/"+tenantWildcard), "{}?# \t\r\n") {
		return fmt.Errorf("invalid path %q: no spaces, braces, ? or # allowed (the one wildcard a path may have is a last segment /{tenant})", v)
	}
	clean := path.Clean(v)
	if strings.HasSuffix(v, "/") && clean != "/" {
		clean += "/"
	}
	if clean != v {
		return fmt.Errorf("invalid path %q: not clean (did you mean %q?)", v, clean)
	}
	return muxAccepts(v)
}

// muxAccepts reports whether net/http.ServeMux takes v as a pattern (it
// panics on the ones it refuses), so that serve never does.
func muxAccepts(v string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("invalid path %q: %v", v, r)
		}
	}()
	http.NewServeMux().Handle(v, http.NotFoundHandler())
	return nil
}

// checkUpstream parses an upstream URL: absolute http or https with a host.
func checkUpstream(v string) (*url.URL, error) {
	u, err := url.Parse(v)
	if err != nil {
		return nil, fmt.Errorf("malformed upstream URL %q: %v", RedactURL(v), unwrapURLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("malformed upstream URL %q: want http:// or https://", RedactURL(v))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("malformed upstream URL %q: no host", RedactURL(v))
	}
	if u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("malformed upstream URL %q: no user info or #fragment allowed", RedactURL(v))
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// RedactURL hides the password of a URL in error messages, also when the
// URL does not parse: everything between "://" and the last "@" of the
// authority is then replaced, since it may hold a password.
func RedactURL(v string) string {
	u, err := url.Parse(v)
	if err == nil {
		if u.User == nil {
			return v
		}
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return v
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return scheme + "://xxxxx@" + rest[at+1:]
	}
	return v
}

func validHeaderName(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validEnvName(v string) bool {
	if v == "" || v[0] >= '0' && v[0] <= '9' {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// parseDuration parses a Go duration (500ms, 30s, 1h30m) or a whole number
// of days (7d).
func parseDuration(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 36500 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (examples: 500ms, 30s, 10m, 24h, 7d)", v)
	}
	return d, nil
}

// parseSize parses a byte size: a number with an optional unit B, KB, KiB,
// MB, MiB, GB or GiB.
func parseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9') {
		i++
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	mult := map[string]int64{
		"": 1, "B": 1, "KB": 1000, "KIB": 1 << 10, "MB": 1000 * 1000, "MIB": 1 << 20,
		"GB": 1000 * 1000 * 1000, "GIB": 1 << 30,
	}[strings.ToUpper(unit)]
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || mult == 0 || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("invalid size %q (examples: 5MiB, 512KiB, 1048576)", v)
	}
	return n * mult, nil
}

// expand replaces ${NAME} (and ${NAME:-default}) with environment values;
// $$ is a literal $, and a bare $NAME is an error. A variable that is unset or empty, without a default,
// is an error: a config silently holding an empty secret would be worse.
func expand(s string, getenv func(string) string) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unclosed ${ in %q", s)
			}
			expr := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(expr, ":-")
			if !validEnvName(name) {
				return "", fmt.Errorf("invalid variable name %q in ${...}", name)
			}
			v := getenv(name)
			if v == "" {
				if !hasDef {
					return "", fmt.Errorf("environment variable %s is not set or empty (used as ${%s})", name, name)
				}
				v = def
			}
			b.WriteString(v)
			i += 2 + end
		default:
			if n := s[i+1]; n == '_' || (n|0x20 >= 'a' && n|0x20 <= 'z') {
				// Taken literally, "$TOKEN" would silently become the
				// secret. The value is not repeated: it may be one.
				return "", fmt.Errorf("a $ before a name (at byte %d) is not expanded: write ${NAME} for an environment variable, or $$ for a literal $", i+1)
			}
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// FormatDuration prints d the way a configuration file writes it: whole
// days beyond one as 7d, other durations as Go does without trailing zero
// units (24h, 1h30m, 90s).
func FormatDuration(d time.Duration) string {
	if d > 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// minForwardKey is the shortest forward_secret key taken: the Standard
// Webhooks specification asks for 24 to 64 random bytes.
const minForwardKey = 24

// parseWebhookSecret decodes a Standard Webhooks secret: "whsec_" and the
// base64 of the key (the prefix may be left out).
func parseWebhookSecret(v string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, "whsec_"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("not \"whsec_<base64>\": the part after whsec_ does not decode as base64 (make one with: echo whsec_$(head -c 32 /dev/urandom | base64))")
	case len(key) < minForwardKey:
		return nil, fmt.Errorf("the key is %d bytes: want at least %d random bytes (make one with: echo whsec_$(head -c 32 /dev/urandom | base64))", len(key), minForwardKey)
	}
	return key, nil
}
