package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// parserFields returns the fields the parser knows in each section, read
// from its own refusal of an unknown field there ("known: a, b, c"), so
// that the list can't drift from the parser.
func parserFields(t *testing.T) []string {
	t.Helper()
	const route = "  - {path: /a, upstream: http://127.0.0.1:1/, source: s}\n"
	sections := []struct{ prefix, give string }{
		{"", "zz_unknown: 1\nroutes:\n" + route},
		{"store.", "store: {zz_unknown: 1}\nroutes:\n" + route},
		{"admin.", "admin: {zz_unknown: 1}\nroutes:\n" + route},
		{"audit.", "audit: {zz_unknown: 1}\nroutes:\n" + route},
		{"log.", "log: {zz_unknown: 1}\nroutes:\n" + route},
		{"tls.", "tls: {zz_unknown: 1}\nroutes:\n" + route},
		{"routes[].", "routes:\n  - {path: /a, upstream: http://127.0.0.1:1/, source: s, zz_unknown: 1}\n"},
	}
	known := regexp.MustCompile(`unknown field "zz_unknown" \(known: ([^)]*)\)`)
	var out []string
	for _, s := range sections {
		_, err := parseConfig("x.yaml", []byte(s.give), envOf())
		m := known.FindStringSubmatch(strings.ReplaceAll(err.Error(), "\n", " "))
		if m == nil {
			t.Fatalf("section %q: no list of known fields in %v", s.prefix, err)
		}
		for _, f := range strings.Split(m[1], ", ") {
			out = append(out, s.prefix+f)
		}
	}
	slices.Sort(out)
	return out
}

// exampleFields returns the fields examples/idemhook.yaml names, set or in
// a comment ("# field: value"), by section: the example must show every
// field, and may comment out those that don't go together (a second store
// driver, tls).
func exampleFields(t *testing.T, text string) []string {
	t.Helper()
	field := regexp.MustCompile(`^( *)(- )?([a-z_]+):( |$)`)
	var out []string
	top := ""
	for _, l := range strings.Split(text, "\n") {
		indent := len(l) - len(strings.TrimLeft(l, " "))
		content := l[indent:]
		if c, ok := strings.CutPrefix(content, "#"); ok { // a commented field keeps its place
			content = strings.TrimPrefix(c, " ")
		}
		m := field.FindStringSubmatch(content)
		if m == nil {
			continue
		}
		indent += len(m[1])
		switch name := m[3]; {
		case indent == 0 && m[2] == "":
			top = name
			out = append(out, name)
		case top == "routes":
			out = append(out, "routes[]."+name)
		default:
			out = append(out, top+"."+name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// examples/idemhook.yaml lists every field the parser knows, and no other.
func TestExampleListsEveryField(t *testing.T) {
	data, err := os.ReadFile("../../examples/idemhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := parserFields(t)
	got := exampleFields(t, string(data))
	for _, f := range want {
		if !slices.Contains(got, f) {
			t.Errorf("examples/idemhook.yaml does not show %s", f)
		}
	}
	for _, f := range got {
		if !slices.Contains(want, f) {
			t.Errorf("examples/idemhook.yaml shows %s, which the parser does not know", f)
		}
	}
}
