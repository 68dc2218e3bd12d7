package config

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/filter"
	"github.com/idemhook/idemhook/provider"
	"go.yaml.in/yaml/v3"
)

// Route is one entry of routes:.
type Route struct {
	Line            int // line of the entry in the file
	Path            string
	Upstream        *url.URL
	UpstreamTimeout time.Duration
	Route           idemhook.Route // Source, TTL, Header, policies, Preset...
	Provider        string
	SecretFile      string   // secret_file: the file the secrets were read from, or ""
	SecretCount     int      // how many secrets the route accepts
	Tenants         []Tenant // tenants: the tenants of a path ending in /{tenant}, in file order
	ShareKeys       bool     // share_keys: other routes may have the same source
	Field           string   // "routes[i]": where the route is, for errors

	// Deliver is DeliverProxy (the backend's answer goes back to the
	// provider) or DeliverQueue (the event is kept durably, the provider is
	// answered Accept, and the gateway delivers it with retries).
	Deliver string
	// RespondWithin, on a proxy route, is the budget of the backend's
	// answer: past it the provider gets Accept and the event is delivered
	// from the queue (the attempt under way goes on and counts as the
	// first). 0: none.
	RespondWithin time.Duration
	Accept        Accept // the answer of an accepted event (deliver: queue, respond_within)
	// ForwardKey, when not nil, signs what the gateway sends the backend by
	// the Standard Webhooks scheme (webhook-id, webhook-timestamp,
	// webhook-signature), so that the backend can check the request came
	// through the gateway: the key decoded from forward_secret
	// ("whsec_<base64>").
	ForwardKey []byte
	Queue      Queue // how queued events are delivered (deliver: queue, respond_within)
	// Filter, when not nil, is the route's filter (filter:): an event it
	// does not match is answered the route's success (its accept answer
	// on a queued route) and never forwarded nor queued.
	Filter *filter.Filter
	// Destinations, when not empty, are the backends a queued route's
	// events go to in place of Upstream (which is then nil): each event
	// to each destination whose filter matches it, from a queue of the
	// destination's own.
	Destinations []Destination
}

// Queued reports whether the route keeps events in the queue: deliver:
// queue, or a proxy route with respond_within.
func (r *Route) Queued() bool { return r.Deliver == DeliverQueue || r.RespondWithin > 0 }

// Values of Route.Deliver.
const (
	DeliverProxy = "proxy"
	DeliverQueue = "queue"
)

// RouteFields returns the fields a routes: entry may hold, as the file
// spells them, in the order the error of an unknown field lists them.
func RouteFields() []string { return slices.Clone(routeFields) }

const defaultUpstreamTimeout = 30 * time.Second

