package config

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The schema of a section of the file is one table of fields (store.go's
// storeSchema, queue.go's queueSchema...): each field's YAML name, its
// default, its bounds or allowed values, and the field of the public struct
// it sets, whose Go type is the field's kind. Three things derive from the
// table: the structure that shape checks (the known field names, in the
// order an unknown field's error lists them), the decoding and checking of
// each value with its file:line error, and the default of a field the file
// leaves out. What a table can't say (a field that depends on another, a
// rule across sections) is the section's own code, beside its table, and
// reads the decoded values of the fields whose setter is nil.

// A field is one row of a section's table. T is the section's public
// struct.
type field[T any] struct {
	name string // as the file spells it
	// to returns the field of the public struct that the value sets: a
	// *string, *[]string, *bool, *int, *[]int, *int64 (a byte size),
	// *float64, *time.Duration (which must be positive) or **url.URL (an
	// http or https URL). nil: the section's own code reads the value.
	to  func(*T) any
	def any // the default, of the type to points at; nil: what the section set before reading

	enum  []string           // a string: the values allowed
	check func(string) error // a string, or each of a list: refuses a value (which is kept all the same)

	missing string // when set, the field is required: the error of its absence, at the mapping
	unless  string // a field whose presence makes this one not required

	// A number (for a list of numbers, each one) is refused below min or
	// above max with bad, a format given the value as written; an int's
	// bad defaults to "want a whole number from min to max". A size has
	// a min only (0: none).
	min, max float64
	bad      string

	// only, when set, are the values of the section's selector (store's
	// driver) that use the field: with another, the field is refused at
	// its name, and its value is neither read nor defaulted unless
	// checkedAnyway.
	only          []string
	checkedAnyway bool

	// A field that is a mapping (sub) or a list of mappings (list) of its
	// own, which shape checks; its section reads it.
	sub, list *layout
}

// A table is the schema of one section, a mapping of the file.
type table[T any] struct {
	selector string // the field whose value selects the fields used (see field.only), if any
	fields   []field[T]
}

// values are the fields of a mapping of the file, as decoded: by name, its
// merges applied (a field the mapping sets itself wins, then the first merge
// that sets it), each a leaf.
type values map[string]leaf

// valuesOf decodes n, a mapping that shape checked, or nil.
func valuesOf(n *yaml.Node) values {
	var vs values
	if n != nil {
		_ = n.Decode(&vs) // shape leaves nothing that fails to decode
	}
	return vs
}

// given are the fields that read found usable: by name, the value as the
// file writes it, ${VAR} expanded ("" for a list).
type given map[string]string

// read reads vals, the mapping n at at (its path in the file), into dst, in
// the table's order: each field's default, then its value when the file
// gives a usable one; a value that is not is reported at its line, a
// required field that is absent at n's. It returns the fields read.
func (s *table[T]) read(c *checker, vals values, n *yaml.Node, at string, dst *T) given {
	got := given{}
	selected := ""
	for _, f := range s.fields {
		l, fat := vals[f.name], join(at, f.name)
		if f.only != nil && !slices.Contains(f.only, selected) {
			if l.Node != nil {
				c.errorf(c.key(l), fat, "only used by %s (%s is %s)", usedBy(s.selector, f.only), s.selector, selected)
			}
			if !f.checkedAnyway {
				continue
			}
		}
		if f.missing != "" && l.Node == nil && (f.unless == "" || vals[f.unless].Node == nil) {
			c.errorf(n, fat, "missing: %s", f.missing)
		}
		if f.to == nil {
			continue
		}
		p := f.to(dst)
		if f.def != nil {
			reflect.ValueOf(p).Elem().Set(reflect.ValueOf(f.def))
		}
		if v, ok := f.readValue(c, l, fat, p); ok {
			got[f.name] = v
		}
		if f.name == s.selector {
			selected = *p.(*string)
		}
	}
	return got
}

// readValue reads l, the value of f at its path at, into p, f.to's
// pointer. It returns the value as written, and whether it was usable.
func (f *field[T]) readValue(c *checker, l leaf, at string, p any) (string, bool) {
	if p, ok := p.(*[]string); ok {
		list, ok := c.strList(l, at)
		if !ok {
			return "", false
		}
		for i, v := range list {
			if err := f.checkValue(v); err != nil {
				c.errorf(l.Content[i], fmt.Sprintf("%s[%d]", at, i), "%v", err)
			}
		}
		*p = list
		return "", true
	}
	if p, ok := p.(*[]int); ok {
		list, ok := c.strList(l, at)
		if !ok {
			return "", false
		}
		for i, v := range list {
			if n, good := f.number(v); good {
				*p = append(*p, n)
			} else {
				c.errorf(l.Content[i], fmt.Sprintf("%s[%d]", at, i), f.badFormat(), v)
			}
		}
		return "", true
	}
	v, ok := c.str(l, at)
	if !ok {
		return "", false
	}
	switch p := p.(type) {
	case *string:
		if f.enum != nil && !c.isOneOf(l, at, v, f.enum) {
			return "", false
		}
		if err := f.checkValue(v); err != nil {
			c.errorf(l.Node, at, "%v", err)
		}
		*p = v
	case *bool:
		b, good := c.parseBool(l, at, v)
		if !good {
			return "", false
		}
		*p = b
	case *time.Duration:
		d, good := c.parseDuration(l, at, v)
		if !good {
			return "", false
		}
		*p = d
	case *int:
		n, good := f.number(v)
		if !good {
			c.errorf(l.Node, at, f.badFormat(), v)
			return "", false
		}
		*p = n
	case *float64:
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < f.min || r > f.max {
			c.errorf(l.Node, at, f.bad, v)
			return "", false
		}
		*p = r
	case **url.URL:
		u, err := checkUpstream(v)
		if err != nil {
			c.errorf(l.Node, at, "%v", err)
		}
		*p = u
	case *int64:
		size, err := parseSize(v)
		switch {
		case err != nil:
			c.errorf(l.Node, at, "%v", err)
			return "", false
		case float64(size) < f.min:
			c.errorf(l.Node, at, f.bad, v)
			return "", false
		}
		*p = size
	default:
		panic(fmt.Sprintf("config: field %s sets a %T", f.name, p))
	}
	return v, true
}

// checkValue checks v, a string, with f.check if there is one.
func (f *field[T]) checkValue(v string) error {
	if f.check == nil {
		return nil
	}
	return f.check(v)
}

// number parses v, a whole number, and reports whether it is within f's
// bounds.
func (f *field[T]) number(v string) (int, bool) {
	n, err := strconv.Atoi(v)
	return n, err == nil && f.allows(float64(n))
}

// allows reports whether n is within f's bounds.
func (f *field[T]) allows(n float64) bool { return n >= f.min && n <= f.max }

// badFormat is the error of a whole number out of f's bounds.
func (f *field[T]) badFormat() string {
	if f.bad != "" {
		return f.bad
	}
	return fmt.Sprintf("want a whole number from %d to %d, got %%q", int(f.min), int(f.max))
}

// field returns the row name of s's table.
func (s *table[T]) field(name string) *field[T] {
	for i := range s.fields {
		if s.fields[i].name == name {
			return &s.fields[i]
		}
	}
	panic("config: no field " + name)
}

// layout returns the structure of s's mapping.
func (s *table[T]) layout() *layout {
	lay := &layout{fields: map[string]*layout{}, lists: map[string]bool{}}
	for _, f := range s.fields {
		lay.names = append(lay.names, f.name)
		switch {
		case f.sub != nil:
			lay.fields[f.name] = f.sub
		case f.list != nil:
			lay.fields[f.name], lay.lists[f.name] = f.list, true
		}
	}
	return lay
}

// usedBy names the values of selector in only: "driver redis", "drivers
// redis and postgres".
func usedBy(selector string, only []string) string {
	if len(only) == 1 {
		return selector + " " + only[0]
	}
	return selector + "s " + strings.Join(only[:len(only)-1], ", ") + " and " + only[len(only)-1]
}

// maxCount bounds the counts of the file (queue.concurrency,
// limits.max_connections...).
const maxCount = 100_000_000

// A layout is the structure of a mapping of the file, which shape checks:
// its field names, in the order an unknown field's error lists them, and
// the layout of each field that is a mapping or, in lists, a list of
// mappings. Any other field's value may be of any kind: its section checks
// it.
type layout struct {
	names  []string
	fields map[string]*layout
	lists  map[string]bool
}

// nonEmpty returns the check of a string that may not be empty, refused
// with msg.
func nonEmpty(msg string) func(string) error {
	return func(v string) error {
		if v == "" {
			return errors.New(msg)
		}
		return nil
	}
}
