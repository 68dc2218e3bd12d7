package main

import (
	"bytes"
	"errors"
	"fmt"
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
	"github.com/idemhook/idemhook/audit"
	"github.com/idemhook/idemhook/audit/redisaudit"
	"github.com/idemhook/idemhook/provider"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

// Defaults of the configuration file (docs/gateway.md lists them all).
const (
	defaultListen          = "127.0.0.1:8080"
	defaultAdminListen     = "127.0.0.1:9090"
	defaultSQLitePath      = "idemhook.db"
	defaultShutdownTimeout = 10 * time.Second
	defaultUpstreamTimeout = 30 * time.Second
)

// gatewayConfig is a checked configuration file, with every default applied.
type gatewayConfig struct {
	File            string // the file it was read from, as given
	Listen          string
	Store           storeSettings
	Admin           adminSettings
	Audit           auditSettings
	Log             logSettings
	ShutdownTimeout time.Duration
	Routes          []routeSettings
	TLS             tlsSettings    // tls: {cert, key}; zero for plain HTTP
	TrustedProxies  []netip.Prefix // trusted_proxies: peers whose X-Forwarded-* are kept

	// Warnings are settings that are valid but likely wrong (a TTL
	// shorter than the provider's retries); check prints them and serve
	// logs them.
	Warnings []configError
}

// storeSettings is the store: section.
type storeSettings struct {
	Driver     string        // sqlite | redis | postgres | memory
	Timeout    time.Duration // bound of every call to a networked store; 0: idemhook.DefaultStoreTimeout
	Path       string        // sqlite
	URL        string        // redis, postgres
	Table      string        // postgres
	Addrs      []string
	MasterName string
	Username   string
	Password   string
	Prefix     string
}

// adminSettings is the admin: section.
type adminSettings struct {
	Listen string // "" when disabled (listen: off)
	Token  string
}

// auditSettings is the audit: section.
type auditSettings struct {
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

// logSettings is the log: section.
type logSettings struct {
	Format string // text | json
	Level  string // debug | info | warn | error
}

// routeSettings is one entry of routes:.
type routeSettings struct {
	Line            int // line of the entry in the file
	Path            string
	Upstream        *url.URL
	UpstreamTimeout time.Duration
	Route           idemhook.Route // Source, TTL, Header, policies, Preset...
	Provider        string
	ShareKeys       bool   // share_keys: other routes may have the same source
	at              string // "routes[i]", for errors
}

// configError is one problem of a configuration file, at a line and a field.
type configError struct {
	File  string
	Line  int
	Field string // path of the field, e.g. "routes[1].ttl"
	Msg   string
}

func (e configError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// configErrors is every problem found in a configuration file, in file order.
type configErrors []configError

func (es configErrors) Error() string {
	if len(es) == 1 {
		return es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d errors in the configuration:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// loadConfig reads and checks the configuration file name.
func loadConfig(name string, getenv func(string) string) (*gatewayConfig, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("config file %s does not exist (pass --config FILE; examples/idemhook.yaml is a starting point)", name)
		}
		return nil, fmt.Errorf("read config: %w", err)
	}
	return parseConfig(name, data, getenv)
}

// parseConfig checks data, the text of the file name, and returns the
// configuration or a configErrors holding every problem found.
func parseConfig(name string, data []byte, getenv func(string) string) (*gatewayConfig, error) {
	p := &parser{file: name, getenv: getenv}
	cfg := p.parse(data)
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b configError) int { return a.Line - b.Line })
		return nil, p.errs
	}
	return cfg, nil
}

// parser walks the YAML node tree, collecting errors instead of stopping at
// the first one.
type parser struct {
	warns []configError

	file   string
	getenv func(string) string
	errs   configErrors
}

