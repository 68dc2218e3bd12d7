package idemhook_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// A RouteSet checks the Sources of its routes against each other only:
// as Middleware.Route does among its own routes, it refuses a second route
// of a Source unless every route of the Source sets ShareKeys; the routes
// of another set, or of Middleware.Route, are not its to refuse.
func TestRouteSetChecksItsOwnRoutes(t *testing.T) {
	const mw = -1 // a route made by Middleware.Route rather than by a set
	type step struct {
		set     int // 0, 1: a set made by NewRouteSet; mw: Middleware.Route
		route   idemhook.Route
		wantErr bool
	}
	stripe := idemhook.Route{Source: "stripe"}
	shared := idemhook.Route{Source: "stripe", ShareKeys: true}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one Source per route", []step{{0, idemhook.Route{Source: "stripe-acme"}, false}, {0, idemhook.Route{Source: "stripe-globex"}, false}}},
		{"a second route of the set with the Source", []step{{0, stripe, false}, {0, stripe, true}, {0, stripe, true}}},
		{"ShareKeys on every route of the set", []step{{0, shared, false}, {0, shared, false}}},
		{"ShareKeys on the second only", []step{{0, stripe, false}, {0, shared, true}}},
		{"ShareKeys on the first only", []step{{0, shared, false}, {0, stripe, true}}},
		{"each set checks its own routes", []step{{0, stripe, false}, {1, stripe, false}, {1, stripe, true}, {0, stripe, true}}},
		{"the routes of Middleware.Route are a set of their own", []step{{mw, stripe, false}, {0, stripe, false}, {mw, stripe, true}, {0, stripe, true}}},
		{"a refused route claims no Source", []step{{0, idemhook.Route{Source: "stripe", TTL: -time.Second}, true}, {0, stripe, false}}},
		{"routes without a Source share nothing", []step{{0, idemhook.Route{}, false}, {0, idemhook.Route{}, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newMemEnv(t, idemhook.Options{})
			sets := []*idemhook.RouteSet{e.mw.NewRouteSet(), e.mw.NewRouteSet()}
			for i, s := range tt.steps {
				var err error
				owner := "Middleware"
				if s.set == mw {
					_, err = e.mw.Route(s.route)
				} else {
					_, err = sets[s.set].Route(s.route)
					owner = "RouteSet"
				}
				if (err != nil) != s.wantErr {
					t.Fatalf("step %d (%+v): error = %v, want error %v", i, s, err, s.wantErr)
				}
				var re *idemhook.RouteError
				if err != nil && s.route.TTL >= 0 && (!errors.As(err, &re) || re.Field != "Source" || re.Source != s.route.Source ||
					!strings.Contains(err.Error(), "is already the Source of another route of this "+owner) || !strings.Contains(err.Error(), "ShareKeys")) {
					t.Errorf("step %d: error = %#v, want a *RouteError for field Source, of this %s, that names ShareKeys", i, err, owner)
				}
			}
		})
	}
}

// Routes of two sets with one Source, neither setting ShareKeys, share
// their keys: an event answered through the first set's route (the
// configuration before a reload) is replayed through the second's, and
// the other way round, and each event runs the handler once.
func TestRouteSetRoutesShareTheirKeysAcrossSets(t *testing.T) {
	e := newMemEnv(t, idemhook.Options{})
	h := &counter{}
	route := func(set *idemhook.RouteSet) http.Handler {
		t.Helper()
		wrap, err := set.Route(idemhook.Route{Source: "stripe", Scope: unscoped})
		if err != nil {
			t.Fatal(err)
		}
		return wrap(h)
	}
	before := route(e.mw.NewRouteSet())
	after := route(e.mw.NewRouteSet())
	expect := func(what string, r *httptest.ResponseRecorder, replayed bool, body string, runs int64) {
		t.Helper()
		if got := r.Header().Get(idemhook.ReplayedHeader) == "true"; r.Code != http.StatusOK || got != replayed || r.Body.String() != body || h.n.Load() != runs {
			t.Fatalf("%s: %d %q replayed %v, %d runs; want 200 %q replayed %v, %d runs", what, r.Code, r.Body, got, h.n.Load(), body, replayed, runs)
		}
	}
	expect("evt_1 before", send(before, "{}", "Idempotency-Key", "evt_1"), false, `{"execution":1}`, 1)
	expect("evt_1 after", send(after, "{}", "Idempotency-Key", "evt_1"), true, `{"execution":1}`, 1)
	expect("evt_2 after", send(after, "{}", "Idempotency-Key", "evt_2"), false, `{"execution":2}`, 2)
	expect("evt_2 before", send(before, "{}", "Idempotency-Key", "evt_2"), true, `{"execution":2}`, 2)
}

// A program that replaces its routes while it runs (on a configuration
// reload, say) makes each generation in a RouteSet of its own: within one,
// two routes can't share a Source by mistake; a new generation takes over
// the keys of the last one, so an event answered before the reload is
// replayed after it.
func ExampleMiddleware_NewRouteSet() {
	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	runs := 0
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprintf(w, "run %d", runs)
	})
	load := func() http.Handler {
		set := mw.NewRouteSet()
		stripe, _ := set.Route(idemhook.Route{Source: "stripe"})
		if _, err := set.Route(idemhook.Route{Source: "stripe"}); err != nil {
			fmt.Println("refused: a second route of the set with Source stripe")
		}
		return stripe(handler)
	}
	deliver := func(h http.Handler) {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "evt_1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Body, "replayed:", w.Header().Get(idemhook.ReplayedHeader) == "true")
	}
	deliver(load())
	deliver(load()) // the reloaded route replays the answer of the first
	// Output:
	// refused: a second route of the set with Source stripe
	// run 1 replayed: false
	// refused: a second route of the set with Source stripe
	// run 1 replayed: true
}
