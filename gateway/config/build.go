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

// build is the last phase of Parse. For each route it creates the
// provider's preset, runs the library's own checks of the route (the ones
// Middleware.Route makes when serve starts, so that check refuses exactly
// what serve would), and sets the TTL from the preset when the file sets
// none. Problems are reported at the line of the field they are about,
// read from the typed errors of the provider and the library.
func (c *checker) build(cfg *Config) {
	for _, in := range c.routes {
		rc := &cfg.Routes[in.i]
		r := &rc.Route
		switch {
		case in.preset && len(in.tenants) > 0:
			r.Preset = c.buildTenants(&in, rc)
		case in.preset:
			p, err := in.newPreset(rc.Provider)
			if err != nil {
				c.presetError(&in, err)
			}
			r.Preset = p
		}
		c.buildItems(&in, r, rc.Provider)
		c.filterItems(&in, rc)
		if err := r.Validate(); err != nil {
			c.routeError(&in, r, err)
		}
		if rc.Queued() {
			c.respondWithinTimeout(&in, rc)
			if r.Preset != nil && r.Preset.DuplicateStatus != 0 && in.accept()["status"].Node == nil {
				rc.Accept.Status = r.Preset.DuplicateStatus // what the provider counts as success
			}
			if r.Preset != nil && r.Preset.SuccessBody != "" && in.accept()["body"].Node == nil {
				// The body the provider expects with a success (Adyen's
				// "[accepted]"), as the gateway answers it on the proxy path.
				rc.Accept.Body = []byte(r.Preset.SuccessBody)
				if rc.Accept.Header.Get("Content-Type") == "application/json" && !acceptHeaderSet(&in, "Content-Type") {
					rc.Accept.Header.Set("Content-Type", "text/plain; charset=utf-8")
				}
			}
			c.queueTTL(&in, rc)
			if rc.Deliver == DeliverQueue {
				// A batch of items is answered as one event is: one
				// route, one accept answer.
				r.ItemsSuccess = &idemhook.Answer{Status: rc.Accept.Status, Header: rc.Accept.Header, Body: rc.Accept.Body}
			}
		}
		if r.TTL == 0 {
			r.TTL = r.Preset.DefaultTTL()
		} else if r.Preset != nil && r.TTL < r.Preset.RetryWindow {
			c.warnf(in.own("ttl"), join(in.at, "ttl"), "%s is shorter than %s's retry window (%s): a retry after the TTL runs the event again; the preset's default is %s",
				FormatDuration(r.TTL), r.Preset.Name, FormatDuration(r.Preset.RetryWindow), FormatDuration(r.Preset.DefaultTTL()))
		}
	}
}

// presetError reports an error of provider.New at the setting it names.
func (c *checker) presetError(in *routeInputs, err error) {
	node, field := in.f["provider"].Node, join(in.at, "provider")
	var oe *provider.OptionError
	var te *provider.ToleranceError
	var se *provider.SecretError
	if c.specError(in, err) {
		return
	}
	switch {
	case errors.As(err, &se):
		node, field = in.secretAt(se.Index, node, field)
	case errors.As(err, &oe) && in.optionKeys[oe.Option] != nil:
		node, field = in.optionKeys[oe.Option], join(join(in.at, "provider_options"), oe.Option)
	case errors.As(err, &oe) && in.f["provider_options"].Node != nil:
		node, field = in.f["provider_options"].Node, join(in.at, "provider_options")
	case errors.As(err, &te) && in.f["tolerance"].Node != nil:
		node, field = in.f["tolerance"].Node, join(in.at, "tolerance")
	}
	c.errorf(node, field, "%v", err)
}

// routeFieldNames maps the fields of idemhook.Route to those of a routes:
// entry.
var routeFieldNames = map[string]string{
	"Source": "source", "TTL": "ttl", "WaitTimeout": "wait_timeout", "RetryAfter": "retry_after",
	"Lease": "lease", "MaxBodyBytes": "max_body", "MaxStoredBodyBytes": "max_stored_body",
	"InFlight": "in_flight", "OnStoreError": "on_store_error", "StoreStatuses": "store_statuses",
	"Preset": "provider",
}

// routeError reports an error of Middleware.Route at the field it names.
func (c *checker) routeError(in *routeInputs, r *idemhook.Route, err error) {
	var re *idemhook.RouteError
	if !errors.As(err, &re) {
		c.errorf(in.node, in.at, "%v", err)
		return
	}
	if re.Field == "Source" {
		return // the check refused it at the field's line, by the same rule (idemhook.ValidSource)
	}
	if l := in.f["replay_headers"]; re.Field == "ReplayHeaders" && l.Node != nil && re.Index < len(l.Content) {
		c.errorf(l.Content[re.Index], fmt.Sprintf("%s[%d]", join(in.at, "replay_headers"), re.Index),
			"%s is never stored or replayed (Set-Cookie, Authorization, hop-by-hop headers and Content-Length never are): remove it",
			http.CanonicalHeaderKey(r.ReplayHeaders[re.Index]))
		return
	}
	name, ok := routeFieldNames[re.Field]
	if !ok {
		c.errorf(in.node, in.at, "%s", re.Reason)
		return
	}
	c.errorf(in.own(name), join(in.at, name), "%s", re.Reason)
}

// acceptHeaderSet reports whether the route's accept.headers names the
// header name.
func acceptHeaderSet(in *routeInputs, name string) bool {
	n := in.accept()["headers"].Node
	if n != nil {
		n = resolve(n)
	}
	for i := 0; n != nil && n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if strings.EqualFold(resolve(n.Content[i]).Value, name) {
			return true
		}
	}
	return false
}

// secretAt returns the node and field of the route's secret i, counted as
// providerSettings lists them (secret_env first, then secrets, or the
// secret_file's lines), or node and field when it can't tell.
func (in *routeInputs) secretAt(i int, node *yaml.Node, field string) (*yaml.Node, string) {
	if in.f["secret_file"].Node != nil {
		return in.f["secret_file"].Node, join(in.at, "secret_file")
	}
	if in.f["secret_env"].Node != nil {
		if i == 0 {
			return in.f["secret_env"].Node, join(in.at, "secret_env")
		}
		i--
	}
	if n := in.f["secrets"].Node; n != nil {
		n = resolve(n)
		if n.Kind == yaml.SequenceNode && i < len(n.Content) {
			return n.Content[i], fmt.Sprintf("%s[%d]", join(in.at, "secrets"), i)
		}
	}
	return node, field
}