// warnf records a warning at n's line.
func (p *parser) warnf(n *yaml.Node, field, format string, args ...any) {
	p.warns = append(p.warns, configError{File: p.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 1
	if n != nil && n.Line > 0 {
		line = n.Line
	}
	p.errs = append(p.errs, configError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// field is one key of a mapping, with the node of its value.
type field struct {
	key   *yaml.Node
	value *yaml.Node
}

// mapping returns the fields of the mapping n, keyed by name, after checking
// that every name is one of known and appears once. It returns nil when n is
// not a mapping (an error was recorded).
func (p *parser) mapping(n *yaml.Node, at string, known ...string) map[string]field {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, at, "expected a mapping (name: value lines), got %s", describe(n))
		return nil
	}
	fields := make(map[string]field, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		name := k.Value
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, at, "expected a field name, got %s", describe(k))
			continue
		}
		if !slices.Contains(known, name) {
			p.errorf(k, join(at, name), "unknown field %q (known: %s)", name, strings.Join(known, ", "))
			continue
		}
		if prev, dup := fields[name]; dup {
			p.errorf(k, join(at, name), "field given twice (first at line %d)", prev.key.Line)
			continue
		}
		fields[name] = field{key: k, value: v}
	}
	// YAML merge keys ("<<: *defaults", "<<: [*a, *b]"): a merged field
	// applies unless the mapping sets it itself, or an earlier merge did.
	// Merged mappings are checked like written ones, at their own lines.
	for _, m := range merges {
		m = resolve(m)
		srcs := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			srcs = m.Content
		}
		for _, src := range srcs {
			if src = resolve(src); src.Kind != yaml.MappingNode {
				p.errorf(src, join(at, "<<"), "can only merge a mapping (<<: *anchor or <<: [*a, *b]), got %s", describe(src))
				continue
			}
			for name, f := range p.mapping(src, at, known...) {
				if _, set := fields[name]; !set {
					fields[name] = f
				}
			}
		}
	}
	return fields
}

// join returns the path of field name inside at.
func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// resolve follows YAML aliases (*name) to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// str returns the scalar string value of f, with ${VAR} expanded, and
// whether it was set (present, not null, no error).
func (p *parser) str(fs map[string]field, at, name string) (string, *yaml.Node, bool) {
	f, ok := fs[name]
	if !ok || isNull(f.value) {
		return "", nil, false
	}
	n := resolve(f.value)
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, join(at, name), "expected a single value, got %s", describe(n))
		return "", n, false
	}
	v, err := expand(n.Value, p.getenv)
	if err != nil {
		p.errorf(n, join(at, name), "%v", err)
		return "", n, false
	}
	return v, n, true
}

// strList returns the list value of f, each element expanded.
func (p *parser) strList(fs map[string]field, at, name string) ([]string, *yaml.Node, bool) {
	f, ok := fs[name]
	if !ok || isNull(f.value) {
		return nil, nil, false
	}
	n := resolve(f.value)
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, join(at, name), "expected a list ([a, b] or - lines), got %s", describe(n))
		return nil, n, false
	}
	out := make([]string, 0, len(n.Content))
	good := true
	for i, e := range n.Content {
		e = resolve(e)
		ep := fmt.Sprintf("%s[%d]", join(at, name), i)
		if e.Kind != yaml.ScalarNode {
			p.errorf(e, ep, "expected a single value, got %s", describe(e))
			good = false
			continue
		}
		v, err := expand(e.Value, p.getenv)
		if err != nil {
			p.errorf(e, ep, "%v", err)
			good = false
			continue
		}
		out = append(out, v)
	}
	return out, n, good
}

// duration returns the duration value of f, or def when absent. It must be
// positive.
func (p *parser) duration(fs map[string]field, at, name string, def time.Duration) time.Duration {
	v, n, ok := p.str(fs, at, name)
	if !ok {
		return def
	}
	d, err := parseDuration(v)
	if err != nil {
		p.errorf(n, join(at, name), "%v", err)
		return def
	}
	if d <= 0 {
		p.errorf(n, join(at, name), "must be positive, got %q", v)
		return def
	}
	return d
}

// oneOf returns the value of f, which must be one of allowed, or def.
func (p *parser) oneOf(fs map[string]field, at, name, def string, allowed ...string) string {
	v, n, ok := p.str(fs, at, name)
	if !ok {
		return def
	}
	if !slices.Contains(allowed, v) {
		p.errorf(n, join(at, name), "invalid %s %q (want %s)", name, v, orList(allowed))
		return def
	}
	return v
}

