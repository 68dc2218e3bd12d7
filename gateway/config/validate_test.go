package config

import (
	"errors"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/filter"
)

// A Config built by hand is checked for what the gateway needs to serve it,
// with every problem at once; one that Parse returned passes.
func TestValidate(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:3000/hook")
	route := func(path, source string, edit ...func(*Route)) Route {
		rc := Route{Path: path, Upstream: up, Route: idemhook.Route{Source: source}}
		for _, e := range edit {
			e(&rc)
		}
		return rc
	}
	share := func(rc *Route) { rc.ShareKeys = true }
	json, err := filter.Compile("json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		routes []Route
		want   []string
	}{
		{"valid", []Route{route("/a", "a"), route("/b/", "b")}, nil},
		{"shared source with ShareKeys", []Route{route("/a", "s", share), route("/b", "s", share)}, nil},
		{"no slash, no upstream, no source", []Route{route("a", "", func(rc *Route) { rc.Upstream = nil })}, []string{
			`routes[0].path: "a": a route's path starts with /`,
			`routes[0].upstream: missing or not an http(s) URL with a host: the URL deliveries are forwarded to, e.g. http://127.0.0.1:3000/webhook`,
			`routes[0].source: missing: the provider's label, e.g. stone`,
		}},
		{"one path twice", []Route{route("/a", "a"), route("/a", "b")}, []string{
			`routes[1].path: /a is also the path of routes[0]: give each route its own`,
		}},
		{"an upstream that is no http URL", []Route{route("/a", "a", func(rc *Route) { rc.Upstream = &url.URL{Scheme: "ftp", Host: "h"} })}, []string{
			`routes[0].upstream: missing or not an http(s) URL with a host: the URL deliveries are forwarded to, e.g. http://127.0.0.1:3000/webhook`,
		}},
		{"shared source without ShareKeys", []Route{route("/a", "s"), route("/b", "s", share)}, []string{
			`routes[0].source: source "s" is also used by routes[1], line 0: routes with one source share keys and answer each other's deliveries; give each route its own source, or set share_keys: true on every route of the source`,
		}},
		{"a route the library refuses", []Route{route("/a", "a", func(rc *Route) { rc.Route.TTL = -time.Second })}, []string{
			`routes[0].route.TTL: idemhook: Route "a": TTL -1s is negative`,
		}},
		{"a filter with items", []Route{route("/a", "a", func(rc *Route) {
			rc.Filter = json
			rc.Route.Items = &idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "id"}}, Mode: idemhook.ItemsFilter}
		})}, []string{
			`routes[0].filter: ` + filterWithItems,
		}},
		{"a filter with items, each alone", []Route{route("/a", "a", func(rc *Route) {
			rc.Filter = json
			rc.Route.Items = &idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "id"}}}
		})}, nil},
		{"a filter", []Route{route("/a", "a", func(rc *Route) { rc.Filter = json })}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (&Config{Routes: tt.routes}).Validate()
			var errs Errors
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.As(err, &errs) {
				t.Fatalf("Validate() = %v, want Errors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Field+": "+e.Msg)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate():\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
	cfg, err := Parse("idemhook.yaml", []byte("routes:\n  - path: /a\n    upstream: http://h/\n    source: s\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() of a parsed Config = %v", err)
	}
}
