package config

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
	"go.yaml.in/yaml/v3"
)

// A route's provider: is a preset's name, or a mapping that describes the
// provider (a provider.Spec): its signature, key, success answer and
// handshakes, so that any provider is configured without Go code
// (docs/gateway.md, "Any provider from YAML"). The mapping is read here,
// field by field, each problem reported at its line; the spec's own checks
// (provider.Spec.Preset) run in the build phase and are reported at the
// line of the field they name.

// specNodes maps the fields of a decoded spec, by the path a
// provider.SpecError names ("signature.timestamp.format"), to their
// nodes.
type specNodes map[string]*yaml.Node

// providerSpec reads the route's provider: when it is a mapping. It
// reports whether it is one, and returns the spec: its fields that could
// not be read are reported and left empty.
func (c *checker) providerSpec(in *routeInputs) (spec *provider.Spec, isSpec bool) {
	n := in.f["provider"].Node
	if n == nil {
		return nil, false
	}
	if n = resolve(n); n.Kind != yaml.MappingNode {
		return nil, false
	}
	var s provider.Spec
	in.specNodes = specNodes{"": n}
	// The spec is built even when some of its fields could not be read
	// (reported here, and left out of it), so that the problems of the
	// others are reported at once: a misspelt field hides nothing.
	c.decodeSpec(n, reflect.ValueOf(&s).Elem(), join(in.at, "provider"), "", in.specNodes)
	return &s, true
}

