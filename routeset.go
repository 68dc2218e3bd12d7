package idemhook

import (
	"fmt"
	"net/http"
	"sync"
)

// A RouteSet makes routes of one [Middleware] whose Sources are checked
// against each other only. Within a set, as among the routes of
// [Middleware.Route], a second route with a Source is refused unless every
// route of that Source sets Route.ShareKeys. Routes of different sets (or
// of a set and of Middleware.Route) are not checked against each other:
// with one Source they share their keys, whatever ShareKeys says.
//
// A set is for a program that replaces its routes while it runs: the
// gateway makes one set per configuration it loads, so that the routes of
// a reloaded configuration take over the keys of the routes they replace
// (an event answered before the reload is replayed after it, not run
// again), while two routes of one configuration still can't share a
// Source by mistake. Create one with [Middleware.NewRouteSet]; its methods
// are safe for concurrent use.
type RouteSet struct {
	m  *Middleware
	of string // what the set is in errors: "Middleware" or "RouteSet"

	mu      sync.Mutex
	sources map[string]bool // the Source of each route made, and whether it set ShareKeys
}

// NewRouteSet returns an empty set of routes of m (see [RouteSet]).
func (m *Middleware) NewRouteSet() *RouteSet {
	return &RouteSet{m: m, of: "RouteSet"}
}

// Route is [Middleware.Route] for a route of s: it refuses a Route that
// [Route.Validate] refuses, and one whose Source another route of s
// already has, unless every route of that Source sets ShareKeys.
func (s *RouteSet) Route(rt Route) (func(http.Handler) http.Handler, error) {
	return s.m.route(rt, s)
}

// addSource records rt's Source as used by a route of s, or refuses it
// when another route of s has it and they don't both set ShareKeys. A
// route with no Source claims nothing, so it shares nothing.
func (s *RouteSet) addSource(rt *Route) error {
	if rt.Source == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	shares, used := s.sources[rt.Source]
	if used && !(shares && rt.ShareKeys) {
		return &RouteError{Source: rt.Source, Field: "Source", Reason: fmt.Sprintf(
			"Source %q is already the Source of another route of this %s: routes with one Source share their keys, "+
				"so one would answer a delivery with the stored answer of the other; give each route a Source of its own "+
				"(such as \"%s-<tenant>\"), or set ShareKeys on every route of the Source if they mean to share keys",
			rt.Source, s.of, rt.Source)}
	}
	if s.sources == nil {
		s.sources = make(map[string]bool)
	}
	s.sources[rt.Source] = rt.ShareKeys
	return nil
}
