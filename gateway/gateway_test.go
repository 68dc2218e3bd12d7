package gateway_test

import (
	"errors"
	"net/url"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway"
	"github.com/idemhook/idemhook/gateway/config"
)

// A Config built by hand that the gateway could not serve (here two routes
// on one path, which would make ServeMux panic) is refused by New with its
// problems, before anything is opened; Reload refuses it the same way and
// the running configuration keeps serving.
func TestNewRefusesAConfigItCannotServe(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:1/hook")
	good := &config.Config{
		Store:  config.Store{Driver: "memory"},
		Audit:  config.Audit{Sink: "none"},
		Routes: []config.Route{{Path: "/a", Upstream: up, Route: idemhook.Route{Source: "a"}}},
	}
	bad := *good
	bad.Routes = append(append([]config.Route(nil), good.Routes...), config.Route{Path: "/a", Upstream: up, Route: idemhook.Route{Source: "b"}})

	var errs config.Errors
	if g, err := gateway.New(t.Context(), &bad, gateway.Options{}); !errors.As(err, &errs) || g != nil {
		t.Fatalf("New(two routes on /a) = %v, %v; want config.Errors", g, err)
	}
	g, err := gateway.New(t.Context(), good, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(t.Context())
	if err := g.Reload(&bad); !errors.As(err, &errs) {
		t.Fatalf("Reload(two routes on /a) = %v, want config.Errors", err)
	}
}
