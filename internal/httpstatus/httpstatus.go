// Package httpstatus holds the one rule on answers' statuses that the
// middleware, the gateway and the queue share.
package httpstatus

// IsSuccess reports whether status is a 2xx: an answer every route stores
// and replays (idemhook.Route.Stores adds the route's StoreStatuses), a
// batched item that succeeded, and a backend's answer that delivered a
// queued event or that a preset's SuccessBody rewrites.
func IsSuccess(status int) bool { return status >= 200 && status <= 299 }
