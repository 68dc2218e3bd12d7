// Package hookchain adds an observer's hooks to those an application may
// already have set, for the Instrument methods of promhook, otelhook and
// audithook.
package hookchain

import "github.com/idemhook/idemhook"

// Hooks are an observer's hooks. A nil one adds nothing.
type Hooks struct {
	OnDelivery      func(idemhook.DeliveryInfo)
	OnStoreCall     func(idemhook.StoreCallInfo)
	OnBreakerChange func(open bool)
}

// Instrument returns opts with h's hooks added: a hook already set in
// opts is kept and called first.
func Instrument(opts idemhook.Options, h Hooks) idemhook.Options {
	opts.OnDelivery = then(opts.OnDelivery, h.OnDelivery)
	opts.OnStoreCall = then(opts.OnStoreCall, h.OnStoreCall)
	opts.OnBreakerChange = then(opts.OnBreakerChange, h.OnBreakerChange)
	return opts
}

// then returns a hook that calls first and then next, either of which may
// be nil.
func then[T any](first, next func(T)) func(T) {
	switch {
	case first == nil:
		return next
	case next == nil:
		return first
	}
	return func(v T) { first(v); next(v) }
}
