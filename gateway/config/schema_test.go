package config

import (
	"maps"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// sample is the public struct of sampleSchema, a section with a field of
// every kind the machinery reads.
type sample struct {
	Kind   string
	Mode   string
	Name   string
	On     bool
	N      int
	Codes  []int
	Rate   float64
	Size   int64
	Wait   time.Duration
	Tags   []string
	Remote string
	Local  string
}

var sampleSchema = table[sample]{selector: "kind", fields: []field[sample]{
	{name: "kind", to: func(s *sample) any { return &s.Kind }, def: "local", enum: []string{"local", "remote"}},
	{name: "mode", to: func(s *sample) any { return &s.Mode }, def: "a", enum: []string{"a", "b"}},
	{name: "name", to: func(s *sample) any { return &s.Name }, check: nonEmpty("empty name"), missing: "the sample's name"},
	{name: "on", to: func(s *sample) any { return &s.On }},
	{name: "n", to: func(s *sample) any { return &s.N }, def: 3, min: 1, max: 10},
	{name: "codes", to: func(s *sample) any { return &s.Codes }, min: 400, max: 499, bad: "invalid code %q: want a 4xx"},
	{name: "rate", to: func(s *sample) any { return &s.Rate }, min: math.SmallestNonzeroFloat64, max: 100, bad: "invalid rate %q"},
	{name: "size", to: func(s *sample) any { return &s.Size }, def: int64(1 << 10), min: 1 << 10, bad: "%s is under 1KiB"},
	{name: "wait", to: func(s *sample) any { return &s.Wait }, def: 5 * time.Second},
	{name: "tags", to: func(s *sample) any { return &s.Tags }, check: checkHeaderName},
	{name: "remote", to: func(s *sample) any { return &s.Remote }, only: []string{"remote"}},
	{name: "local", to: func(s *sample) any { return &s.Local }, def: "here", only: []string{"local"}, checkedAnyway: true},
	{name: "extra", sub: logSchema.layout()},
	{name: "free"}, // read by the section's own code
}}

// readSample checks text, the mapping of a sample section, the way Parse
// checks a section: shape, then read. It returns what read made of it, and
// the errors as Parse prints them, in line order.
func readSample(t *testing.T, text string) (sample, given, []string) {
	t.Helper()
	c := &checker{file: "s.yaml", getenv: envOf("SET", "v"), keys: map[*yaml.Node]*yaml.Node{}, wrong: map[*yaml.Node]bool{}}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	n := c.shape(doc.Content[0], sampleSchema.layout(), false, "s")
	var s sample
	got := sampleSchema.read(c, valuesOf(n), n, "s", &s)
	slices.SortStableFunc(c.errs, byLine)
	var errs []string
	for _, e := range c.errs {
		errs = append(errs, e.Error())
	}
	return s, got, errs
}

// Each field a file leaves out gets its default; the ones it gives are
// read into the public struct as their kind, ${VAR} expanded, and given
// holds them as written.
func TestSchemaReadsValuesAndDefaults(t *testing.T) {
	s, got, errs := readSample(t, "name: ${SET}\non: true\ncodes: [404, 409]\nrate: 2.5\nsize: 2KiB\ntags: [X-A]\nfree: anything\n")
	if errs != nil {
		t.Fatalf("errors: %q", errs)
	}
	want := sample{Kind: "local", Mode: "a", Name: "v", On: true, N: 3, Codes: []int{404, 409}, Rate: 2.5, Size: 2 << 10,
		Wait: 5 * time.Second, Tags: []string{"X-A"}, Local: "here"}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("read\n%+v\nwant\n%+v", s, want)
	}
	if want := (given{"name": "v", "on": "true", "codes": "", "rate": "2.5", "size": "2KiB", "tags": ""}); !maps.Equal(got, want) {
		t.Errorf("given %v, want %v", got, want)
	}
}