func orList(vs []string) string {
	if len(vs) == 1 {
		return vs[0]
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

func (p *parser) parse(data []byte) *gatewayConfig {
	cfg := &gatewayConfig{File: p.file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errs = append(p.errs, yamlErrorAt(p.file, data, err))
		return cfg
	}
	// Unmarshal reads the first document only: refuse a second one rather
	// than silently ignore the settings it holds.
	// An empty document (a trailing ---) is harmless.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var d yaml.Node
		if dec.Decode(&d) != nil {
			break
		}
		if i > 0 && len(d.Content) > 0 && !isNull(d.Content[0]) {
			p.errorf(d.Content[0], "", "a second YAML document (after ---) would be ignored: keep the whole configuration in one document")
			return cfg
		}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errorf(nil, "", "the file is empty: it needs at least routes: (see examples/idemhook.yaml)")
		return cfg
	}
	root := doc.Content[0]
	fs := p.mapping(root, "", "listen", "store", "admin", "audit", "log", "shutdown_timeout", "routes", "tls", "trusted_proxies")
	if fs == nil {
		return cfg
	}

	cfg.Listen = defaultListen
	if v, n, ok := p.str(fs, "", "listen"); ok {
		if err := checkListen(v); err != nil {
			p.errorf(n, "listen", "%v", err)
		}
		cfg.Listen = v
	}
	cfg.ShutdownTimeout = p.duration(fs, "", "shutdown_timeout", defaultShutdownTimeout)
	cfg.Store = p.store(fs)
	cfg.Admin = p.admin(fs, cfg.Listen)
	cfg.Audit = p.audit(fs, cfg.Store)
	cfg.Log = p.log(fs)
	cfg.Routes = p.routes(fs, root)
	p.listener(fs, cfg)
	cfg.Warnings = p.warns
	return cfg
}

// yamlError turns a YAML syntax or type error into a configError, keeping the
// line the YAML library names.
func yamlError(file string, err error) configError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(num); err == nil {
				line, msg = l, after
			}
		}
	}
	return configError{File: file, Line: line, Msg: "invalid YAML: " + msg}
}

func (p *parser) store(fs map[string]field) storeSettings {
	sc := storeSettings{Driver: "sqlite", Path: defaultSQLitePath}
	f, ok := fs["store"]
	if !ok || isNull(f.value) {
		return sc
	}
	const at = "store"
	sf := p.mapping(f.value, at, "driver", "path", "url", "addrs", "master_name", "username", "password", "prefix", "table", "timeout")
	if sf == nil {
		return sc
	}
	sc.Driver = p.oneOf(sf, at, "driver", "sqlite", "sqlite", "redis", "postgres", "memory")
	sc.Timeout = p.duration(sf, at, "timeout", 0) // 0: the library's default
	onlyFor := func(name, driver string) {
		if fl, ok := sf[name]; ok && sc.Driver != driver {
			p.errorf(fl.key, join(at, name), "only used by driver %s (driver is %s)", driver, sc.Driver)
		}
	}
	switch sc.Driver {
	case "sqlite":
		if v, n, ok := p.str(sf, at, "path"); ok {
			if v == "" {
				p.errorf(n, join(at, "path"), "empty path")
			}
			sc.Path = v
		}
	case "redis":
		sc.Path = ""
		before := len(p.errs)
		u, un, hasURL := p.str(sf, at, "url")
		addrs, an, hasAddrs := p.strList(sf, at, "addrs")
		switch {
		case hasURL && hasAddrs:
			p.errorf(an, join(at, "addrs"), "give either url or addrs, not both")
		case hasURL:
			if _, err := redis.ParseURL(u); err != nil {
				p.errorf(un, join(at, "url"), "invalid Redis URL %q: %v (want redis://[user:password@]host:port/db)", redactURL(u), unwrapURLError(err))
			}
			sc.URL = u
		case hasAddrs:
			if len(addrs) == 0 {
				p.errorf(an, join(at, "addrs"), "empty list: give at least one host:port")
			}
			for i, a := range addrs {
				if _, _, err := net.SplitHostPort(a); err != nil {
					p.errorf(an.Content[i], fmt.Sprintf("%s[%d]", join(at, "addrs"), i), "invalid address %q: want host:port", a)
				}
			}
			sc.Addrs = addrs
		case len(p.errs) == before: // neither given, and no error said why
			n := f.value
			if d, ok := sf["driver"]; ok {
				n = d.value
			}
			p.errorf(n, at, "driver redis needs url (redis://host:port/db) or addrs (a list of host:port)")
		}
		sc.MasterName, _, _ = p.str(sf, at, "master_name")
		sc.Username, _, _ = p.str(sf, at, "username")
		sc.Password, _, _ = p.str(sf, at, "password")
		if sc.MasterName != "" && !hasAddrs {
			p.errorf(sf["master_name"].key, join(at, "master_name"), "Sentinel needs addrs (the Sentinels' host:port list)")
		}
	case "postgres":
		sc.Path = ""
		p.postgresStore(sf, f.value, &sc)
	case "memory":
		sc.Path = ""
	}
	if sc.Driver != "sqlite" {
		onlyFor("path", "sqlite")
	}
	if sc.Driver != "redis" {
		for _, name := range []string{"addrs", "master_name", "username", "password"} {
			onlyFor(name, "redis")
		}
	}
	if sc.Driver != "redis" && sc.Driver != "postgres" {
		if fl, ok := sf["url"]; ok {
			p.errorf(fl.key, join(at, "url"), "only used by drivers redis and postgres (driver is %s)", sc.Driver)
		}
	}
	if sc.Driver != "postgres" {
		onlyFor("table", "postgres")
	}
	sc.Prefix, _, _ = p.str(sf, at, "prefix")
	if sc.Driver != "redis" {
		onlyFor("prefix", "redis")
	}
	return sc
}

