package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/idemhook/idemhook/internal/suggest"
)

// A template is a text of a provider [Spec] with placeholders; its syntax
// is in Spec's documentation.
type template struct {
	src   string
	parts []tpart
}

// tpart is a literal, a placeholder or an optional group of parts.
type tpart struct {
	lit   string
	ph    *placeholder
	group []tpart
}

type placeholder struct {
	text    string // as written, for errors
	src     string // body, timestamp, header, ...
	arg     string
	path    []step // json, raw, item
	filters []filter
}

type filter struct {
	name string
	n    int // first:N
}

// The placeholders of templates, and the filters.
var (
	placeholderNames = []string{"body", "timestamp", "method", "url", "header", "query", "form", "form_sorted", "json", "raw", "item"}
	filterNames      = []string{"lower", "upper", "trim", "sha256", "first:N", "hmac"}
)

// parseTemplate parses src. allowed are the placeholders the template may
// use (a subset of placeholderNames); hmac says whether the hmac filter may
// be used.
func parseTemplate(src string, allowed []string, hmac bool) (*template, error) {
	t := &template{src: src}
	var cur *[]tpart = &t.parts
	var group []tpart
	inGroup := false
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			*cur = append(*cur, tpart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '\\':
			if i+1 == len(src) {
				return nil, fmt.Errorf("%q ends with a lone \\ (write \\\\ for a backslash)", src)
			}
			i++
			lit.WriteByte(src[i])
		case '{':
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%q: { at byte %d is not closed by }", src, i)
			}
			ph, err := parsePlaceholder(src[i:i+end+1], allowed, hmac)
			if err != nil {
				return nil, err
			}
			flush()
			*cur = append(*cur, tpart{ph: ph})
			i += end
		case '}':
			return nil, fmt.Errorf("%q: } at byte %d closes nothing (write \\} for the character)", src, i)
		case '[':
			if inGroup {
				return nil, fmt.Errorf("%q: optional parts [...] do not nest", src)
			}
			flush()
			inGroup, group, cur = true, nil, &group
		case ']':
			if !inGroup {
				return nil, fmt.Errorf("%q: ] at byte %d closes nothing (write \\] for the character)", src, i)
			}
			flush()
			if !slices.ContainsFunc(group, func(p tpart) bool { return p.ph != nil }) {
				return nil, fmt.Errorf("%q: an optional part [...] without a placeholder is never left out", src)
			}
			inGroup, cur = false, &t.parts
			t.parts = append(t.parts, tpart{group: group})
		default:
			lit.WriteByte(c)
		}
	}
	if inGroup {
		return nil, fmt.Errorf("%q: [ is not closed by ]", src)
	}
	flush()
	return t, nil
}

