package provider

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/idemhook/idemhook"
)

// TenantParam is the path wildcard [NewTenants] reads the tenant from
// when it is given none: {tenant}, as in "POST /webhooks/stripe/{tenant}".
const TenantParam = "tenant"

// ErrUnknownTenant is the reason of the [*VerifyError] of a delivery whose
// path names no tenant of a [Tenants] (or names none at all, on a route
// whose pattern has no such wildcard).
var ErrUnknownTenant = errors.New("unknown tenant")

// Tenants is one route for many tenants of one provider: a platform that
// receives Stripe for its merchants on /webhooks/stripe/{tenant}, each
// merchant's endpoint signed with a secret of its own. It picks the
// preset, and so the secret, of each delivery by the value of a path
// wildcard ([http.Request.PathValue], which net/http.ServeMux and chi set),
// and scopes the delivery's keys by the tenant alone, so that one tenant's
// answer is never replayed to another:
//
//	idem:<source>@<tenant>:<key>     e.g. idem:stripe@acme:evt_1N...
//
// A delivery for a tenant it doesn't know is answered 401 (outcome
// signature_invalid, reason [ErrUnknownTenant]), and nothing is claimed:
// the check runs before the key is. A delivery signed with another
// tenant's secret is answered 401 the same way, since the secret checked
// is the one of the tenant its path names.
//
// Build one with [NewTenants] and give a route its Preset and Scope with
// [Tenants.Route].
type Tenants struct {
	param   string
	presets map[string]*idemhook.Preset
	names   []string
	preset  *idemhook.Preset
}

// NewTenants returns the Tenants of presets, one per tenant name, the
// tenant of a delivery being the value of the route pattern's wildcard
// param ("" means [TenantParam]).
//
// A tenant name is what its path segment holds: 1 to 64 letters, digits,
// '.', '_', '-' or '~', and not "." or "..". The presets are those of one
// provider, built with each tenant's secrets (by [New], [Spec.Preset] or by
// hand): their Name, DuplicateStatus, SuccessStatus, SuccessBody,
// RetryWindow and Items must be equal, and either all or
// none must have a Key, since a route has one of each. Each delivery is
// verified, keyed and answered (handshakes) by its tenant's preset.
func NewTenants(param string, presets map[string]*idemhook.Preset) (*Tenants, error) {
	if param == "" {
		param = TenantParam
	}
	if !validParam(param) {
		return nil, fmt.Errorf("provider: NewTenants: invalid wildcard name %q: want a Go identifier, as in {tenant}", param)
	}
	if len(presets) == 0 {
		return nil, errors.New("provider: NewTenants: no tenant: give at least one tenant's preset")
	}
	t := &Tenants{param: param, presets: make(map[string]*idemhook.Preset, len(presets))}
	for name, p := range presets {
		if err := CheckTenantName(name); err != nil {
			return nil, fmt.Errorf("provider: NewTenants: %w", err)
		}
		if p == nil {
			return nil, fmt.Errorf("provider: NewTenants: tenant %q has no preset", name)
		}
		t.presets[name] = p
		t.names = append(t.names, name)
	}
	slices.Sort(t.names)
	first := t.presets[t.names[0]]
	for _, name := range t.names[1:] {
		if field := presetDiff(first, t.presets[name]); field != "" {
			return nil, fmt.Errorf("provider: NewTenants: the presets of tenants %q and %q differ in %s: a route has one; give every tenant a preset of the same provider, differing in its secrets only", t.names[0], name, field)
		}
	}
	p := &idemhook.Preset{
		Name:            first.Name,
		DuplicateStatus: first.DuplicateStatus,
		SuccessStatus:   first.SuccessStatus,
		SuccessBody:     first.SuccessBody,
		RetryWindow:     first.RetryWindow,
		Items:           first.Items,
		Verify: func(r *http.Request, body []byte) error {
			tp, err := t.pick(r)
			if err != nil {
				return err
			}
			if tp.Verify == nil {
				return nil
			}
			return tp.Verify(r, body)
		},
	}
	if first.Key != nil {
		p.Key = func(r *http.Request, body []byte) (string, error) {
			tp, err := t.pick(r)
			if err != nil {
				return "", err
			}
			return tp.Key(r, body)
		}
	}
	if slices.ContainsFunc(t.names, func(n string) bool { return t.presets[n].Handshake != nil }) {
		p.Handshake = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			tp, err := t.pick(r)
			if err != nil || tp.Handshake == nil {
				return false
			}
			return tp.Handshake(w, r, body)
		}
	}
	t.preset = p
	return t, nil
}

