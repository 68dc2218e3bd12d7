package idemhook_test

import (
	"testing"

	"github.com/idemhook/idemhook"
)

// Route.Stores is the one rule of which answers are stored and replayed:
// every 2xx, plus StoreStatuses; the middleware and the gateway's queue
// both use it.
func TestRouteStores(t *testing.T) {
	rt := idemhook.Route{StoreStatuses: []int{410}}
	for status, want := range map[int]bool{199: false, 200: true, 202: true, 299: true, 300: false, 404: false, 410: true, 500: false} {
		if got := rt.Stores(status); got != want {
			t.Errorf("Stores(%d) = %v; want %v", status, got, want)
		}
	}
	if (idemhook.Route{}).Stores(410) {
		t.Error("a route without StoreStatuses stores a 410")
	}
}
