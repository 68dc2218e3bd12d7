package idemhook

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/idemhook/idemhook/internal/canonjson"
)

// This file finds the items of a batched body (Route.Items) and writes the
// bodies that carry some of them: the provider's envelope, with only the
// items kept.
//
// The body is not decoded into Go values. Only the values along an item
// path are taken apart (objects into their fields, arrays into their
// elements); everything else, items included, stays the body's own bytes,
// so what the handler gets is what the provider sent, less the items it
// must not get.

// itemPlan is Route.Items compiled: the item paths as one tree of steps,
// and each path's key.
type itemPlan struct {
	root  *pathStep
	keys  []itemKey // by path index
	paths []string  // by path index, as configured
	mode  ItemsMode
}

// pathStep is one step of the item paths: the fields to go into when the
// value is an object, the step for every element when it is an array, and
// the index of the path whose items the elements are when this is a
// path's last step (-1 otherwise).
type pathStep struct {
	fields map[string]*pathStep
	each   *pathStep
	items  int // for an each step: the path whose items its elements are; -1 when they are not items
}

// itemKey is an ItemPath.Key compiled: literal text and field paths, in
// order. A plain field path is one field and no text.
type itemKey struct {
	text     []string   // text[i] comes before fields[i]; text[len(fields)] after the last
	fields   [][]string // each a dotted path within the item
	optional []bool     // fields[i] may be missing ("{name?}"): then it and text[i] are left out
}

// compileItems checks items and compiles it. Errors name the path by its
// index, for a RouteError.
func compileItems(items *Items) (*itemPlan, int, error) {
	if len(items.Paths) == 0 {
		return nil, 0, fmt.Errorf("Items has no Paths")
	}
	plan := &itemPlan{root: &pathStep{items: -1}, mode: items.Mode}
	switch plan.mode {
	case "":
		plan.mode = ItemsSplit
	case ItemsSplit, ItemsFilter:
	default:
		return nil, 0, fmt.Errorf("Items.Mode %q is not one of split, filter", items.Mode)
	}
	for i, p := range items.Paths {
		steps, err := parseItemPath(p.Path)
		if err != nil {
			return nil, i, fmt.Errorf("Items.Paths[%d].Path %q: %v", i, p.Path, err)
		}
		key, err := parseItemKey(p.Key)
		if err != nil {
			return nil, i, fmt.Errorf("Items.Paths[%d].Key %q: %v", i, p.Key, err)
		}
		at := plan.root
		for j, s := range steps {
			if s == "[*]" {
				if at.each == nil {
					at.each = &pathStep{items: -1}
				}
				if j == len(steps)-1 {
					if at.each.items >= 0 {
						return nil, i, fmt.Errorf("Items.Paths[%d].Path %q: the path of Items.Paths[%d] already", i, p.Path, at.each.items)
					}
					at.each.items = i
				}
				at = at.each
				continue
			}
			if at.fields == nil {
				at.fields = make(map[string]*pathStep)
			}
			next := at.fields[s]
			if next == nil {
				next = &pathStep{items: -1}
				at.fields[s] = next
			}
			at = next
		}
		plan.keys = append(plan.keys, key)
		plan.paths = append(plan.paths, p.Path)
	}
	// A path's items are array elements; a path may not lead through
	// another path's items (their envelope would hold items of their own).
	var check func(s *pathStep) error
	check = func(s *pathStep) error {
		if s.each != nil {
			if s.each.items >= 0 && (s.each.each != nil || len(s.each.fields) > 0) {
				return fmt.Errorf("Items.Paths: a path leads into the items of %q", plan.paths[s.each.items])
			}
			if err := check(s.each); err != nil {
				return err
			}
		}
		for _, f := range s.fields {
			if err := check(f); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check(plan.root); err != nil {
		return nil, 0, err
	}
	return plan, 0, nil
}

// parseItemPath splits "entry[*].changes[*].value.messages[*]" into
// "entry", "[*]", "changes", "[*]", "value", "messages", "[*]". The last
// step must be "[*]": items are the elements of an array.
func parseItemPath(path string) ([]string, error) {
	if path == "" {
		return nil, fmt.Errorf("empty")
	}
	var steps []string
	for _, part := range strings.Split(path, ".") {
		name, arrays := part, 0
		for strings.HasSuffix(name, "[*]") {
			name, arrays = strings.TrimSuffix(name, "[*]"), arrays+1
		}
		switch {
		case name == "" && (arrays == 0 || len(steps) > 0):
			return nil, fmt.Errorf("an empty field name")
		case strings.ContainsAny(name, "[]*{}"):
			return nil, fmt.Errorf("field %q: only [*] may follow a field name", name)
		}
		if name != "" {
			steps = append(steps, name)
		}
		for range arrays {
			steps = append(steps, "[*]")
		}
	}
	if steps[len(steps)-1] != "[*]" {
		return nil, fmt.Errorf(`it must end in "[*]": items are the elements of an array`)
	}
	return steps, nil
}

// parseItemKey compiles "id", "event.id" or "{id}:{status}".
func parseItemKey(key string) (itemKey, error) {
	var k itemKey
	if key == "" {
		return k, fmt.Errorf("empty")
	}
	if !strings.ContainsAny(key, "{}") {
		f, err := fieldPath(key)
		if err != nil {
			return k, err
		}
		return itemKey{text: []string{"", ""}, fields: [][]string{f}, optional: []bool{false}}, nil
	}
	rest := key
	for {
		open := strings.IndexByte(rest, '{')
		if close := strings.IndexByte(rest, '}'); close >= 0 && (open < 0 || close < open) {
			return k, fmt.Errorf("a '}' without its '{'")
		}
		if open < 0 {
			k.text = append(k.text, rest)
			break
		}
		k.text = append(k.text, rest[:open])
		rest = rest[open+1:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return k, fmt.Errorf("a '{' without its '}'")
		}
		name, optional := strings.CutSuffix(rest[:end], "?")
		f, err := fieldPath(name)
		if err != nil {
			return k, err
		}
		k.fields = append(k.fields, f)
		k.optional = append(k.optional, optional)
		rest = rest[end+1:]
	}
	return k, nil
}

func fieldPath(s string) ([]string, error) {
	parts := strings.Split(s, ".")
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, "[]{}* ") {
			return nil, fmt.Errorf("%q is not a field name or a dotted path of field names", s)
		}
	}
	return parts, nil
}

