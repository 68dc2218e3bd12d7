package hookchain_test

import (
	"slices"
	"testing"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/hookchain"
)

func TestInstrument(t *testing.T) {
	var calls []string
	call := func(s string) { calls = append(calls, s) }
	check := func(t *testing.T, opts idemhook.Options, want ...string) {
		t.Helper()
		calls = nil
		if opts.OnDelivery != nil {
			opts.OnDelivery(idemhook.DeliveryInfo{})
		}
		if opts.OnStoreCall != nil {
			opts.OnStoreCall(idemhook.StoreCallInfo{})
		}
		if opts.OnBreakerChange != nil {
			opts.OnBreakerChange(true)
		}
		if !slices.Equal(calls, want) {
			t.Fatalf("calls %v; want %v", calls, want)
		}
	}
	mine := hookchain.Hooks{
		OnDelivery:      func(idemhook.DeliveryInfo) { call("delivery") },
		OnStoreCall:     func(idemhook.StoreCallInfo) { call("store") },
		OnBreakerChange: func(bool) { call("breaker") },
	}
	t.Run("none set before", func(t *testing.T) {
		check(t, hookchain.Instrument(idemhook.Options{}, mine), "delivery", "store", "breaker")
	})
	t.Run("the application's first", func(t *testing.T) {
		app := idemhook.Options{
			OnDelivery:      func(idemhook.DeliveryInfo) { call("app delivery") },
			OnBreakerChange: func(bool) { call("app breaker") },
		}
		check(t, hookchain.Instrument(app, mine), "app delivery", "delivery", "store", "app breaker", "breaker")
	})
	t.Run("a nil hook adds nothing", func(t *testing.T) {
		app := idemhook.Options{OnStoreCall: func(idemhook.StoreCallInfo) { call("app store") }}
		opts := hookchain.Instrument(app, hookchain.Hooks{OnDelivery: mine.OnDelivery})
		check(t, opts, "delivery", "app store")
		if opts.OnBreakerChange != nil {
			t.Error("OnBreakerChange set though neither side has one")
		}
	})
}