func (p *parser) admin(fs map[string]field, listen string) adminSettings {
	ac := adminSettings{Listen: defaultAdminListen}
	f, ok := fs["admin"]
	if !ok || isNull(f.value) {
		return ac
	}
	const at = "admin"
	af := p.mapping(f.value, at, "listen", "token")
	if af == nil {
		return ac
	}
	v, n, ok := p.str(af, at, "listen")
	if ok {
		ac.Listen = v
		switch {
		case v == "off":
			ac.Listen = ""
		case checkListen(v) != nil:
			p.errorf(n, join(at, "listen"), "%v", checkListen(v))
		case v == listen && !strings.HasSuffix(v, ":0"):
			p.errorf(n, join(at, "listen"), "same address as listen (%s): give the admin listener its own port", v)
		}
	}
	tok, tn, hasTok := p.str(af, at, "token")
	if hasTok && tok == "" {
		p.errorf(tn, join(at, "token"), "empty token")
	}
	ac.Token = tok
	if ac.Listen != "" && !hasTok && !isLoopback(ac.Listen) {
		node := f.value
		if n != nil {
			node = n
		}
		p.errorf(node, join(at, "token"), "required when admin.listen (%s) is not a loopback address: the admin API can delete keys (use token: ${IDEMHOOK_ADMIN_TOKEN})", ac.Listen)
	}
	return ac
}