// ParseProviderSpec reads a provider spec from data, a YAML mapping (the
// provider: mapping of a route), as the gateway reads it, ${VAR} expanded
// with getenv. Its problems are an [Errors] naming name and the lines.
// The spec's own checks run when its preset is built
// (provider.Spec.Preset).
func ParseProviderSpec(name string, data []byte, getenv func(string) string) (provider.Spec, error) {
	c := &checker{file: name, getenv: getenv, keys: map[*yaml.Node]*yaml.Node{}, wrong: map[*yaml.Node]bool{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return provider.Spec{}, Errors{yamlErrorAt(name, data, err)}
	}
	var s provider.Spec
	switch {
	case len(doc.Content) == 0:
		c.errorf(nil, "", "empty: want a provider spec (signature:, key:, ...)")
	case resolve(doc.Content[0]).Kind != yaml.MappingNode:
		c.errorf(doc.Content[0], "", "expected a mapping (name: value lines), got %s", describe(resolve(doc.Content[0])))
	default:
		c.decodeSpec(resolve(doc.Content[0]), reflect.ValueOf(&s).Elem(), "", "", specNodes{})
	}
	if len(c.errs) > 0 {
		return provider.Spec{}, c.errs
	}
	return s, nil
}

// decodeSpec decodes n into v, a field of a provider.Spec, at the field
// path at (for errors) and the spec path path (for nodes).
func (c *checker) decodeSpec(n *yaml.Node, v reflect.Value, at, path string, nodes specNodes) {
	n = resolve(n)
	nodes[path] = n
	if isNull(n) {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if f, ok := shorthandField(v.Type()); ok {
				c.decodeSpec(n, v.FieldByIndex(f.Index), at, join(path, yamlName(f)), nodes)
				return
			}
			c.errorf(n, at, "expected a mapping (name: value lines), got %s", describe(n))
			return
		}
		fields := map[string]reflect.StructField{}
		var names []string
		for f := range v.Type().Fields() {
			name := yamlName(f)
			fields[name] = f
			names = append(names, name)
		}
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := resolve(n.Content[i]), n.Content[i+1]
			f, known := fields[k.Value]
			switch {
			case k.Tag == "!!merge":
				c.errorf(k, at, "<< merges are not read inside a provider spec: give the whole provider: mapping an anchor (&name) and write provider: *name")
			case !known:
				c.errorf(k, join(at, k.Value), "unknown field %q%s (known: %s)", k.Value, didYouMean(k.Value, names), strings.Join(names, ", "))
			case first[k.Value] != 0:
				c.errorf(k, join(at, k.Value), "field given twice (first at line %d)", first[k.Value])
			default:
				first[k.Value] = k.Line
				c.keys[resolve(val)] = k
				c.decodeSpec(val, v.FieldByIndex(f.Index), join(at, k.Value), join(path, k.Value), nodes)
			}
		}
	case reflect.Slice:
		items := []*yaml.Node{n}
		switch {
		case n.Kind == yaml.SequenceNode:
			items = n.Content
		case v.Type().Elem().Kind() != reflect.String:
			c.errorf(n, at, "expected a list (- lines), got %s", describe(n))
			return
		}
		out := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, e := range items {
			c.decodeSpec(e, out.Index(i), fmt.Sprintf("%s[%d]", at, i), fmt.Sprintf("%s[%d]", path, i), nodes)
		}
		v.Set(out)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.errorf(n, at, "expected a mapping (name: value lines), got %s", describe(n))
			return
		}
		m := reflect.MakeMap(v.Type())
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode {
				c.errorf(k, at, "expected a name, got %s", describe(k))
				continue
			}
			if line := first[k.Value]; line != 0 {
				c.errorf(k, join(at, k.Value), "given twice (first at line %d)", line)
				continue
			}
			first[k.Value] = k.Line
			e := reflect.New(v.Type().Elem()).Elem()
			c.decodeSpec(n.Content[i+1], e, join(at, k.Value), join(path, k.Value), nodes)
			m.SetMapIndex(reflect.ValueOf(k.Value), e)
		}
		v.Set(m)
	case reflect.Interface: // a handshake's answer.json: any JSON value
		if a, ok := c.decodeJSONValue(n, at, path, nodes); ok && a != nil {
			v.Set(reflect.ValueOf(a))
		}
	default:
		s, ok := c.str(leaf{n}, at)
		if !ok {
			return
		}
		switch {
		case v.Type() == reflect.TypeFor[time.Duration]():
			if s == "none" && lastName(at) == "tolerance" {
				v.SetInt(int64(provider.NoTolerance))
				return
			}
			d, err := parseDuration(s)
			if err == nil && d <= 0 {
				err = fmt.Errorf("must be positive, got %q", s)
			}
			if err != nil {
				c.errorf(n, at, "%v", err)
				return
			}
			v.SetInt(int64(d))
		case v.Kind() == reflect.String:
			v.SetString(s)
		case v.Kind() == reflect.Int:
			i, err := strconv.Atoi(s)
			if err != nil {
				c.errorf(n, at, "want a whole number, got %q", s)
				return
			}
			v.SetInt(int64(i))
		case v.Kind() == reflect.Bool:
			switch s {
			case "true", "false":
				v.SetBool(s == "true")
			default:
				c.errorf(n, at, "invalid %s %q (want true or false)", lastName(at), s)
			}
		}
	}
}

// decodeJSONValue reads n as a JSON value with its YAML type: a quoted or
// plain string (${VAR} expanded), a number, a boolean, null, a list or a
// mapping (map[string]any, []any). It reports whether n could be read.
func (c *checker) decodeJSONValue(n *yaml.Node, at, path string, nodes specNodes) (any, bool) {
	n = resolve(n)
	nodes[path] = n
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		first := map[string]int{}
		ok := true
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				c.errorf(k, at, "expected a name, got %s", describe(k))
				ok = false
				continue
			}
			if line := first[k.Value]; line != 0 {
				c.errorf(k, join(at, k.Value), "given twice (first at line %d)", line)
				ok = false
				continue
			}
			first[k.Value] = k.Line
			e, eok := c.decodeJSONValue(n.Content[i+1], join(at, k.Value), join(path, k.Value), nodes)
			m[k.Value], ok = e, ok && eok
		}
		return m, ok
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		ok := true
		for i, e := range n.Content {
			var eok bool
			l[i], eok = c.decodeJSONValue(e, fmt.Sprintf("%s[%d]", at, i), fmt.Sprintf("%s[%d]", path, i), nodes)
			ok = ok && eok
		}
		return l, ok
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			return c.str(leaf{n}, at)
		}
		var v any
		if err := n.Decode(&v); err != nil {
			c.errorf(n, at, "%v", err)
			return nil, false
		}
		switch v.(type) {
		case nil, bool, int, int64, uint64, float64:
			return v, true
		}
		c.errorf(n, at, "%s is not a JSON value (a string, number, boolean or null)", describe(n))
		return nil, false
	}
	c.errorf(n, at, "expected a JSON value, got %s", describe(n))
	return nil, false
}

