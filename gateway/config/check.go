package config

import (
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

	"go.yaml.in/yaml/v3"
)

// maxBodyWarn is the max_body above which check and serve warn: bodies are
// buffered whole, so a few concurrent deliveries of this size take that
// much memory each.
const maxBodyWarn = 64 << 20

// configSchema is the table of the file's top level; each section has its
// own, in the file of its section.
var configSchema = table[Config]{fields: []field[Config]{
	{name: "listen", to: func(c *Config) any { return &c.Listen }, def: defaultListen, check: checkListen},
	{name: "store", sub: storeSchema.layout()},
	{name: "admin", sub: adminSchema.layout()},
	{name: "audit", sub: auditSchema.layout()},
	{name: "log", sub: logSchema.layout()},
	{name: "shutdown_timeout", to: func(c *Config) any { return &c.ShutdownTimeout }, def: defaultShutdownTimeout},
	{name: "routes", list: routeLayout},
	{name: "tls", sub: tlsSchema.layout()},
	{name: "trusted_proxies"}, // a list of addresses: trustedProxies
	{name: "limits", sub: limitsSchema.layout()},
}}

// configLayout is the structure of the file.
var configLayout = configSchema.layout()

// check is the second phase of Parse: it checks every value of root, the
// file's mapping, and returns the configuration with the defaults applied.
func (c *checker) check(root *yaml.Node) *Config {
	cfg := &Config{File: c.file}
	vals := valuesOf(root)
	configSchema.read(c, vals, root, "", cfg)
	// A section merged into the top level (<<: *defaults) is not read for
	// store, admin, audit and tls: only the file's own.
	cfg.Store = c.store(section(root, "store"))
	cfg.Admin = c.admin(section(root, "admin"), cfg.Listen)
	cfg.Audit = c.audit(section(root, "audit"), cfg.Store)
	cfg.Log = c.log(vals["log"].Node)
	cfg.Routes = c.checkRoutes(root)
	c.queueStore(cfg)
	if n := section(root, "tls"); n != nil {
		cfg.TLS = c.tls(n)
	}
	cfg.TrustedProxies = c.trustedProxies(vals["trusted_proxies"])
	cfg.Limits = c.limits(vals["limits"].Node, cfg.Routes)
	return cfg
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
	if d, ok := c.parseDuration(l, at, v); ok {
		return d
	}
	return def
}

// parseDuration parses v, the value of l, a positive duration.
func (c *checker) parseDuration(l leaf, at, v string) (time.Duration, bool) {
	d, err := parseDuration(v)
	if err != nil {
		c.errorf(l.Node, at, "%v", err)
		return 0, false
	}
	if d <= 0 {
		c.errorf(l.Node, at, "must be positive, got %q", v)
		return 0, false
	}
	return d, true
}

// oneOf returns the value of l, which must be one of allowed, or def when
// absent.
func (c *checker) oneOf(l leaf, at, def string, allowed ...string) string {
	v, ok := c.str(l, at)
	if !ok || !c.isOneOf(l, at, v, allowed) {
		return def
	}
	return v
}

// isOneOf reports whether v, the value of l, is one of allowed.
func (c *checker) isOneOf(l leaf, at, v string, allowed []string) bool {
	if !slices.Contains(allowed, v) {
		c.errorf(l.Node, at, "invalid %s %q%s (want %s)", lastName(at), v, didYouMean(v, allowed), orList(allowed))
		return false
	}
	return true
}

// parseBool parses v, the value of l, true or false.
func (c *checker) parseBool(l leaf, at, v string) (b, ok bool) {
	switch v {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	c.errorf(l.Node, at, "invalid %s %q (want true or false)", lastName(at), v)
	return false, false
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

// maxWaitReplicas bounds store.wait_replicas: a larger count is a typo,
// which would make every claim wait its whole timeout and fail.
const maxWaitReplicas = 100

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