func (p *parser) audit(fs map[string]field, sc storeSettings) (ac auditSettings) {
	ac = auditSettings{Retention: audit.DefaultRetention, Buffer: defaultAuditBuffer, Instance: defaultInstance()}
	switch sc.Driver {
	case "sqlite":
		ac.Sink, ac.Path = "sqlite", sc.Path
	default: // memory, redis: a sink of the same kind
		ac.Sink = sc.Driver
	}
	if sc.Driver == "postgres" { // the trail in the store's database, by default
		ac.Sink, ac.URL = "postgres", sc.URL
	}
	defer func() {
		if ac.Sink == "redis" && ac.Key == "" {
			ac.Key = sc.Prefix + redisaudit.DefaultKey
		}
	}()
	f, ok := fs["audit"]
	if !ok || isNull(f.value) {
		return ac
	}
	const at = "audit"
	af := p.mapping(f.value, at, "sink", "path", "url", "table", "retention", "size", "key", "buffer", "instance")
	if af == nil {
		return ac
	}
	ac.Sink = p.oneOf(af, at, "sink", ac.Sink, "sqlite", "postgres", "redis", "memory", "log", "none")
	if ac.Sink != "postgres" {
		ac.URL = ""
	}
	if s, ok := af["sink"]; ok && ac.Sink == "redis" && sc.Driver != "redis" {
		p.errorf(s.value, join(at, "sink"), "sink redis writes a stream on the store's Redis: it needs store.driver redis (store is %s)", sc.Driver)
	}
	ac.Size = p.count(af, at, "size", 0)
	if sf, ok := af["size"]; ok && ac.Sink != "memory" && ac.Sink != "redis" {
		p.errorf(sf.key, join(at, "size"), "only used by sinks memory and redis (sink is %s)", ac.Sink)
	}
	if v, n, ok := p.str(af, at, "key"); ok {
		if ac.Sink != "redis" {
			p.errorf(n, join(at, "key"), "only used by sink redis (sink is %s)", ac.Sink)
		} else if v == "" {
			p.errorf(n, join(at, "key"), "empty key")
		}
		ac.Key = v
	}
	ac.Buffer = p.count(af, at, "buffer", defaultAuditBuffer)
	if v, n, ok := p.str(af, at, "instance"); ok {
		if v == "" {
			p.errorf(n, join(at, "instance"), "empty instance name")
		}
		ac.Instance = v
	}
	ac.Retention = p.duration(af, at, "retention", audit.DefaultRetention)
	if v, n, ok := p.str(af, at, "path"); ok {
		if ac.Sink != "sqlite" {
			p.errorf(n, join(at, "path"), "only used by sink sqlite (sink is %s)", ac.Sink)
		}
		ac.Path = v
	} else if ac.Sink == "sqlite" && ac.Path == "" {
		ac.Path = defaultSQLitePath
	}
	ac.Table, _, _ = p.str(af, at, "table")
	if tf, ok := af["table"]; ok && ac.Sink != "postgres" {
		p.errorf(tf.key, join(at, "table"), "only used by sink postgres (sink is %s)", ac.Sink)
	}
	v, n, hasURL := p.str(af, at, "url")
	switch {
	case ac.Sink == "postgres" && !hasURL && sc.Driver == "postgres":
		ac.URL = sc.URL
	case ac.Sink == "postgres" && !hasURL:
		node := f.value
		if s, ok := af["sink"]; ok {
			node = s.value
		}
		p.errorf(node, join(at, "url"), "sink postgres needs url (postgres://user:password@host:5432/db), unless the store is PostgreSQL too")
	case ac.Sink == "postgres":
		if u, err := url.Parse(v); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			p.errorf(n, join(at, "url"), "invalid PostgreSQL URL %q (want postgres://user:password@host:5432/db)", redactURL(v))
		}
		ac.URL = v
	case hasURL:
		p.errorf(n, join(at, "url"), "only used by sink postgres (sink is %s)", ac.Sink)
	}
	return ac
}

func (p *parser) log(fs map[string]field) logSettings {
	lc := logSettings{Format: "text", Level: "info"}
	f, ok := fs["log"]
	if !ok || isNull(f.value) {
		return lc
	}
	lf := p.mapping(f.value, "log", "format", "level")
	if lf == nil {
		return lc
	}
	lc.Format = p.oneOf(lf, "log", "format", "text", "text", "json")
	lc.Level = p.oneOf(lf, "log", "level", "info", "debug", "info", "warn", "error")
	return lc
}

// routeFields are the fields of a routes: entry.
var routeFields = []string{
	"path", "upstream", "source", "ttl", "header", "in_flight", "wait_timeout", "on_store_error",
	"provider", "secret_env", "secrets", "provider_options", "tolerance", "max_body",
	"upstream_timeout", "replay_headers", "store_statuses", "require_key", "share_keys",
	"lease", "max_stored_body", "retry_after",
}