// routeSchema is an entry of routes:. The fields it does not set are read
// by route and the functions it calls, the accept: and queue: sections by
// delivery (queue.go).
var routeSchema = table[Route]{fields: []field[Route]{
	{name: "path", to: func(r *Route) any { return &r.Path }, check: checkPath,
		missing: "the path this route receives, e.g. /webhooks/stone"},
	{name: "upstream", to: func(r *Route) any { return &r.Upstream }, missing: "the URL deliveries are forwarded to, e.g. http://127.0.0.1:3000/webhook",
		unless: "destinations"},
	{name: "source", to: func(r *Route) any { return &r.Route.Source }, check: checkSource,
		missing: "the provider's label, e.g. source: stone (it names the keys: idem:<source>:<key>)"},
	{name: "ttl", to: func(r *Route) any { return &r.Route.TTL }}, // 0: the preset's default, set by build
	{name: "header", to: func(r *Route) any { return &r.Route.Header }, check: checkHeaderName},
	{name: "in_flight", to: func(r *Route) any { return (*string)(&r.Route.InFlight) }, def: "wait", enum: []string{"proceed", "wait", "reject"}},
	{name: "wait_timeout", to: func(r *Route) any { return &r.Route.WaitTimeout }, def: idemhook.DefaultWaitTimeout},
	{name: "on_store_error", to: func(r *Route) any { return (*string)(&r.Route.OnStoreError) }, def: "open", enum: []string{"open", "closed"}},
	{name: "provider"}, // read by providerSettings, with the six fields below
	{name: "secret_env"},
	{name: "secrets"},
	{name: "secret_file"},
	{name: "tenants"},
	{name: "provider_options"},
	{name: "tolerance"},
	{name: "max_body", to: func(r *Route) any { return &r.Route.MaxBodyBytes }, def: int64(idemhook.DefaultMaxBodyBytes)},
	{name: "upstream_timeout", to: func(r *Route) any { return &r.UpstreamTimeout }, def: defaultUpstreamTimeout},
	{name: "replay_headers", to: func(r *Route) any { return &r.Route.ReplayHeaders }, check: checkHeaderName},
	{name: "store_statuses"}, // read by route: what idemhook.StorableStatus takes
	{name: "require_key", to: func(r *Route) any { return &r.Route.RequireKey }},
	{name: "share_keys", to: func(r *Route) any { return &r.ShareKeys }},
	{name: "lease", to: func(r *Route) any { return &r.Route.Lease }},
	{name: "max_stored_body"}, // read by route: a size up to 1GiB
	{name: "retry_after", to: func(r *Route) any { return &r.Route.RetryAfter }},
	{name: "deliver", to: func(r *Route) any { return &r.Deliver }, def: DeliverProxy, enum: []string{DeliverProxy, DeliverQueue}},
	{name: "respond_within", to: func(r *Route) any { return &r.RespondWithin }},
	{name: "forward_secret"}, // read by route: a Standard Webhooks key
	{name: "items"},          // items.go
	{name: "filter"},         // filter.go: a CEL expression, compiled by routeFilter
	{name: "accept", sub: acceptSchema.layout()},
	{name: "queue", sub: queueSchema.layout()},
	{name: "destinations", list: destinationSchema.layout()}, // destinations.go
}}

// routeLayout is the structure of a routes: entry; routeFields its fields.
var (
	routeLayout = routeSchema.layout()
	routeFields = routeLayout.names
)

