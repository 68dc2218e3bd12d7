// Package storeconf holds what the gateway's configuration and the stores
// and audit sinks agree on: their defaults and the check of a PostgreSQL
// table name. It imports no database client, so that reading a
// configuration (package gateway/config) links none: the stores refer to
// these values rather than config referring to the stores.
package storeconf

import (
	"fmt"
	"regexp"
	"time"
)

// PostgresTable is the table pgstore keeps its records in by default
// (pgstore.DefaultTable).
const PostgresTable = "idemhook_keys"

// RedisWaitTimeout is the bound of each WAIT of redisstore when waiting for
// replicas is on and no bound is given (redisstore.DefaultWaitTimeout).
const RedisWaitTimeout = 100 * time.Millisecond

// RedisAuditKey is the key of the stream the Redis audit sink writes by
// default (redisaudit.DefaultKey).
const RedisAuditKey = "idemhook:audit"

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// CheckTable reports whether name is accepted as a PostgreSQL table name:
// letters, digits and underscores, starting with a letter or an underscore,
// optionally schema-qualified, each part at most 63 characters. Such a name
// needs no quoting to be read, and can't smuggle SQL.
func CheckTable(name string) error {
	if !tableName.MatchString(name) {
		return fmt.Errorf("table %q: want letters, digits and underscores, starting with a letter or an underscore, optionally schema.table, each part at most 63 characters", name)
	}
	return nil
}