// Preset returns the preset that verifies, keys and answers each delivery
// by its tenant's preset. A route needs [Tenants.Scope] with it (see
// [Tenants.Route]).
func (t *Tenants) Preset() *idemhook.Preset { return t.preset }

// Scope returns the tenant of r, the value of its path wildcard: the
// scope of its keys, "idem:<source>@<tenant>:<key>". For a Route.Scope.
func (t *Tenants) Scope(r *http.Request) string { return r.PathValue(t.param) }

// Route returns rt with the Preset and the Scope of t: the route for all
// the tenants, to serve on a pattern with the wildcard t reads.
func (t *Tenants) Route(rt idemhook.Route) idemhook.Route {
	rt.Preset = t.preset
	rt.Scope = t.Scope
	return rt
}

// Names returns the tenants, sorted.
func (t *Tenants) Names() []string { return slices.Clone(t.names) }

// Param returns the name of the path wildcard that names the tenant.
func (t *Tenants) Param() string { return t.param }

// pick returns the preset of r's tenant, or the *VerifyError of an
// unknown one.
func (t *Tenants) pick(r *http.Request) (*idemhook.Preset, error) {
	v := r.PathValue(t.param)
	if p, ok := t.presets[v]; ok {
		return p, nil
	}
	detail := fmt.Sprintf("the path's {%s} is %.64q", t.param, v)
	if v == "" {
		detail = fmt.Sprintf("the path has no {%s}: serve the route on a pattern with that wildcard, e.g. POST /webhooks/%s/{%s}", t.param, t.preset.Name, t.param)
	}
	return nil, &VerifyError{Preset: t.preset.Name, Err: ErrUnknownTenant, Detail: detail}
}

// maxTenantName is the longest tenant name: a path segment, and a part of
// every key.
const maxTenantName = 64

// CheckTenantName reports whether name can be a tenant of [NewTenants]: 1
// to 64 letters, digits, '.', '_', '-' or '~' (the characters a path
// segment holds as they are), and not "." or "..".
func CheckTenantName(name string) error {
	switch {
	case name == "":
		return errors.New("empty tenant name")
	case len(name) > maxTenantName:
		return fmt.Errorf("tenant name %.20q... is longer than %d bytes", name, maxTenantName)
	case name == "." || name == "..":
		return fmt.Errorf("invalid tenant name %q: not a path segment of its own", name)
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._-~", c) >= 0) {
			return fmt.Errorf("invalid tenant name %q: only letters, digits, '.', '_', '-' and '~'", name)
		}
	}
	return nil
}

// validParam reports whether name can be a ServeMux wildcard's name.
func validParam(name string) bool {
	for i, c := range name {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return name != ""
}

// presetDiff names the first field in which a and b, two tenants'
// presets, differ where a route can have only one value, or returns "".
func presetDiff(a, b *idemhook.Preset) string {
	switch {
	case a.Name != b.Name:
		return fmt.Sprintf("Name (%q, %q)", a.Name, b.Name)
	case a.DuplicateStatus != b.DuplicateStatus:
		return "DuplicateStatus"
	case a.SuccessStatus != b.SuccessStatus:
		return "SuccessStatus"
	case a.SuccessBody != b.SuccessBody:
		return "SuccessBody"
	case a.RetryWindow != b.RetryWindow:
		return "RetryWindow"
	case !reflect.DeepEqual(a.Items, b.Items):
		return "Items"
	case (a.Key == nil) != (b.Key == nil):
		return "Key (one has none)"
	}
	return ""
}
