package config

import "testing"

// A route's filter is compiled when the file is read; its errors are at the
// expression's own line of the file, within a | block too.
func TestConfigFilter(t *testing.T) {
	tests := []struct {
		name, give string
		want       string // the filter as compiled
		wantErr    string
	}{
		{name: "one line", give: minimal + "    filter: 'body.type.startsWith(\"payment_intent.\")'\n",
			want: `body.type.startsWith("payment_intent.")`},
		{name: "a | block", give: minimal + "    filter: |\n      json &&\n      body.type == \"x\"\n",
			want: "json &&\nbody.type == \"x\"\n"},
		{name: "not expanded", give: minimal + "    filter: 'headers[\"x-tag\"] == \"${TAG}\"'\n",
			want: `headers["x-tag"] == "${TAG}"`},
		{name: "an unknown name on one line", give: minimal + "    filter: 'bdy.type == \"x\"'\n",
			wantErr: `idemhook.yaml:5: routes[0].filter: column 1: unknown name "bdy" (the variables are body, json, headers, query and path)`},
		{name: "an unknown name in a | block", give: minimal + "    filter: |\n      json &&\n        body.tpye == \"x\" &&\n        bdy.amount > 100\n    ttl: 1h\n",
			wantErr: `idemhook.yaml:8: routes[0].filter: column 3: unknown name "bdy" (the variables are body, json, headers, query and path)`},
		{name: "a syntax error", give: minimal + "    filter: body.type ==\n",
			wantErr: `idemhook.yaml:5: routes[0].filter: column 13: syntax error: the expression ends where more is expected`},
		{name: "not a bool", give: minimal + "    filter: body.type\n",
			wantErr: `idemhook.yaml:5: routes[0].filter: column 1: the expression is of type dyn (unknown until run time: compare it, e.g. body.flag == true); a filter must be a bool (true lets the event through)`},
		{name: "a > block", give: minimal + "    filter: >\n      json &&\n      bdy.x == 1\n",
			wantErr: `idemhook.yaml:6: routes[0].filter: line 1, column 9 of the expression: unknown name "bdy" (the variables are body, json, headers, query and path)`},
		{name: "empty", give: minimal + "    filter: ''\n",
			wantErr: `idemhook.yaml:5: routes[0].filter: empty: a CEL expression that is true for the events to deliver, e.g. 'body.type.startsWith("payment_intent.")'; remove filter to deliver every event`},
		{name: "a list", give: minimal + "    filter: [a]\n",
			wantErr: `idemhook.yaml:5: routes[0].filter: expected a CEL expression such as 'body.type.startsWith("payment_intent.")', got a list`},
		{name: "with items, each alone", give: minimal + "    items: {paths: [{path: \"[*]\", key: id}]}\n    filter: json\n", want: "json"},
		{name: "with items together", give: minimal + "    items: {mode: filter, paths: [{path: \"[*]\", key: id}]}\n    filter: json\n",
			wantErr: `idemhook.yaml:6: routes[0].filter: can't be combined with items in mode filter (its items:): ` + filterWithItems},
		{name: "with a provider's items", give: minimal + "    provider: whatsapp-cloud\n    secrets: [s3cret]\n    filter: json\n", want: "json"},
		{name: "with a provider's items together", give: minimal + "    provider: whatsapp-cloud\n    secrets: [s3cret]\n    items: {mode: filter}\n    filter: json\n",
			wantErr: `idemhook.yaml:8: routes[0].filter: can't be combined with items in mode filter (its items:): ` + filterWithItems},
		{name: "a provider's items turned off", give: minimal + "    provider: whatsapp-cloud\n    secrets: [s3cret]\n    items: none\n    filter: json\n", want: "json"},
		{name: "a queue route", give: minimal + "    deliver: queue\n    filter: '!json'\n", want: "!json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("idemhook.yaml", []byte(tt.give), envOf())
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("got %v,\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f := cfg.Routes[0].Filter; f == nil || f.String() != tt.want {
				t.Fatalf("filter %v, want %q", f, tt.want)
			}
		})
	}
	cfg, err := Parse("idemhook.yaml", []byte(minimal), envOf())
	if err != nil || cfg.Routes[0].Filter != nil {
		t.Fatalf("no filter: got %v, %v", cfg.Routes[0].Filter, err)
	}
}
