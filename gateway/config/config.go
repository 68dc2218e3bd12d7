// Package config reads the gateway's YAML configuration file into a
// [Config]: it decodes the file, checks every value with the defaults
// applied, and runs the library's own checks of each route. Every problem
// of a file is reported at once, as an [Errors] of "file:line: field:
// message" entries, in line order; settings that are valid but likely wrong
// are [Config.Warnings].
//
// docs/gateway.md is the reference of the file. A program that embeds the
// gateway may also build a Config by hand (see package gateway); Load and
// Parse are then not needed.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/suggest"
	"go.yaml.in/yaml/v3"
)

// Defaults of the configuration file (docs/gateway.md lists them all).
const (
	defaultListen          = "127.0.0.1:8080"
	defaultShutdownTimeout = 10 * time.Second
)

// Config is a checked configuration file, with every default applied: what
// [Load] and [Parse] return, and what gateway.New runs. A Go program may
// also build one by hand; the zero values of the sections are then not
// defaults, so set each field the gateway reads (Listen, Store.Driver,
// Audit.Sink, Log, ShutdownTimeout and, per route, Path, Upstream,
// UpstreamTimeout and Route).
type Config struct {
	File            string // the file it was read from, as given
	Listen          string
	Store           Store
	Admin           Admin
	Audit           Audit
	Log             Log
	ShutdownTimeout time.Duration
	Routes          []Route
	TLS             TLS            // tls: {cert, key}; zero for plain HTTP
	TrustedProxies  []netip.Prefix // trusted_proxies: peers whose X-Forwarded-* are kept
	Limits          Limits         // limits: what the gateway holds at once

	// Warnings are settings that are valid but likely wrong (a TTL
	// shorter than the provider's retries); check prints them and serve
	// logs them.
	Warnings []Error
}

// Error is one problem of a configuration file, at a line and a field.
type Error struct {
	File  string
	Line  int
	Field string // path of the field, e.g. "routes[1].ttl"
	Msg   string

	column int // orders the errors of one line
}

func (e Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// Errors is every problem found in a configuration file, in file order.
// Load and Parse return it (as an error) when a file is invalid; get it
// with errors.As.
type Errors []Error

func (es Errors) Error() string {
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

// Load reads and checks the configuration file name, with getenv reading
// the ${VAR} references of the file (os.Getenv in a process). A file that
// can't be read is a plain error; a file that is invalid is an [Errors].
func Load(name string, getenv func(string) string, opts ...Option) (*Config, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("config file %s does not exist (pass --config FILE; examples/idemhook.yaml is a starting point)", name)
		}
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(name, data, getenv, opts...)
}

// A URLChecker checks the URL of a Redis or a PostgreSQL store the way the
// store's client will read it, without connecting; the errors say why it is
// refused, without the URL. Package config links no database client, so
// that reading a configuration needs none: the idemhook command gives
// Load and Parse the clients' checks (package gateway/storeurl) with
// [WithURLChecker]. Without one, store.url is checked only for its scheme
// (postgres).
type URLChecker interface {
	CheckRedisURL(url string) error
	CheckPostgresURL(url string) error
}

// An Option changes how Load and Parse check a file.
type Option func(*checker)

// WithURLChecker checks store.url with u.
func WithURLChecker(u URLChecker) Option {
	return func(c *checker) { c.urls = u }
}

// Parse reads data, the text of the file name, in three phases. It
// decodes the YAML, checking only its structure against the schema. It checks
// every value, with the defaults applied, into a Config. Then it
// builds the providers' presets and runs the library's own checks of each
// route. Every phase reports all it finds, so the error holds every problem
// of the file at once, in line order.
func Parse(name string, data []byte, getenv func(string) string, opts ...Option) (*Config, error) {
	c := &checker{file: name, getenv: getenv, keys: map[*yaml.Node]*yaml.Node{}, wrong: map[*yaml.Node]bool{}}
	for _, o := range opts {
		o(c)
	}
	var cfg *Config
	if root := c.decode(data); root != nil {
		cfg = c.check(root)
		c.build(cfg)
	}
	if len(c.errs) > 0 {
		slices.SortStableFunc(c.errs, byLine)
		return nil, c.errs
	}
	slices.SortStableFunc(c.warns, byLine)
	cfg.Warnings = c.warns
	return cfg, nil
}

// byLine orders errors as their places in the file.
func byLine(a, b Error) int {
	return cmp.Or(a.Line-b.Line, a.column-b.column)
}

// checker holds what the phases of Parse share: the problems found
// so far, and the key of every value so that a problem can be reported at
// the line of its field's name.
type checker struct {
	file   string
	getenv func(string) string
	urls   URLChecker                // nil: no client's check of store.url
	keys   map[*yaml.Node]*yaml.Node // a value's node -> its key's node
	wrong  map[*yaml.Node]bool       // what shape put in place of values of the wrong kind
	shaped int                       // nodes shape visited, up to maxShaped
	errs   Errors
	warns  []Error

	routes []routeInputs // per route, what the build phase needs
}

// errorf records a problem at n's line (line 1 when n is nil).
func (c *checker) errorf(n *yaml.Node, field, format string, args ...any) {
	line, column := 1, 0
	if n != nil && n.Line > 0 {
		line, column = n.Line, n.Column
	}
	c.errs = append(c.errs, Error{File: c.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...), column: column})
}

