// Package pgschema creates the tables that idemhook's PostgreSQL components
// (pgstore, the audit trail) keep in a database several instances share.
//
// Every component checks its configured table name with [Table] and creates
// its table with [Create], under an advisory lock derived from the
// component and the table: CREATE TABLE IF NOT EXISTS is not atomic in
// PostgreSQL, and instances starting together would otherwise race on it.
package pgschema

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/idemhook/idemhook/internal/storeconf"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxIdent is PostgreSQL's limit on an identifier, in bytes.
const maxIdent = 63

// Check reports whether name is accepted as a table name: letters, digits
// and underscores, starting with a letter or an underscore, optionally
// schema-qualified, each part at most 63 characters. Such a name needs no
// quoting to be read, and can't smuggle SQL. The rule is
// [storeconf.CheckTable], which the gateway's configuration applies too
// without linking pgx.
func Check(name string) error { return storeconf.CheckTable(name) }

// Table checks name (see [Check]) and returns it as an identifier: the
// table, or the schema and the table.
func Table(name string) (pgx.Identifier, error) {
	if err := Check(name); err != nil {
		return nil, err
	}
	return pgx.Identifier(strings.Split(name, ".")), nil
}

// IndexName is the name of an index of table (the table's own name, without
// its schema) on what, table_what_idx, cut within PostgreSQL's 63 bytes.
func IndexName(table, what string) string {
	suffix := "_" + what + "_idx"
	if len(table)+len(suffix) > maxIdent {
		table = table[:maxIdent-len(suffix)]
	}
	return table + suffix
}

// Create runs ddl (statements that must be idempotent, such as CREATE
// TABLE IF NOT EXISTS) in one transaction on pool, under a transaction-level
// advisory lock derived from component and table, so that instances
// creating the same table wait for each other. Errors are prefixed with
// component and name the table.
func Create(ctx context.Context, pool *pgxpool.Pool, component string, table pgx.Identifier, ddl []string) error {
	name := strings.Join(table, ".")
	h := fnv.New64a()
	h.Write([]byte("idemhook " + component + " " + name)) //nolint:errcheck // never fails
	lock := int64(h.Sum64())
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
			return err
		}
		for _, q := range ddl {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: create table %s: %w", component, name, err)
	}
	return nil
}