// Every problem of a section is an error at its line naming its field,
// and a value refused leaves the field at its default.
func TestSchemaErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
		check      func(sample) bool
	}{
		{"unknown field, with the nearest known", "name: x\nnmae: y\n",
			[]string{`s.yaml:2: s.nmae: unknown field "nmae": did you mean "name"? (known: kind, mode, name, on, n, codes, rate, size, wait, tags, remote, local, extra, free)`}, nil},
		{"unknown field of a sub-mapping", "name: x\nextra: {formt: json}\n",
			[]string{`s.yaml:2: s.extra.formt: unknown field "formt": did you mean "format"? (known: format, level)`}, nil},
		{"field given twice", "name: x\nname: y\n", []string{`s.yaml:2: s.name: field given twice (first at line 1)`}, nil},
		{"wrong kind", "name: [x]\ntags: x\nextra: x\n", []string{
			`s.yaml:1: s.name: expected a single value, got a list`,
			`s.yaml:2: s.tags: expected a list ([a, b] or - lines), got "x"`,
			`s.yaml:3: s.extra: expected a mapping (name: value lines), got "x"`}, nil},
		{"missing", "on: true\n", []string{`s.yaml:1: s.name: missing: the sample's name`}, nil},
		{"not in the enum", "name: x\nmode: cccccc\n", []string{`s.yaml:2: s.mode: invalid mode "cccccc" (want a or b)`},
			func(s sample) bool { return s.Mode == "a" }},
		{"a check refuses, the value is kept", "name: ''\n", []string{`s.yaml:1: s.name: empty name`},
			func(s sample) bool { return s.Name == "" }},
		{"out of range", "name: x\nn: 11\n", []string{`s.yaml:2: s.n: want a whole number from 1 to 10, got "11"`},
			func(s sample) bool { return s.N == 3 }},
		{"not a number", "name: x\nn: three\nrate: fast\n", []string{`s.yaml:2: s.n: want a whole number from 1 to 10, got "three"`, `s.yaml:3: s.rate: invalid rate "fast"`},
			func(s sample) bool { return s.N == 3 && s.Rate == 0 }},
		{"a float at its bounds", "name: x\nrate: 0\n", []string{`s.yaml:2: s.rate: invalid rate "0"`}, nil},
		{"each of a list", "name: x\ncodes:\n  - 404\n  - 500\ntags: [X-A, 'b c']\n", []string{
			`s.yaml:4: s.codes[1]: invalid code "500": want a 4xx`,
			`s.yaml:5: s.tags[1]: invalid header name "b c"`},
			func(s sample) bool { return slices.Equal(s.Codes, []int{404}) && len(s.Tags) == 2 }},
		{"a size under its min", "name: x\nsize: 10B\n", []string{`s.yaml:2: s.size: 10B is under 1KiB`},
			func(s sample) bool { return s.Size == 1<<10 }},
		{"a size that is none", "name: x\nsize: lots\n", []string{`s.yaml:2: s.size: invalid size "lots" (examples: 5MiB, 512KiB, 1048576)`}, nil},
		{"a duration", "name: x\nwait: -1s\n", []string{`s.yaml:2: s.wait: must be positive, got "-1s"`},
			func(s sample) bool { return s.Wait == 5*time.Second }},
		{"a boolean", "name: x\non: yes\n", []string{`s.yaml:2: s.on: invalid on "yes" (want true or false)`}, nil},
		{"an unset variable", "name: ${NOPE}\n", []string{`s.yaml:1: s.name: environment variable NOPE is not set or empty (used as ${NOPE})`}, nil},
		{"a field of another kind is refused at its name, and not read", "name: x\nremote: [r]\n",
			[]string{`s.yaml:2: s.remote: only used by kind remote (kind is local)`}, nil},
		{"unless it is checked anyway, with its default", "name: x\nkind: remote\nremote: r\nlocal: [l]\n", []string{
			`s.yaml:4: s.local: only used by kind local (kind is remote)`,
			`s.yaml:4: s.local: expected a single value, got a list`},
			func(s sample) bool { return s.Remote == "r" && s.Local == "here" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, errs := readSample(t, tt.text)
			if !slices.Equal(errs, tt.want) {
				t.Errorf("errors\n%q\nwant\n%q", errs, tt.want)
			}
			if tt.check != nil && !tt.check(s) {
				t.Errorf("read %+v", s)
			}
		})
	}
}

// A field is declared once: the layout shape checks lists every field of
// the table, in its order, with the structure of its mappings.
func TestSchemaLayout(t *testing.T) {
	lay := sampleSchema.layout()
	var names []string
	for _, f := range sampleSchema.fields {
		names = append(names, f.name)
	}
	if !slices.Equal(lay.names, names) {
		t.Errorf("layout names %q, want %q", lay.names, names)
	}
	if lay.fields["extra"] == nil || lay.fields["name"] != nil || lay.lists["extra"] {
		t.Errorf("layout of extra %v, of name %v", lay.fields["extra"], lay.fields["name"])
	}
	if routes := configLayout.fields["routes"]; routes == nil || !configLayout.lists["routes"] ||
		!slices.Equal(routes.fields["queue"].names, queueSchema.layout().names) {
		t.Errorf("routes: is not a list of routeSchema's mappings")
	}
}

