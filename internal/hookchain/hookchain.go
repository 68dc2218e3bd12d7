// Package hookchain adds an observer's hook to one an application may
// already have set, for the Instrument methods of promhook, otelhook and
// audithook.
package hookchain

// Then returns a hook that calls first, when set, and then next.
func Then[T any](first, next func(T)) func(T) {
	if first == nil {
		return next
	}
	return func(v T) { first(v); next(v) }
}