// warnf records a warning at n's line.
func (c *checker) warnf(n *yaml.Node, field, format string, args ...any) {
	c.warns = append(c.warns, Error{File: c.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...), column: n.Column})
}

// A leaf is one value of the file: its YAML node, kept for the checks that
// read it and for the line their errors name. It is nil when the field is
// absent or null.
type leaf struct{ *yaml.Node }

// UnmarshalYAML keeps the node; the check phase reads it.
func (l *leaf) UnmarshalYAML(n *yaml.Node) error {
	l.Node = n
	return nil
}

// decode parses data and checks its structure against the schema. It
// returns the document's mapping, shaped, or nil, with the problem recorded,
// when the file is not YAML, is empty or holds a second document.
func (c *checker) decode(data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		c.errs = append(c.errs, yamlErrorAt(c.file, data, err))
		return nil
	}
	// Unmarshal reads the first document only. A second one is refused
	// rather than silently ignored, but an empty one (a trailing ---) is
	// harmless.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var d yaml.Node
		if dec.Decode(&d) != nil {
			break
		}
		if i > 0 && len(d.Content) > 0 && !isNull(d.Content[0]) {
			c.errorf(d.Content[0], "", "a second YAML document (after ---) would be ignored: keep the whole configuration in one document")
			return nil
		}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		c.errorf(nil, "", "the file is empty: it needs at least routes: (see examples/idemhook.yaml)")
		return nil
	}
	top := resolve(doc.Content[0])
	if top.Kind != yaml.MappingNode {
		c.errorf(top, "", "expected a mapping (name: value lines), got %s", describe(top))
		return nil
	}
	root := c.shape(top, configLayout, false, "")
	if c.shaped > maxShaped {
		return nil
	}
	return root
}

// maxShaped bounds the nodes of a file, aliases expanded. A gateway with
// a thousand routes has about fifty thousand.
const maxShaped = 200_000

// shape checks the structure of n against lay, a mapping's layout (a list
// of such mappings when list; any value when lay is nil). A mapping has
// known fields, each given once, merged mappings included (<<: *anchor).
// shape reports every part that does not fit and returns a copy of n
// without them, aliases resolved, so that decoding the copy cannot fail.
// Each value of the copy is a node of its own, whose key is recorded in
// c.keys.
func (c *checker) shape(n *yaml.Node, lay *layout, list bool, at string) *yaml.Node {
	n = resolve(n)
	if c.shaped++; c.shaped > maxShaped {
		// Aliases that merge each other can stand for a tree exponentially
		// larger than the file.
		if c.shaped == maxShaped+1 {
			c.errorf(n, at, "the file stands for more than %d values once its aliases are expanded", maxShaped)
		}
		return c.null(n)
	}
	cp := *n
	switch {
	case lay == nil || isNull(n):
		return &cp
	case list:
		if n.Kind != yaml.SequenceNode {
			c.errorf(n, at, "expected a list of routes (- path: ...), got %s", describe(n))
			return c.null(n)
		}
		cp.Content = make([]*yaml.Node, len(n.Content))
		for i, e := range n.Content {
			ep := fmt.Sprintf("%s[%d]", at, i)
			if e = resolve(e); isNull(e) || e.Kind != yaml.MappingNode {
				// An entry in the wrong place would shift the indices of
				// the next ones: it becomes an empty mapping instead.
				c.errorf(e, ep, "expected a mapping (name: value lines), got %s", describe(e))
				empty := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: e.Line, Column: e.Column}
				c.wrong[empty] = true
				cp.Content[i] = empty
				continue
			}
			cp.Content[i] = c.shape(e, lay, false, ep)
		}
		return &cp
	}
	if n.Kind != yaml.MappingNode {
		c.errorf(n, at, "expected a mapping (name: value lines), got %s", describe(n))
		return c.null(n)
	}
	cp.Content = nil
	first := map[string]*yaml.Node{} // name -> its key
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		switch known := slices.Contains(lay.names, k.Value); {
		case k.Kind == yaml.ScalarNode && k.Tag == "!!merge":
			merges = append(merges, c.merged(v, lay, at)...)
		case k.Kind != yaml.ScalarNode:
			c.errorf(k, at, "expected a field name, got %s", describe(k))
		case !known:
			c.errorf(k, join(at, k.Value), "unknown field %q%s (known: %s)", k.Value, didYouMean(k.Value, lay.names), strings.Join(lay.names, ", "))
		case first[k.Value] != nil:
			c.errorf(k, join(at, k.Value), "field given twice (first at line %d)", first[k.Value].Line)
		default:
			first[k.Value] = k
			val := c.shape(v, lay.fields[k.Value], lay.lists[k.Value], join(at, k.Value))
			c.keys[val] = k
			cp.Content = append(cp.Content, k, val)
		}
	}
	// All merges of the mapping go into one merge key, in their order: a
	// field the mapping sets itself wins, then the first merge that sets it.
	if len(merges) > 0 {
		cp.Content = append(cp.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!merge", Value: "<<", Line: n.Line},
			&yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: merges, Line: n.Line})
	}
	return &cp
}