func (p *parser) routes(fs map[string]field, root *yaml.Node) []routeSettings {
	f, ok := fs["routes"]
	if !ok || isNull(f.value) {
		p.errorf(root, "routes", "missing: the gateway needs at least one route (path, upstream, source)")
		return nil
	}
	seq := resolve(f.value)
	if seq.Kind != yaml.SequenceNode {
		p.errorf(seq, "routes", "expected a list of routes (- path: ...), got %s", describe(seq))
		return nil
	}
	if len(seq.Content) == 0 {
		p.errorf(seq, "routes", "empty: the gateway needs at least one route (path, upstream, source)")
		return nil
	}
	var out []routeSettings
	seen := map[string]string{} // path -> "routes[i], line n"
	type sourceUse struct {
		at   string
		node *yaml.Node // the source value
	}
	sources := map[string][]sourceUse{}
	var order []string
	for i, n := range seq.Content {
		at := fmt.Sprintf("routes[%d]", i)
		rc, ok := p.route(n, at)
		if !ok {
			continue
		}
		if rc.Path != "" {
			if prev, dup := seen[rc.Path]; dup {
				p.errorf(p.lineOf(n, "path"), join(at, "path"), "duplicate path %q (also %s)", rc.Path, prev)
			} else {
				seen[rc.Path] = fmt.Sprintf("%s, line %d", at, p.lineOf(n, "path").Line)
			}
		}
		out = append(out, rc)
		if src := rc.Route.Source; src != "" {
			if _, ok := sources[src]; !ok {
				order = append(order, src)
			}
			sources[src] = append(sources[src], sourceUse{at: at, node: p.lineOf(n, "source")})
		}
	}
	// The source names the keys (idem:<source>:<key>): two routes with one
	// source answer each other's deliveries, so they must both say so.
	for _, src := range order {
		uses := sources[src]
		if len(uses) < 2 {
			continue
		}
		for i, u := range uses {
			if rc := routeAt(out, u.at); rc != nil && rc.ShareKeys {
				continue
			}
			var others []string
			for j, o := range uses {
				if j != i {
					others = append(others, fmt.Sprintf("%s, line %d", o.at, o.node.Line))
				}
			}
			p.errorf(u.node, join(u.at, "source"), "source %q is also used by %s: routes with one source share keys and answer each other's deliveries; give each route its own source, or set share_keys: true on every route of the source", src, strings.Join(others, "; "))
		}
	}
	return out
}

// routeAt returns the route parsed from the entry at ("routes[i]").
func routeAt(routes []routeSettings, at string) *routeSettings {
	for i := range routes {
		if routes[i].at == at {
			return &routes[i]
		}
	}
	return nil
}

// lineOf returns the value node of field name in mapping n, or n.
func (p *parser) lineOf(n *yaml.Node, name string) *yaml.Node {
	n = resolve(n)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i+1]
		}
	}
	return n
}