func parsePlaceholder(text string, allowed []string, hmac bool) (*placeholder, error) {
	inner := text[1 : len(text)-1]
	fs := strings.Split(inner, "|")
	ph := &placeholder{text: text}
	ph.src, ph.arg, _ = strings.Cut(strings.TrimSpace(fs[0]), ":")
	if !slices.Contains(allowed, ph.src) {
		hint := suggest.DidYouMean(ph.src, allowed)
		if hint == "" && slices.Contains(placeholderNames, ph.src) {
			hint = " (not allowed here)"
		}
		return nil, fmt.Errorf("unknown placeholder %s here%s (known: %s)", text, hint, braced(allowed))
	}
	switch ph.src {
	case "body", "timestamp", "method", "url", "form_sorted":
		if ph.arg != "" {
			return nil, fmt.Errorf("%s: {%s} takes no argument", text, ph.src)
		}
	case "header", "query", "form":
		if ph.arg == "" {
			return nil, fmt.Errorf("%s: name the %s, e.g. {%s:%s}", text, ph.src, ph.src, map[string]string{"header": "X-Event-Id", "query": "id", "form": "MessageSid"}[ph.src])
		}
		if ph.src == "header" && !validHeaderName(ph.arg) {
			return nil, fmt.Errorf("%s: %q is not a header name", text, ph.arg)
		}
	case "json", "raw", "item":
		path, err := parsePath(ph.arg)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", text, err)
		}
		if slices.ContainsFunc(path, func(s step) bool { return s.wildcard }) {
			return nil, fmt.Errorf("%s: [*] selects several values; a placeholder takes one (key.single takes a path with [*])", text)
		}
		ph.path = path
	}
	for _, f := range fs[1:] {
		name, arg, _ := strings.Cut(strings.TrimSpace(f), ":")
		fl := filter{name: name}
		switch name {
		case "lower", "upper", "trim", "sha256":
		case "hmac":
			if !hmac {
				return nil, fmt.Errorf("%s: the hmac filter is for a handshake's answer with an HMAC signature", text)
			}
		case "first":
			n, err := strconv.Atoi(arg)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("%s: |first:N takes a positive whole number", text)
			}
			fl.n = n
		default:
			return nil, fmt.Errorf("%s: unknown filter %q%s (known: %s)", text, name, suggest.DidYouMean(name, []string{"lower", "upper", "trim", "sha256", "first", "hmac"}), strings.Join(filterNames, ", "))
		}
		ph.filters = append(ph.filters, fl)
	}
	return ph, nil
}

func braced(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		switch n {
		case "body", "timestamp", "method", "url", "form_sorted":
			out[i] = "{" + n + "}"
		default:
			out[i] = "{" + n + ":...}"
		}
	}
	return strings.Join(out, ", ")
}

// validHeaderName reports whether name is an HTTP header name (an RFC 9110
// token).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// required returns the placeholders of source src outside optional parts:
// the headers and body fields a signature check requires.
func (t *template) required(src string) []*placeholder {
	var out []*placeholder
	for _, p := range t.parts {
		if p.ph != nil && p.ph.src == src {
			out = append(out, p.ph)
		}
	}
	return out
}

// uses reports whether the template has a placeholder of source src.
func (t *template) uses(src string) bool {
	return t.has(func(ph *placeholder) bool { return ph.src == src })
}

// usesFilter reports whether one of the template's placeholders has the
// filter name.
func (t *template) usesFilter(name string) bool {
	return t.has(func(ph *placeholder) bool {
		return slices.ContainsFunc(ph.filters, func(f filter) bool { return f.name == name })
	})
}

func (t *template) has(pred func(*placeholder) bool) bool {
	var in func([]tpart) bool
	in = func(ps []tpart) bool {
		for _, p := range ps {
			if (p.ph != nil && pred(p.ph)) || in(p.group) {
				return true
			}
		}
		return false
	}
	return in(t.parts)
}

// tctx is what a template reads.
type tctx struct {
	r      *http.Request
	body   []byte
	ts     string
	header func(string) string
	doc    *jsonDoc // the body, decoded once
	item   json.RawMessage
	hmac   func(msg []byte) []byte // the hmac filter; nil: not available
	// strict reads {json:...} as JSON strings only: what a signature
	// signs is text.
	strict bool
	url    string // {url}
	// covers, when set, tells the placeholders that sign the checked
	// timestamp; render sets covered when one of them was written.
	covers  func(*placeholder) bool
	covered bool
	form    url.Values
	formOK  bool // form is parsed
}

// json returns the body as a jsonDoc.
func (c *tctx) json() *jsonDoc {
	if c.doc == nil {
		c.doc = newJSONDoc(c.body)
	}
	return c.doc
}

// parsedForm returns the body as a form, or nil when it is not one.
func (c *tctx) parsedForm() url.Values {
	if !c.formOK {
		c.formOK = true
		if f, err := url.ParseQuery(string(c.body)); err == nil {
			c.form = f
		}
	}
	return c.form
}

