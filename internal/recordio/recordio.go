// Package recordio is the SQL stores' (sqlitestore, pgstore) handling of
// encoded records. Its errors name the store and the operation or key, so
// that each store's messages say where they come from. A store that wants
// the bare error calls [idemhook.Record.UnmarshalBinary] itself.
package recordio

import (
	"fmt"

	"github.com/idemhook/idemhook"
)

// Encode encodes r for the operation op of the store named store (e.g.
// "sqlitestore"), refusing a nil record.
func Encode(store, op string, r *idemhook.Record) ([]byte, error) {
	if r == nil {
		return nil, fmt.Errorf("%s: %s: nil record", store, op)
	}
	b, err := r.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", store, op, err)
	}
	return b, nil
}

// Decode decodes the value stored under key into a new record. A value
// that can't be decoded is an error wrapping idemhook.ErrCorruptRecord,
// naming the store and the key.
func Decode(store, key string, value []byte) (*idemhook.Record, error) {
	r := new(idemhook.Record)
	if err := r.UnmarshalBinary(value); err != nil {
		return nil, fmt.Errorf("%s: key %q: %w", store, key, err)
	}
	return r, nil
}
