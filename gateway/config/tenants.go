package config

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
	"go.yaml.in/yaml/v3"
)

// A route whose path ends in /{tenant} serves many tenants of one
// provider (docs/gateway.md, "One route for many tenants"): the path
// segment names the tenant, the keys are scoped by it
// (idem:<source>@<tenant>:<key>), and tenants: gives each tenant its own
// secrets, read as a route's own (secret_env, secrets, secret_file; a
// secret_file again on every reload).

// tenantWildcard is the one wildcard a route's path may have, as its last
// segment.
const tenantWildcard = "{" + provider.TenantParam + "}"

// Tenant is one entry of a route's tenants:.
type Tenant struct {
	Name        string
	Line        int    // line of the tenant's name in the file
	SecretFile  string // its secret_file, or ""
	SecretCount int    // how many secrets it accepts
}

// IsTenantPath reports whether path ends in /{tenant}: a route for many
// tenants, whose keys are scoped by the tenant.
func IsTenantPath(path string) bool {
	return strings.HasSuffix(path, "/"+tenantWildcard)
}

// TenantScope is the scope of a route whose path ends in /{tenant}: the
// tenant, so that its keys are idem:<source>@<tenant>:<key>.
func TenantScope(r *http.Request) string { return r.PathValue(provider.TenantParam) }

// tenantInput is what the build phase needs of one tenant.
type tenantInput struct {
	name    string
	key     *yaml.Node // the tenant's name in the file
	fields  secretFields
	secrets []string
}

// tenantFields are the fields of a tenants: entry.
var tenantFields = []string{"secret_env", "secrets", "secret_file"}

// tenants checks the route's tenants:. It reports false when a problem
// was reported. Without a provider it does nothing: the caller refuses
// tenants: as it refuses the route's own secrets.
func (c *checker) tenants(in *routeInputs, rc *Route, hasProvider bool) bool {
	f := in.f
	field := func(name string) string { return join(in.at, name) }
	if IsTenantPath(rc.Path) {
		rc.Route.Scope = TenantScope
	}
	if f["tenants"].Node == nil || !hasProvider {
		return true
	}
	ok := true
	if rc.Path != "" && !IsTenantPath(rc.Path) {
		c.errorf(c.key(f["tenants"]), field("tenants"), "needs a path ending in /{tenant}, whose value picks the tenant's secrets: path %q has none (e.g. path: %s/{tenant})", rc.Path, strings.TrimSuffix(rc.Path, "/"))
		ok = false
	}
	for _, o := range []struct {
		name string
		l    leaf
	}{{"secret_env", f["secret_env"]}, {"secrets", f["secrets"]}, {"secret_file", f["secret_file"]}} {
		if o.l.Node != nil {
			c.errorf(c.key(o.l), field(o.name), "with tenants:, each tenant gives its own secrets: move %s into the tenants' entries", o.name)
			ok = false
		}
	}
	tn := resolve(f["tenants"].Node)
	switch {
	case tn.Kind != yaml.MappingNode:
		c.errorf(tn, field("tenants"), "expected a mapping of tenants (acme: {secret_env: STRIPE_SECRET_ACME} lines), got %s", describe(tn))
		return false
	case len(tn.Content) == 0:
		c.errorf(tn, field("tenants"), "empty: give at least one tenant (acme: {secret_env: STRIPE_SECRET_ACME}), or remove tenants:")
		return false
	}
	first := map[string]int{}
	for i := 0; i+1 < len(tn.Content); i += 2 {
		k, v := resolve(tn.Content[i]), resolve(tn.Content[i+1])
		at := join(field("tenants"), k.Value)
		if line, dup := first[k.Value]; dup {
			c.errorf(k, at, "tenant given twice (first at line %d)", line)
			ok = false
			continue
		}
		first[k.Value] = k.Line
		if err := provider.CheckTenantName(k.Value); err != nil || k.Kind != yaml.ScalarNode {
			if err == nil {
				err = fmt.Errorf("expected a tenant's name, got %s", describe(k))
			}
			c.errorf(k, at, "%v", err)
			ok = false
			continue
		}
		if v.Kind != yaml.MappingNode {
			c.errorf(v, at, "expected the tenant's secrets as a mapping: {secret_env: NAME}, {secret_file: FILE} or {secrets: [...]}, got %s", describe(v))
			ok = false
			continue
		}
		sf, good := c.tenantSecretFields(v, at)
		secrets, file, read := c.secrets(sf, "tenant", func(name string) string { return join(at, name) }, true)
		switch {
		case !good || !read:
			ok = false
			continue
		case strings.Join(secrets, "") == "":
			c.errorf(k, at, "tenant %s has no secret: give secret_env: NAME, secret_file: FILE (one secret per line, read again on every reload) or secrets: [...]", k.Value)
			ok = false
			continue
		}
		in.tenants = append(in.tenants, tenantInput{name: k.Value, key: k, fields: sf, secrets: secrets})
		rc.Tenants = append(rc.Tenants, Tenant{Name: k.Value, Line: k.Line, SecretFile: file, SecretCount: len(secrets)})
	}
	return ok
}