// render writes the template. With strict, an empty placeholder outside an
// optional part makes it give ok false; without, it writes nothing.
func (t *template) render(c *tctx, strict bool) (out []byte, ok bool) {
	for _, p := range t.parts {
		switch {
		case p.ph != nil:
			v := c.value(p.ph)
			if v == "" && strict {
				return nil, false
			}
			c.cover(p.ph)
			out = append(out, v...)
		case p.group != nil:
			var g []byte
			full := true
			for _, q := range p.group {
				if q.ph == nil {
					g = append(g, q.lit...)
					continue
				}
				v := c.value(q.ph)
				if v == "" {
					full = false
					break
				}
				g = append(g, v...)
			}
			if full {
				for _, q := range p.group {
					if q.ph != nil {
						c.cover(q.ph)
					}
				}
				out = append(out, g...)
			}
		default:
			out = append(out, p.lit...)
		}
	}
	return out, true
}

// cover notes that ph was written.
func (c *tctx) cover(ph *placeholder) {
	if c.covers != nil && c.covers(ph) {
		c.covered = true
	}
}

// value returns a placeholder's value, filters applied.
func (c *tctx) value(ph *placeholder) string {
	var v string
	switch ph.src {
	case "body":
		v = string(c.body)
	case "timestamp":
		v = c.ts
	case "method":
		v = c.r.Method
	case "url":
		v = c.url
	case "form":
		v = c.parsedForm().Get(ph.arg)
	case "form_sorted":
		v = string(twilioParams(c.parsedForm()))
	case "header":
		v = c.header(ph.arg)
	case "query":
		v = c.r.URL.Query().Get(ph.arg)
	case "json":
		if c.strict {
			v, _, _ = jsonString(c.json().lookup(ph.path))
		} else {
			v = jsonScalar(c.json().lookup(ph.path))
		}
	case "raw":
		v = jsonCompact(c.json().lookup(ph.path))
	case "item":
		v = jsonScalar(lookupJSON(c.item, ph.path))
	}
	for _, f := range ph.filters {
		switch f.name {
		case "lower":
			v = strings.ToLower(v)
		case "upper":
			v = strings.ToUpper(v)
		case "trim":
			v = strings.TrimSpace(v)
		case "sha256":
			sum := sha256.Sum256([]byte(v))
			v = hex.EncodeToString(sum[:])
		case "first":
			if len(v) > f.n {
				v = v[:f.n]
			}
		case "hmac":
			if c.hmac == nil || v == "" {
				v = ""
			} else {
				v = hex.EncodeToString(c.hmac([]byte(v)))
			}
		}
	}
	return v
}

// step is one step of a JSON path: a field, an index or [*].
type step struct {
	field    string
	index    int
	isIndex  bool
	wildcard bool
}

// parsePath parses "a.b[0].c" or "entry[*].changes[*]". A field name
// holding '.' or '[' can't be named.
func parsePath(p string) ([]step, error) {
	if p == "" {
		return nil, fmt.Errorf("name a JSON path, e.g. data.id")
	}
	var steps []step
	for i, seg := range strings.Split(p, ".") {
		name, rest, _ := strings.Cut(seg, "[")
		if name == "" && (i > 0 || rest == "") {
			return nil, fmt.Errorf("JSON path %q has an empty field name", p)
		}
		if name != "" {
			if strings.ContainsAny(name, "]*") {
				return nil, fmt.Errorf("JSON path %q: field %q", p, name)
			}
			steps = append(steps, step{field: name})
		}
		if rest == "" && !strings.Contains(seg, "[") {
			continue
		}
		rest = "[" + rest
		for rest != "" {
			idx, after, ok := strings.Cut(rest[1:], "]")
			if rest[0] != '[' || !ok {
				return nil, fmt.Errorf("JSON path %q: want [N] or [*] after %q", p, name)
			}
			if idx == "*" {
				steps = append(steps, step{wildcard: true})
			} else if n, err := strconv.Atoi(idx); err == nil && n >= 0 {
				steps = append(steps, step{index: n, isIndex: true})
			} else {
				return nil, fmt.Errorf("JSON path %q: [%s] is not an index (want [N] or [*])", p, idx)
			}
			rest = after
		}
	}
	return steps, nil
}

