package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemhook/idemhook"
	"go.yaml.in/yaml/v3"
)

// A route's items: says where the items of a batched body are, so that
// each runs once (idemhook.Route.Items):
//
//	items:
//	  mode: split            # or filter; default split
//	  paths:
//	    - path: entry[*].changes[*].value.messages[*]
//	      key: id
//	    - path: entry[*].changes[*].value.statuses[*]
//	      key: "{id}:{status}"
//
// A provider with items (whatsapp-cloud, messenger, instagram, sendgrid,
// hubspot) brings its paths: items: {mode: filter} changes only the mode,
// and items: none turns them off (one event per request, as before).

// itemsInput is what check read of a route's items:, for build to merge
// with the preset's.
type itemsInput struct {
	set   bool // items: is in the file
	none  bool // items: none
	mode  idemhook.ItemsMode
	paths []idemhook.ItemPath
	given bool // paths: is in the file (its entries may have been refused)
}

// items checks the route's items:.
func (c *checker) items(in *routeInputs) {
	l := in.f["items"]
	at := join(in.at, "items")
	if l.Node == nil {
		return
	}
	n := resolve(l.Node)
	in.items.set = true
	if n.Kind == yaml.ScalarNode {
		if v, ok := c.str(leaf{n}, at); ok && v != "none" {
			c.errorf(n, at, "expected a mapping (mode:, paths:) or none, got %q", v)
		}
		in.items.none = true
		return
	}
	if n.Kind != yaml.MappingNode {
		c.errorf(n, at, "expected a mapping (mode:, paths:) or none, got %s", describe(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		fp := join(at, k.Value)
		switch k.Value {
		case "mode":
			in.items.mode = idemhook.ItemsMode(c.oneOf(leaf{v}, fp, "split", "split", "filter"))
		case "paths":
			in.items.given = true
			c.itemPaths(in, v, fp)
		default:
			c.errorf(k, fp, "unknown field %q%s (want mode or paths)", k.Value, didYouMean(k.Value, []string{"mode", "paths"}))
		}
	}
}

// itemPaths checks items.paths: a list of {path, key}.
func (c *checker) itemPaths(in *routeInputs, n *yaml.Node, at string) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		c.errorf(n, at, "expected a list of {path, key} entries, got %s", describe(n))
		return
	}
	for i, e := range n.Content {
		e = resolve(e)
		ep := fmt.Sprintf("%s[%d]", at, i)
		if e.Kind != yaml.MappingNode {
			c.errorf(e, ep, "expected {path: ..., key: ...}, got %s", describe(e))
			continue
		}
		var p idemhook.ItemPath
		var pathNode, keyNode *yaml.Node
		for j := 0; j+1 < len(e.Content); j += 2 {
			k, v := resolve(e.Content[j]), resolve(e.Content[j+1])
			switch k.Value {
			case "path":
				p.Path, _ = c.str(leaf{v}, join(ep, "path"))
				pathNode = v
			case "key":
				p.Key, _ = c.str(leaf{v}, join(ep, "key"))
				keyNode = v
			default:
				c.errorf(k, join(ep, k.Value), "unknown field %q (want path and key)", k.Value)
			}
		}
		switch {
		case pathNode == nil:
			c.errorf(e, join(ep, "path"), "missing: where the items are, e.g. entry[*].changes[*].value.messages[*], or [*] for a body that is an array")
			continue
		case keyNode == nil:
			c.errorf(e, join(ep, "key"), `missing: what keys an item, e.g. id, or a template such as "{id}:{status}"`)
			continue
		}
		// The library's own checks, of the path and of the key apart, so
		// that each error names its own line.
		bad := false
		for _, try := range []struct {
			p     idemhook.ItemPath
			node  *yaml.Node
			name  string
			field string
		}{
			{idemhook.ItemPath{Path: p.Path, Key: "id"}, pathNode, "path", "Path"},
			{idemhook.ItemPath{Path: "[*]", Key: p.Key}, keyNode, "key", "Key"},
		} {
			rt := idemhook.Route{Source: "check", Items: &idemhook.Items{Paths: []idemhook.ItemPath{try.p}}}
			var re *idemhook.RouteError
			if err := rt.Validate(); errors.As(err, &re) {
				c.errorf(try.node, join(ep, try.name), "invalid %s %s", try.name, strings.TrimPrefix(re.Reason, "Items.Paths[0]."+try.field+" "))
				bad = true
			}
		}
		if bad {
			continue
		}
		in.items.paths = append(in.items.paths, p)
	}
}

// buildItems sets the route's Items from its items: and its preset's.
func (c *checker) buildItems(in *routeInputs, r *idemhook.Route, provider string) {
	it := in.items
	var preset *idemhook.Items
	if r.Preset != nil {
		preset = r.Preset.Items
	}
	switch {
	case !it.set || it.given && len(it.paths) == 0:
		return // the preset's, if any (Route.Validate takes them); or refused already
	case it.none:
		if r.Preset != nil && r.Preset.Items != nil {
			p := *r.Preset
			p.Items = nil
			r.Preset = &p
		}
		return
	case len(it.paths) > 0:
		r.Items = &idemhook.Items{Paths: it.paths, Mode: it.mode}
	case preset != nil:
		r.Items = &idemhook.Items{Paths: preset.Paths, Mode: it.mode}
	case r.Preset == nil && provider != "":
		// The provider's preset could not be made (its secret is missing,
		// or the name is unknown): that error was reported, and its items
		// are unknown, so "no paths" would mislead.
	default:
		c.errorf(in.own("items"), join(in.at, "items"), "no paths: give items.paths, or a provider whose bodies hold items (hubspot, instagram, messenger, sendgrid, whatsapp-cloud)")
	}
}