// jval is a value of the body. Those along an item path are taken apart
// (fields or elems); every one keeps its bytes in raw.
type jval struct {
	raw    []byte
	fields []jfield // an object on an item path
	elems  []*jval  // an array on an item path
	isArr  bool     // elems is in use (it may be empty)
	item   int      // the item this value is (an index of batch.items); -1 when it is none
	items  int      // how many items it holds, itself included
}

type jfield struct {
	name []byte // as in the body, quotes included
	val  *jval
}

// bodyItem is one item found in a body.
type bodyItem struct {
	path int    // the index of its Items.Paths entry
	key  string // the item's key part, normalized
	val  *jval
	dup  int // the index of an earlier item of the body with the same key; -1 when none
}

// itemBody is a batched body taken apart.
type itemBody struct {
	root  *jval
	items []bodyItem
	// loose reports content outside every item's envelope: an element of
	// an array on an item path that holds no item (a change of another
	// field beside the messages, say). It is no item's, so it has no key:
	// it goes with the first request that carries items.
	loose bool
}

// findItems takes body apart along the plan's paths. It returns nil when
// the body is not JSON or holds no item: the delivery is then one event.
func (p *itemPlan) findItems(body []byte) *itemBody {
	body = bytes.TrimSpace(body)
	if !json.Valid(body) {
		return nil
	}
	b := &itemBody{}
	b.root = b.walk(body, p.root, p)
	if len(b.items) == 0 {
		return nil
	}
	seen := make(map[string]int, len(b.items))
	for i := range b.items {
		it := &b.items[i]
		it.dup = -1
		if j, ok := seen[it.key]; ok {
			it.dup = j
			continue
		}
		seen[it.key] = i
	}
	return b
}

// walk takes raw apart as step says. raw is valid JSON (the whole body was
// checked), so the scanning below can trust its syntax.
func (b *itemBody) walk(raw []byte, step *pathStep, p *itemPlan) *jval {
	v := &jval{raw: raw, item: -1}
	switch {
	case raw[0] == '{' && len(step.fields) > 0:
		forEachMember(raw, func(name, val []byte) {
			f := jfield{name: name}
			if next := step.fields[unquote(name)]; next != nil {
				f.val = b.walk(val, next, p)
			} else {
				f.val = &jval{raw: val, item: -1}
			}
			v.items += f.val.items
			v.fields = append(v.fields, f)
		})
	case raw[0] == '[' && step.each != nil:
		v.isArr = true
		forEachElement(raw, func(val []byte) {
			var e *jval
			if step.each.items >= 0 {
				e = &jval{raw: val, item: len(b.items), items: 1}
				b.items = append(b.items, bodyItem{path: step.each.items, key: p.keys[step.each.items].of(val), val: e})
			} else {
				e = b.walk(val, step.each, p)
				if e.items == 0 {
					b.loose = true
				}
			}
			v.items += e.items
			v.elems = append(v.elems, e)
		})
	}
	return v
}