func (p *parser) route(n *yaml.Node, at string) (routeSettings, bool) {
	rf := p.mapping(n, at, routeFields...)
	if rf == nil {
		return routeSettings{}, false
	}
	rc := routeSettings{Line: resolve(n).Line, at: at}

	if v, vn, ok := p.str(rf, at, "path"); ok {
		if err := checkPath(v); err != nil {
			p.errorf(vn, join(at, "path"), "%v", err)
		}
		rc.Path = v
	} else if vn == nil { // absent, not of the wrong type (reported by str)
		p.errorf(n, join(at, "path"), "missing: the path this route receives, e.g. /webhooks/stone")
	}

	if v, vn, ok := p.str(rf, at, "upstream"); ok {
		u, err := checkUpstream(v)
		if err != nil {
			p.errorf(vn, join(at, "upstream"), "%v", err)
		}
		rc.Upstream = u
	} else if vn == nil { // absent, not of the wrong type (reported by str)
		p.errorf(n, join(at, "upstream"), "missing: the URL deliveries are forwarded to, e.g. http://127.0.0.1:3000/webhook")
	}

	r := &rc.Route
	if v, vn, ok := p.str(rf, at, "source"); ok {
		if v == "" || strings.ContainsAny(v, ": \t") {
			p.errorf(vn, join(at, "source"), "invalid source %q: a non-empty label without ':' or spaces, e.g. stone", v)
		}
		r.Source = v
	} else if vn == nil { // absent, not of the wrong type (reported by str)
		p.errorf(n, join(at, "source"), "missing: the provider's label, e.g. source: stone (it names the keys: idem:<source>:<key>)")
	}

	r.TTL = p.duration(rf, at, "ttl", 0) // 0: the preset's default, after p.preset
	r.WaitTimeout = p.duration(rf, at, "wait_timeout", idemhook.DefaultWaitTimeout)
	rc.UpstreamTimeout = p.duration(rf, at, "upstream_timeout", defaultUpstreamTimeout)
	r.InFlight = idemhook.InFlightPolicy(p.oneOf(rf, at, "in_flight", "wait", "proceed", "wait", "reject"))
	r.RequireKey = p.boolean(rf, at, "require_key")
	rc.ShareKeys = p.boolean(rf, at, "share_keys")
	if vs, vn, ok := p.strList(rf, at, "store_statuses"); ok {
		for i, v := range vs {
			st, err := strconv.Atoi(v)
			if err != nil || st < 300 || st > 499 {
				p.errorf(vn.Content[i], fmt.Sprintf("%s[%d]", join(at, "store_statuses"), i),
					"invalid status %q: want a 3xx or 4xx status to store and replay like a success (2xx always is; 1xx and 5xx never are)", v)
				continue
			}
			r.StoreStatuses = append(r.StoreStatuses, st)
		}
	}
	r.OnStoreError = idemhook.StoreErrorPolicy(p.oneOf(rf, at, "on_store_error", "open", "open", "closed"))

	if v, vn, ok := p.str(rf, at, "header"); ok {
		if v == "" || !validHeaderName(v) {
			p.errorf(vn, join(at, "header"), "invalid header name %q", v)
		}
		r.Header = v
	}
	r.MaxBodyBytes = idemhook.DefaultMaxBodyBytes
	if v, vn, ok := p.str(rf, at, "max_body"); ok {
		size, err := parseSize(v)
		if err != nil {
			p.errorf(vn, join(at, "max_body"), "%v", err)
		} else {
			r.MaxBodyBytes = size
		}
	}
	if hs, hn, ok := p.strList(rf, at, "replay_headers"); ok {
		for i, h := range hs {
			if !validHeaderName(h) {
				p.errorf(hn.Content[i], fmt.Sprintf("%s[%d]", join(at, "replay_headers"), i), "invalid header name %q", h)
			}
		}
		r.ReplayHeaders = hs
	}
	p.preset(rf, at, n, &rc)
	p.routeLimits(rf, at, n, &rc)
	if r.TTL == 0 {
		r.TTL = r.Preset.DefaultTTL()
	} else if r.Preset != nil && r.TTL < r.Preset.RetryWindow {
		p.warnf(p.lineOf(n, "ttl"), join(at, "ttl"), "%s is shorter than %s's retry window (%s): a retry after the TTL runs the event again; the preset's default is %s",
			formatDuration(r.TTL), r.Preset.Name, formatDuration(r.Preset.RetryWindow), formatDuration(r.Preset.DefaultTTL()))
	}
	return rc, true
}

// boolean returns the true/false value of f; false when absent.
func (p *parser) boolean(fs map[string]field, at, name string) bool {
	v, n, ok := p.str(fs, at, name)
	if !ok {
		return false
	}
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	p.errorf(n, join(at, name), "invalid %s %q (want true or false)", name, v)
	return false
}

