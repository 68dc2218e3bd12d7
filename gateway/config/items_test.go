package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/idemhook/idemhook"
)

func TestConfigItems(t *testing.T) {
	whatsApp := "    provider: whatsapp-cloud\n    secrets: [s3cret]\n"
	tests := []struct {
		name, give string
		want       *idemhook.Items // the route's Items once the file is read (the preset's are taken by the library)
		presetOff  bool            // the preset's items are turned off
		wantErr    string
	}{
		{name: "none", give: minimal},
		{name: "paths and mode", give: minimal + "    items:\n      mode: filter\n      paths:\n        - path: \"[*]\"\n          key: sg_event_id\n        - {path: \"data.events[*]\", key: \"{id}:{type}\"}\n",
			want: &idemhook.Items{Mode: idemhook.ItemsFilter, Paths: []idemhook.ItemPath{{Path: "[*]", Key: "sg_event_id"}, {Path: "data.events[*]", Key: "{id}:{type}"}}}},
		{name: "the preset's paths in mode filter", give: minimal + whatsApp + "    items: {mode: filter}\n",
			want: &idemhook.Items{Mode: idemhook.ItemsFilter, Paths: []idemhook.ItemPath{
				{Path: "entry[*].changes[*].value.messages[*]", Key: "id"},
				{Path: "entry[*].changes[*].value.statuses[*]", Key: "{id}:{status}:{recipient_id?}"}}}},
		{name: "the preset's turned off", give: minimal + whatsApp + "    items: none\n", presetOff: true},
		{name: "a path that names no array", give: minimal + "    items:\n      paths:\n        - path: entry.id\n          key: id\n",
			wantErr: `idemhook.yaml:7: routes[0].items.paths[0].path: invalid path "entry.id": it must end in "[*]": items are the elements of an array`},
		{name: "a key template not closed", give: minimal + "    items:\n      paths:\n        - path: \"[*]\"\n          key: \"{id\"\n",
			wantErr: `idemhook.yaml:8: routes[0].items.paths[0].key: invalid key "{id": a '{' without its '}'`},
		{name: "no key", give: minimal + "    items:\n      paths:\n        - path: \"[*]\"\n",
			wantErr: `idemhook.yaml:7: routes[0].items.paths[0].key: missing: what keys an item, e.g. id, or a template such as "{id}:{status}"`},
		{name: "a field of neither", give: minimal + "    items:\n      paths:\n        - path: \"[*]\"\n          key: id\n          kind: x\n",
			wantErr: `idemhook.yaml:9: routes[0].items.paths[0].kind: unknown field "kind" (want path and key)`},
		{name: "a mode of neither", give: minimal + "    items:\n      mode: each\n      paths: [{path: \"[*]\", key: id}]\n",
			wantErr: `idemhook.yaml:6: routes[0].items.mode: invalid mode "each" (want split or filter)`},
		{name: "a mode and nothing to split", give: minimal + "    items: {mode: split}\n",
			wantErr: `idemhook.yaml:5: routes[0].items: no paths: give items.paths, or a provider whose bodies hold items (hubspot, instagram, messenger, sendgrid, whatsapp-cloud)`},
		{name: "the preset's secret missing: its own error only", give: minimal + "    provider: whatsapp-cloud\n    secret_env: META_APP_SECRET\n    items: {mode: split}\n",
			wantErr: `idemhook.yaml:6: routes[0].secret_env: environment variable META_APP_SECRET is not set or empty (export it, or use secrets: [${META_APP_SECRET}])`},
		{name: "an unknown provider: its own error only", give: minimal + "    provider: whatsap-cloud\n    secrets: [s3cret]\n    items: {mode: split}\n",
			wantErr: `idemhook.yaml:5: routes[0].provider: unknown provider "whatsap-cloud": did you mean "whatsapp-cloud"?`},
		{name: "a word", give: minimal + "    items: all\n",
			wantErr: `idemhook.yaml:5: routes[0].items: expected a mapping (mode:, paths:) or none, got "all"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("idemhook.yaml", []byte(tt.give), envOf())
			if tt.wantErr != "" {
				// The list of known providers is cut: it grows.
				if got, _, _ := strings.Cut(fmt.Sprint(err), " (known: "); err == nil || got != tt.wantErr {
					t.Fatalf("got %v,\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := cfg.Routes[0].Route
			if !reflect.DeepEqual(r.Items, tt.want) {
				t.Errorf("Items %+v, want %+v", r.Items, tt.want)
			}
			if r.Preset != nil && (r.Preset.Items == nil) != tt.presetOff {
				t.Errorf("the preset's items: %+v, want them off: %v", r.Preset.Items, tt.presetOff)
			}
		})
	}
}