// jsonDoc is a JSON body whose objects and lists are decoded once each,
// however many placeholders read them.
type jsonDoc struct {
	raw   []byte
	objs  map[rawID]map[string]json.RawMessage
	lists map[rawID][]json.RawMessage
}

// rawID names a value of a jsonDoc: the values of a decoded object or list
// are slices of one buffer that stays, so where they start and how long
// they are tell them apart.
type rawID struct {
	start *byte
	n     int
}

func newJSONDoc(raw []byte) *jsonDoc { return &jsonDoc{raw: raw} }

func idOf(v json.RawMessage) rawID {
	if len(v) == 0 {
		return rawID{}
	}
	return rawID{&v[0], len(v)}
}

// object decodes v as an object, or returns nil.
func (d *jsonDoc) object(v json.RawMessage) map[string]json.RawMessage {
	id := idOf(v)
	if o, ok := d.objs[id]; ok {
		return o
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(v, &o) != nil {
		o = nil
	}
	if d.objs == nil {
		d.objs = map[rawID]map[string]json.RawMessage{}
	}
	d.objs[id] = o
	return o
}

// list decodes v as a list, or returns nil.
func (d *jsonDoc) list(v json.RawMessage) []json.RawMessage {
	id := idOf(v)
	if l, ok := d.lists[id]; ok {
		return l
	}
	var l []json.RawMessage
	if json.Unmarshal(v, &l) != nil {
		l = nil
	}
	if d.lists == nil {
		d.lists = map[rawID][]json.RawMessage{}
	}
	d.lists[id] = l
	return l
}

// lookup returns the JSON value at path, or nil.
func (d *jsonDoc) lookup(path []step) json.RawMessage {
	vs := d.selectPath(path)
	if len(vs) != 1 {
		return nil
	}
	return vs[0]
}

// selectPath returns the JSON values at path, [*] selecting every element
// of a list.
func (d *jsonDoc) selectPath(path []step) []json.RawMessage {
	cur := []json.RawMessage{d.raw}
	for _, s := range path {
		var next []json.RawMessage
		for _, v := range cur {
			switch {
			case s.wildcard:
				next = append(next, d.list(v)...)
			case s.isIndex:
				if l := d.list(v); s.index < len(l) {
					next = append(next, l[s.index])
				}
			default:
				if f, ok := d.object(v)[s.field]; ok {
					next = append(next, f)
				}
			}
		}
		cur = next
	}
	return cur
}

// lookupJSON returns the JSON value at path in doc, or nil.
func lookupJSON(doc []byte, path []step) json.RawMessage {
	return newJSONDoc(doc).lookup(path)
}

// jsonScalar is a JSON string or number as text (a number as written), or
// "" for anything else, as the presets read ids (jsonID).
func jsonScalar(v json.RawMessage) string {
	if v == nil {
		return ""
	}
	var id jsonID
	if id.UnmarshalJSON(v) != nil {
		return ""
	}
	return string(id)
}

// jsonString returns the value of v, a JSON string; whether v is there
// (not absent, not null); and whether it is a string.
func jsonString(v json.RawMessage) (s string, present, isString bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return "", false, false
	}
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", true, false
	}
	return s, true, true
}

// jsonCompact is v compacted, or "" when there is none.
func jsonCompact(v json.RawMessage) string {
	var b bytes.Buffer
	if v == nil || json.Compact(&b, v) != nil {
		return ""
	}
	return b.String()
}

// jsonPath parses a path that selects one value: no [*].
func jsonPath(p string) ([]step, error) {
	path, err := parsePath(p)
	if err == nil && slices.ContainsFunc(path, func(s step) bool { return s.wildcard }) {
		err = fmt.Errorf("JSON path %q: [*] selects several values; give one", p)
	}
	return path, err
}
