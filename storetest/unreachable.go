package storetest

import (
	"context"
	"time"

	"github.com/idemhook/idemhook"
)

// Unreachable returns a store whose every call fails with err, as a store
// whose server is gone does. It is for testing what a middleware, its hooks
// and its metrics do when the store is down.
func Unreachable(err error) idemhook.Store { return unreachable{err} }

type unreachable struct{ err error }

func (u unreachable) Claim(context.Context, string, *idemhook.Record, time.Duration) (*idemhook.Record, error) {
	return nil, u.err
}
func (u unreachable) Complete(context.Context, string, *idemhook.Record, *idemhook.Record, time.Duration) error {
	return u.err
}
func (u unreachable) Release(context.Context, string, *idemhook.Record) error { return u.err }
func (u unreachable) Extend(context.Context, string, *idemhook.Record, time.Duration) error {
	return u.err
}
func (u unreachable) Get(context.Context, string) (*idemhook.Record, error) { return nil, u.err }
func (u unreachable) Delete(context.Context, string) (bool, error)          { return false, u.err }