// merged checks the value of a merge key (<<: *anchor or <<: [*a, *b]) and
// returns the mappings it merges, each shaped like the mapping it is
// merged into, of layout lay.
func (c *checker) merged(v *yaml.Node, lay *layout, at string) []*yaml.Node {
	v = resolve(v)
	srcs := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		srcs = v.Content
	}
	var out []*yaml.Node
	for _, src := range srcs {
		if src = resolve(src); src.Kind != yaml.MappingNode {
			c.errorf(src, join(at, "<<"), "can only merge a mapping (<<: *anchor or <<: [*a, *b]), got %s", describe(src))
			continue
		}
		if m := c.shape(src, lay, false, at); !c.wrong[m] {
			out = append(out, m)
		}
	}
	return out
}

// didYouMean returns ": did you mean "x"?" for the name of known nearest
// to name, a misspelt one, or "" (suggest.DidYouMean).
func didYouMean(name string, known []string) string { return suggest.DidYouMean(name, known) }

// null returns a null node to put in the place of n, a value of the wrong
// kind, and remembers it as such.
func (c *checker) null(n *yaml.Node) *yaml.Node {
	null := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column}
	c.wrong[null] = true
	return null
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

// join returns the path of field name inside at.
func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// yamlError turns a YAML syntax or type error into a Error, keeping the
// line the YAML library names.
func yamlError(file string, err error) Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(num); err == nil {
				line, msg = l, after
			}
		}
	}
	return Error{File: file, Line: line, Msg: "invalid YAML: " + msg}
}

// yamlErrorAt is yamlError, made clear about tabs. YAML indents with spaces
// only. For a tab in the indentation the YAML parser says "found a tab
// character that violates indentation" or "found character that cannot
// start any token", sometimes at the line before. When the file has a tab
// in a line's indentation, the error names that line and says "tab".
//
// Other errors are reported at the line where the file stops being YAML
// (see problemLine), not where the YAML parser says.
func yamlErrorAt(file string, data []byte, err error) Error {
	ce := yamlError(file, err)
	if strings.Contains(ce.Msg, "tab") || strings.Contains(ce.Msg, "cannot start any token") {
		for i, line := range strings.Split(string(data), "\n") {
			indent := line[:len(line)-len(strings.TrimLeft(line, " \t-"))]
			if col := strings.IndexByte(indent, '\t'); col >= 0 {
				return Error{File: file, Line: i + 1,
					Msg: fmt.Sprintf("invalid YAML: a tab in the indentation (column %d): YAML indents with spaces only", col+1)}
			}
		}
	}
	ce.Line = problemLine(data, ce)
	if strings.HasSuffix(ce.Msg, "did not find expected key") || strings.HasSuffix(ce.Msg, "did not find expected '-' indicator") {
		ce.Msg += " (this line is indented differently from the fields or entries above it)"
	}
	return ce
}

// problemLine returns the line of ce, a syntax error of data, where data
// stops being YAML: the first line k such that lines 1 to k alone fail
// with ce's problem. The YAML parser reports most errors ("did not find
// expected key", "... '-' indicator") at the line before the start of the
// list or mapping it was parsing, so a mis-indented key on line 3 of a
// list starting on line 2 is reported at line 1, and one in the fiftieth
// route at the line of routes:. Cut at a line, a file is valid YAML up to
// its problem, so a binary search finds that line, from the one the
// parser names (the problem is never before its context).
func problemLine(data []byte, ce Error) int {
	lines := strings.SplitAfter(string(data), "\n")
	fails := func(k int) bool {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(strings.Join(lines[:k], "")), &n)
		return err != nil && yamlError("", err).Msg == ce.Msg
	}
	lo, hi := max(1, ce.Line), len(lines)
	if lo > hi || !fails(hi) {
		return ce.Line
	}
	for lo < hi { // fails(hi) holds
		if mid := (lo + hi) / 2; fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// LongestLease is the longest claim lease of the routes (a route without
// one has the library's default).
func (c *Config) LongestLease() time.Duration {
	longest := idemhook.DefaultLease
	for _, rc := range c.Routes {
		longest = max(longest, rc.Route.Lease)
	}
	return longest
}