// yamlName is the name a file gives the field f.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// shorthandField returns the field of t a value that is not a mapping
// fills (key: "{json:id}" for key: {templates: ["{json:id}"]}).
func shorthandField(t reflect.Type) (reflect.StructField, bool) {
	for f := range t.Fields() {
		if _, opts, _ := strings.Cut(f.Tag.Get("yaml"), ","); opts == "shorthand" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// specNode returns the node of the spec's field path, or of its nearest
// ancestor the file gives, and that ancestor's path.
func (nodes specNodes) at(path string) (*yaml.Node, string) {
	for p := path; ; {
		if n := nodes[p]; n != nil {
			return n, p
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			if n := nodes[""]; n != nil {
				return n, ""
			}
			return nil, ""
		}
		p = p[:i]
	}
}

// specError reports err, an error of provider.Spec.Preset, at the field of
// the route's provider: spec it names; each of several at its own.
func (c *checker) specError(in *routeInputs, err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok && in.spec != nil {
		for _, e := range j.Unwrap() {
			c.presetError(in, e) // each at its own line
		}
		return true
	}
	var se *provider.SpecError
	if !errors.As(err, &se) {
		return false
	}
	n, p := in.specNodes.at(se.Field)
	for p != "" && p == se.Field {
		// A value given in short (key: "{json:id}" for key.templates[0])
		// is named as written.
		parent := p[:max(0, strings.LastIndexAny(p, ".["))]
		if in.specNodes[parent] != n {
			break
		}
		p, se = parent, &provider.SpecError{Spec: se.Spec, Field: parent, Reason: se.Reason}
	}
	field := join(join(in.at, "provider"), p)
	for _, e := range c.errs {
		if e.Field == field || strings.HasPrefix(field, e.Field+".") || strings.HasPrefix(field, e.Field+"[") {
			return true // the field could not be read: reported as such
		}
	}
	if p != se.Field { // absent: at its parent's name, the field named in full
		field = join(join(in.at, "provider"), se.Field)
		if k := c.keys[n]; k != nil {
			n = k
		}
	}
	c.errorf(n, field, "%s", se.Reason)
	return true
}

// specOptions reports (and refuses) provider_options beside a provider
// spec: its settings are in its own mapping.
func (c *checker) specOptions(in *routeInputs) bool {
	if l := in.f["provider_options"]; l.Node != nil {
		c.errorf(c.key(l), join(in.at, "provider_options"), "is for a preset named by provider:; a provider spec takes its settings in its own mapping (a handshake's verify_token, ...): remove provider_options")
		return true
	}
	return false
}

// newPreset builds the route's preset: from its spec, or the preset its
// provider: names.
func (in *routeInputs) newPreset(name string) (*idemhook.Preset, error) {
	if in.spec != nil {
		return in.spec.Preset(in.config)
	}
	return provider.New(name, in.config)
}

// responseTimeout is how long the route's provider waits for an answer:
// its spec's response_timeout, or that of the preset its provider: names.
func (in *routeInputs) responseTimeout(name string) time.Duration {
	if in.spec != nil {
		return in.spec.ResponseTimeout
	}
	return provider.ResponseTimeout(name)
}