// preset checks provider, secret_env, secrets, provider_options and
// tolerance, and builds the route's preset.
func (p *parser) preset(rf map[string]field, at string, n *yaml.Node, rc *routeSettings) {
	name, pn, hasProvider := p.str(rf, at, "provider")
	var secrets []string
	secretsOK := true
	if v, vn, ok := p.str(rf, at, "secret_env"); ok {
		switch {
		case !validEnvName(v):
			p.errorf(vn, join(at, "secret_env"), "invalid environment variable name %q", v)
			secretsOK = false
		case p.getenv(v) == "":
			p.errorf(vn, join(at, "secret_env"), "environment variable %s is not set or empty (export it, or use secrets: [${%s}])", v, v)
			secretsOK = false
		default:
			secrets = append(secrets, p.getenv(v))
		}
	}
	if list, _, ok := p.strList(rf, at, "secrets"); ok {
		secrets = append(secrets, list...)
	} else if _, present := rf["secrets"]; present && !isNull(rf["secrets"].value) {
		secretsOK = false
	}
	type optionValue struct {
		key   *yaml.Node
		value string
	}
	var opts []optionValue // in file order
	if f, ok := rf["provider_options"]; ok && !isNull(f.value) {
		on := resolve(f.value)
		if on.Kind != yaml.MappingNode {
			p.errorf(on, join(at, "provider_options"), "expected a mapping (option: value lines), got %s", describe(on))
			secretsOK = false
		} else {
			firstLine := map[string]int{}
			for i := 0; i+1 < len(on.Content); i += 2 {
				k, v := resolve(on.Content[i]), resolve(on.Content[i+1])
				fp := join(join(at, "provider_options"), k.Value)
				if line, dup := firstLine[k.Value]; dup {
					p.errorf(k, fp, "field given twice (first at line %d)", line)
					secretsOK = false
					continue
				}
				firstLine[k.Value] = k.Line
				if v.Kind != yaml.ScalarNode {
					p.errorf(v, fp, "expected a single value, got %s", describe(v))
					secretsOK = false
					continue
				}
				ev, err := expand(v.Value, p.getenv)
				if err != nil {
					p.errorf(v, fp, "%v", err)
					secretsOK = false
					continue
				}
				opts = append(opts, optionValue{k, ev})
			}
		}
	}
	tolerance := p.duration(rf, at, "tolerance", 0)

	if !hasProvider {
		for _, name := range []string{"secret_env", "secrets", "provider_options", "tolerance"} {
			if f, ok := rf[name]; ok {
				p.errorf(f.key, join(at, name), "only used with provider: (the signature check of a preset); set provider or remove %s", name)
			}
		}
		return
	}
	rc.Provider = name
	if !slices.Contains(provider.Names(), name) {
		p.errorf(pn, join(at, "provider"), "unknown provider %q (known: %s)", name, strings.Join(provider.Names(), ", "))
		return
	}
	if !secretsOK {
		return // the secret's own error was reported
	}
	nonEmpty := slices.ContainsFunc(secrets, func(s string) bool { return s != "" })
	if !nonEmpty {
		node, fieldName := pn, "provider"
		if f, ok := rf["secrets"]; ok {
			node, fieldName = f.value, "secrets"
		}
		p.errorf(node, join(at, fieldName), "provider %s needs a secret: set secret_env: NAME_OF_VARIABLE (or secrets: [${VAR}] to accept several during a rotation)", name)
		return
	}
	pc := provider.Config{Secrets: secrets, Tolerance: tolerance}
	optionNode := map[string]*yaml.Node{}
	for _, o := range opts {
		optionNode[o.key.Value] = o.key
		if err := pc.SetOption(name, o.key.Value, o.value); err != nil {
			p.errorf(o.key, join(join(at, "provider_options"), o.key.Value), "%v", err)
			return
		}
	}
	pr, err := provider.New(name, pc)
	if err != nil {
		// The preset's typed errors say which setting is at fault.
		node, fieldName := pn, "provider"
		var oe *provider.OptionError
		var te *provider.ToleranceError
		switch {
		case errors.As(err, &oe) && optionNode[oe.Option] != nil:
			node, fieldName = optionNode[oe.Option], join(join(at, "provider_options"), oe.Option)
		case errors.As(err, &oe) && rf["provider_options"].value != nil:
			node, fieldName = rf["provider_options"].value, "provider_options"
		case errors.As(err, &te) && rf["tolerance"].value != nil:
			node, fieldName = rf["tolerance"].value, "tolerance"
		}
		if !strings.HasPrefix(fieldName, at) {
			fieldName = join(at, fieldName)
		}
		p.errorf(node, fieldName, "%v", err)
		return
	}
	rc.Route.Preset = pr
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
	if strings.ContainsAny(v, "{}?# \t\r\n") {
		return fmt.Errorf("invalid path %q: no spaces, braces, ? or # allowed", v)
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
		return nil, fmt.Errorf("malformed upstream URL %q: %v", redactURL(v), unwrapURLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("malformed upstream URL %q: want http:// or https://", redactURL(v))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("malformed upstream URL %q: no host", redactURL(v))
	}
	if u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("malformed upstream URL %q: no user info or #fragment allowed", redactURL(v))
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

// redactURL hides the password of a URL in error messages, also when the
// URL does not parse: everything between "://" and the last "@" of the
// authority is then replaced, since it may hold a password.
func redactURL(v string) string {
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

// longestLease is the longest claim lease of the routes (a route without
// one has the library's default).
func (c *gatewayConfig) longestLease() time.Duration {
	longest := idemhook.DefaultLease
	for _, rc := range c.Routes {
		longest = max(longest, rc.Route.Lease)
	}
	return longest
}