// of returns the key of the item raw: its fields' values joined by the
// template's text, normalized; or, when a field is missing or not a
// string, a number or a boolean, "sha256:" and the hash of the item's canonical JSON
// (the same for the item however the provider spaces or orders it).
func (k itemKey) of(raw []byte) string {
	var sb strings.Builder
	for i, f := range k.fields {
		v, ok := fieldValue(raw, f)
		switch {
		case !ok && k.optional[i]:
			continue
		case !ok:
			sum := canonjson.Sum(raw)
			return "sha256:" + hex.EncodeToString(sum[:])
		}
		sb.WriteString(k.text[i])
		sb.WriteString(v)
	}
	sb.WriteString(k.text[len(k.fields)])
	if key := NormalizeKey(sb.String()); key != "" {
		return key
	}
	sum := canonjson.Sum(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fieldValue returns the string, number or true/false at path in the
// object raw. A boolean is a value so that a flag can tell two events of
// one id apart (Instagram's unsent message: its mid with
// "is_deleted":true).
func fieldValue(raw []byte, path []string) (string, bool) {
	for _, name := range path {
		if len(raw) == 0 || raw[0] != '{' {
			return "", false
		}
		var found []byte
		forEachMember(raw, func(n, v []byte) {
			if found == nil && unquote(n) == name {
				found = v
			}
		})
		if found == nil {
			return "", false
		}
		raw = found
	}
	switch {
	case len(raw) > 0 && raw[0] == '"':
		return unquote(raw), true
	case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
		return string(raw), true
	case string(raw) == "true" || string(raw) == "false":
		return string(raw), true
	}
	return "", false
}

// unquote decodes a JSON string, escapes included.
func unquote(q []byte) string {
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1])
	}
	var s string
	json.Unmarshal(q, &s) //nolint:errcheck // valid JSON: the body was checked
	return s
}

// forEachMember calls fn with each member of the object raw: its name, as
// in the body (quotes included), and its value.
func forEachMember(raw []byte, fn func(name, val []byte)) {
	i := skipSpace(raw, 1)
	if raw[i] == '}' {
		return
	}
	for {
		end := skipValue(raw, i)
		name := raw[i:end]
		i = skipSpace(raw, skipSpace(raw, end)+1) // past ':'
		end = skipValue(raw, i)
		fn(name, raw[i:end])
		i = skipSpace(raw, end)
		if raw[i] == '}' {
			return
		}
		i = skipSpace(raw, i+1) // past ','
	}
}

// forEachElement calls fn with each element of the array raw.
func forEachElement(raw []byte, fn func(val []byte)) {
	i := skipSpace(raw, 1)
	if raw[i] == ']' {
		return
	}
	for {
		end := skipValue(raw, i)
		fn(raw[i:end])
		i = skipSpace(raw, end)
		if raw[i] == ']' {
			return
		}
		i = skipSpace(raw, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the valid JSON value that starts at i.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		for i++; ; i++ {
			switch b[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipValue(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\n\r", rune(b[i])) {
		i++
	}
	return i
}

// render writes the body with only the items keep reports true for, in
// the provider's envelope: an array on an item path keeps the elements
// that still hold an item, and loose content (elements that never held
// one) when withLoose; a field whose value held items and now holds none
// is left out. It returns the body.
func (b *itemBody) render(keep func(item int) bool, withLoose bool) []byte {
	out, _ := renderValue(make([]byte, 0, len(b.root.raw)), b.root, keep, withLoose)
	return out
}

// renderValue appends v as kept to dst, and reports how many items it
// kept.
func renderValue(dst []byte, v *jval, keep func(int) bool, withLoose bool) ([]byte, int) {
	switch {
	case v.item >= 0:
		if !keep(v.item) {
			return dst, 0
		}
		return append(dst, v.raw...), 1
	case v.isArr:
		m := members{dst: append(dst, '[')}
		for _, e := range v.elems {
			m.next()
			if e.items == 0 { // loose content
				if !withLoose {
					m.drop()
					continue
				}
				m.dst = append(m.dst, e.raw...)
			} else if !m.render(e, keep, withLoose) {
				m.drop() // no item of this element is kept
				continue
			}
			m.n++
		}
		return append(m.dst, ']'), m.kept
	case v.fields != nil:
		m := members{dst: append(dst, '{')}
		for _, f := range v.fields {
			m.next()
			m.dst = append(append(m.dst, f.name...), ':')
			if f.val.items == 0 {
				m.dst = append(m.dst, f.val.raw...)
			} else if !m.render(f.val, keep, withLoose) {
				m.drop() // the field's items are all left out
				continue
			}
			m.n++
		}
		return append(m.dst, '}'), m.kept
	}
	return append(dst, v.raw...), 0
}

// members writes the members of an array or object being rendered, with a
// comma between two, and counts the items they keep.
type members struct {
	dst     []byte
	n, kept int // members written, items kept
	mark    int // where the member being written starts, its comma included
}

// next starts a member.
func (m *members) next() {
	m.mark = len(m.dst)
	if m.n > 0 {
		m.dst = append(m.dst, ',')
	}
}

// drop takes back the member being written.
func (m *members) drop() { m.dst = m.dst[:m.mark] }

// render writes v, which holds items, and reports whether it is to stay:
// it kept an item, or loose content that goes with this request.
func (m *members) render(v *jval, keep func(int) bool, withLoose bool) bool {
	var n int
	m.dst, n = renderValue(m.dst, v, keep, withLoose)
	m.kept += n
	return n > 0 || withLoose && hasLoose(v)
}

// hasLoose reports whether v, which holds items, holds loose content too.
func hasLoose(v *jval) bool {
	for _, e := range v.elems {
		if e.items == 0 || hasLoose(e) {
			return true
		}
	}
	for _, f := range v.fields {
		if f.val.items > 0 && hasLoose(f.val) {
			return true
		}
	}
	return false
}