// routeInputs is what the build phase needs of a route the check phase
// read: its entry, and its preset's settings once they are checked.
type routeInputs struct {
	f    values     // the entry's fields
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

// accept returns the fields of the entry's accept: section.
func (in *routeInputs) accept() values { return valuesOf(in.f["accept"].Node) }

// own returns the value of the entry's own field name, or the entry when
// the field is absent or merged from another mapping: an error about a
// merged value points at the route that merges it.
func (in *routeInputs) own(name string) *yaml.Node {
	if v := valueOf(in.node, name); v != nil {
		return v
	}
	return in.node
}

// checkRoutes checks the routes: list of root, the file's mapping, each
// entry and what entries must not share.
func (c *checker) checkRoutes(root *yaml.Node) []Route {
	seq := section(root, "routes")
	switch {
	case seq == nil && c.wrong[valueOf(root, "routes")]:
		return nil // reported by shape
	case seq == nil:
		c.errorf(root, "routes", "missing: the gateway needs at least one route (path, upstream, source)")
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
		in := routeInputs{f: valuesOf(n), at: fmt.Sprintf("routes[%d]", i), node: n, i: len(out)}
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

// checkSource checks a route's source.
func checkSource(v string) error {
	if v == "" || strings.ContainsAny(v, " \t") || !idemhook.ValidSource(v) {
		return fmt.Errorf("invalid source %q: a non-empty label without ':', '@' or spaces, e.g. stone", v)
	}
	return nil
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
	routeSchema.read(c, f, in.node, at, &rc)
	r := &rc.Route
	if vs, ok := c.strList(f["store_statuses"], field("store_statuses")); ok {
		for i, v := range vs {
			st, err := strconv.Atoi(v)
			if err != nil || !idemhook.StorableStatus(st) {
				c.errorf(f["store_statuses"].Content[i], fmt.Sprintf("%s[%d]", field("store_statuses"), i),
					"invalid status %q: want a 3xx or 4xx status to store and replay like a success (2xx always is; 1xx and 5xx never are)", v)
				continue
			}
			r.StoreStatuses = append(r.StoreStatuses, st)
		}
	}
	c.providerSettings(in, &rc)
	c.items(in)
	c.routeFilter(in, &rc)

	if v, ok := c.str(f["max_stored_body"], field("max_stored_body")); ok {
		size, err := parseSize(v)
		switch {
		case err != nil:
			c.errorf(f["max_stored_body"].Node, field("max_stored_body"), "%v", err)
		case size > 1<<30:
			c.errorf(f["max_stored_body"].Node, field("max_stored_body"), "%s is over 1GiB: a stored answer that large would be replayed from the store on every duplicate", v)
		default:
			r.MaxStoredBodyBytes = int(size)
		}
	}

	// Settings that do nothing here are warned about.
	if f["wait_timeout"].Node != nil && r.InFlight != idemhook.InFlightWait {
		c.warnf(c.key(f["wait_timeout"]), field("wait_timeout"), "does nothing with in_flight: %s (only in_flight: wait waits)", r.InFlight)
	}
	if f["retry_after"].Node != nil && r.InFlight != idemhook.InFlightReject && r.OnStoreError != idemhook.StoreErrorClosed {
		c.warnf(c.key(f["retry_after"]), field("retry_after"), "does nothing here: it is the Retry-After of in_flight: reject and of on_store_error: closed")
	}
	if r.MaxBodyBytes > maxBodyWarn {
		c.warnf(in.own("max_body"), field("max_body"), "%d bytes: each delivery buffers its whole body, so 10 concurrent deliveries of that size take %d MiB",
			r.MaxBodyBytes, 10*r.MaxBodyBytes>>20)
	}
	c.delivery(in, &rc)
	c.destinations(in, &rc)
	if v, ok := c.str(f["forward_secret"], field("forward_secret")); ok {
		key, err := parseWebhookSecret(v)
		if err != nil {
			c.errorf(f["forward_secret"].Node, field("forward_secret"), "%v", err)
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
		name, hasProvider = c.str(f["provider"], field("provider"))
	} else if spec != nil {
		spec.Name = cmp.Or(spec.Name, rc.Route.Source)
		name, in.spec = spec.Name, spec
	}
	secrets, secretFile, secretsOK := c.secrets(secretFields{f["secret_env"], f["secrets"], f["secret_file"]}, "route", field, hasProvider)
	rc.SecretFile = secretFile
	tenantsOK := c.tenants(in, rc, hasProvider)
	type option struct {
		key   *yaml.Node
		value string
	}
	var opts []option // in file order
	if on := f["provider_options"].Node; on != nil {
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
	tolerance := c.duration(f["tolerance"], field("tolerance"), 0)

	if !hasProvider {
		for _, o := range []struct {
			name string
			l    leaf
		}{{"secret_env", f["secret_env"]}, {"secrets", f["secrets"]}, {"secret_file", f["secret_file"]}, {"tenants", f["tenants"]}, {"provider_options", f["provider_options"]}, {"tolerance", f["tolerance"]}} {
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
		c.errorf(f["provider"].Node, field("provider"), "unknown provider %q%s (known: %s)", name, didYouMean(name, provider.Names()), strings.Join(provider.Names(), ", "))
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
		node, name := c.key(f["provider"]), "provider"
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

// checkHeaderName checks the name of an HTTP header.
func checkHeaderName(v string) error {
	if !validHeaderName(v) {
		return fmt.Errorf("invalid header name %q", v)
	}
	return nil
}