// tenantSecretFields reads the fields of one tenants: entry, v, at at.
func (c *checker) tenantSecretFields(v *yaml.Node, at string) (sf secretFields, good bool) {
	good = true
	seen := map[string]int{}
	for j := 0; j+1 < len(v.Content); j += 2 {
		k, val := resolve(v.Content[j]), leaf{resolve(v.Content[j+1])}
		if isNull(val.Node) {
			val.Node = nil
		} else {
			c.keys[val.Node] = k
		}
		if line, dup := seen[k.Value]; dup {
			c.errorf(k, join(at, k.Value), "field given twice (first at line %d)", line)
			good = false
			continue
		}
		seen[k.Value] = k.Line
		switch k.Value {
		case "secret_env":
			sf.Env = val
		case "secrets":
			sf.Secrets = val
		case "secret_file":
			sf.File = val
		default:
			c.errorf(k, join(at, k.Value), "unknown field %q%s (known: %s)", k.Value, didYouMean(k.Value, tenantFields), strings.Join(tenantFields, ", "))
			good = false
		}
	}
	return sf, good
}

// buildTenants builds the preset of each tenant of the route and the
// route's preset that picks among them, or reports why it can't.
func (c *checker) buildTenants(in *routeInputs, rc *Route) *idemhook.Preset {
	presets := make(map[string]*idemhook.Preset, len(in.tenants))
	good := true
	for _, t := range in.tenants {
		tin := *in
		tin.config.Secrets = t.secrets
		p, err := tin.newPreset(rc.Provider)
		if err != nil {
			c.tenantPresetError(in, t, err)
			good = false
			continue
		}
		presets[t.name] = p
	}
	if !good {
		return nil
	}
	tenants, err := provider.NewTenants(provider.TenantParam, presets)
	if err != nil {
		c.errorf(c.key(in.f["tenants"]), join(in.at, "tenants"), "%v", err)
		return nil
	}
	return tenants.Preset()
}

// tenantPresetError reports an error of building tenant t's preset: at
// the tenant's secret when it is about a secret, else as the route's.
func (c *checker) tenantPresetError(in *routeInputs, t tenantInput, err error) {
	var se *provider.SecretError
	if !errors.As(err, &se) {
		c.presetError(in, err)
		return
	}
	at := join(join(in.at, "tenants"), t.name)
	node, field := t.key, at
	switch i := se.Index; {
	case t.fields.File.Node != nil:
		node, field = t.fields.File.Node, join(at, "secret_file")
	case t.fields.Env.Node != nil && i == 0:
		node, field = t.fields.Env.Node, join(at, "secret_env")
	case t.fields.Secrets.Node != nil:
		if t.fields.Env.Node != nil {
			i--
		}
		if n := t.fields.Secrets.Node; n.Kind == yaml.SequenceNode && i >= 0 && i < len(n.Content) {
			node, field = n.Content[i], fmt.Sprintf("%s[%d]", join(at, "secrets"), i)
		}
	}
	c.errorf(node, field, "%v", err)
}