// Every table of the package reads an empty section into its defaults: each
// default is of the type its field is, and each field sets a kind the
// machinery reads.
func TestSchemaTablesDefaults(t *testing.T) {
	c := &checker{file: "s.yaml", getenv: envOf(), keys: map[*yaml.Node]*yaml.Node{}, wrong: map[*yaml.Node]bool{}}
	var store Store
	storeSchema.read(c, nil, nil, "store", &store)
	if store.Driver != "sqlite" || store.Path != defaultSQLitePath || store.Table != "" {
		t.Errorf("store defaults %+v", store)
	}
	var q Queue
	queueSchema.read(c, nil, nil, "queue", &q)
	if want := (Queue{Concurrency: DefaultQueueConcurrency, MaxAge: DefaultQueueMaxAge, BackoffMin: DefaultQueueBackoffMin, BackoffMax: DefaultQueueBackoffMax, MaxQueued: DefaultQueueMaxQueued}); !reflect.DeepEqual(q, want) {
		t.Errorf("queue defaults %+v", q)
	}
	var r Route
	routeSchema.read(c, nil, &yaml.Node{Line: 7}, "routes[0]", &r)
	if r.Route.MaxBodyBytes == 0 || r.UpstreamTimeout != defaultUpstreamTimeout || r.Deliver != DeliverProxy || r.Route.InFlight != "wait" {
		t.Errorf("route defaults %+v", r)
	}
	var missing []string
	for _, e := range c.errs {
		missing = append(missing, e.Error())
	}
	if want := []string{"s.yaml:7: routes[0].path: missing: the path this route receives, e.g. /webhooks/stone"}; len(missing) != 3 || missing[0] != want[0] {
		t.Errorf("errors of an empty route: %q", missing)
	}
	for _, read := range []func(){
		func() { var v Config; configSchema.read(c, nil, nil, "", &v) },
		func() { var v Admin; adminSchema.read(c, nil, nil, "admin", &v) },
		func() { var v Audit; auditSchema.read(c, nil, nil, "audit", &v) },
		func() { var v Log; logSchema.read(c, nil, nil, "log", &v) },
		func() { var v TLS; tlsSchema.read(c, nil, nil, "tls", &v) },
		func() { var v Limits; limitsSchema.read(c, nil, nil, "limits", &v) },
		func() { var v Accept; acceptSchema.read(c, nil, nil, "accept", &v) },
	} {
		read() // panics on a default of the wrong type
	}
	if got := usedBy("driver", []string{"redis", "postgres"}); got != "drivers redis and postgres" {
		t.Errorf("usedBy = %q", got)
	}
}

// A mapping's merges (<<) give the fields it does not give itself, the
// first merge that gives one winning.
func TestSchemaMerges(t *testing.T) {
	s, _, errs := readSample(t, "name: x\n<<: [{mode: b, n: 4, wait: 1s}, {n: 5, rate: 1, wait: 2s}]\nwait: 3s\n")
	if errs != nil {
		t.Fatalf("errors: %q", errs)
	}
	if s.Mode != "b" || s.N != 4 || s.Rate != 1 || s.Wait != 3*time.Second {
		t.Errorf("read %+v; want mode b, n 4, rate 1, wait 3s", s)
	}
}

// firstCell is the first cell of a reference row: the fields it documents.
var firstCell = regexp.MustCompile("(?m)^\\| (`[a-z_]+`(?:, `[a-z_]+`)*) \\|")

// docs/gateway.md's reference has a row for each field of the sections it
// gives a table, and no other: the tables are the schema's.
func TestGatewayDocListsEverySchemaField(t *testing.T) {
	data, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	names := func(lay *layout) []string { return lay.names }
	for heading, fields := range map[string][]string{
		"### Top level":  names(configLayout),
		"### `limits`":   names(limitsSchema.layout()),
		"### `store`":    names(storeSchema.layout()),
		"### `admin`":    names(adminSchema.layout()),
		"### `audit`":    names(auditSchema.layout()),
		"### `log`":      names(logSchema.layout()),
		"### `routes[]`": names(routeLayout),
	} {
		_, section, ok := strings.Cut(string(data), heading+"\n")
		if !ok {
			t.Errorf("docs/gateway.md has no %s", heading)
			continue
		}
		section, _, _ = strings.Cut(section, "\n#")
		var documented []string
		for _, m := range firstCell.FindAllStringSubmatch(section, -1) { // | `a` | or | `a`, `b` |
			for _, name := range strings.Split(m[1], ", ") {
				documented = append(documented, strings.Trim(name, "`"))
			}
		}
		slices.Sort(documented)
		want := slices.Sorted(slices.Values(fields))
		if !slices.Equal(documented, want) {
			t.Errorf("docs/gateway.md's %s table has rows for\n%q\nits schema has the fields\n%q", heading, documented, want)
		}
	}
}
