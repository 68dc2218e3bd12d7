// Package sqlschema creates and versions the tables that idemhook's SQLite
// components (sqlitestore, the audit trail) keep in a shared database file.
//
// Every component records the version of its schema in the table
// idemhook_schema (component, version), so that an older idemhook refuses a
// file migrated by a newer one instead of misreading it.
package sqlschema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Migrate runs ddl (statements that must be idempotent, such as CREATE
// TABLE IF NOT EXISTS) in one transaction on db and records version as the
// schema version of component. It refuses a database whose recorded version
// for component is newer than version. Errors are prefixed with component.
func Migrate(ctx context.Context, db *sql.DB, component string, version int, ddl []string) error {
	return Upgrade(ctx, db, component, version, ddl, nil)
}

// Upgrade is Migrate with a step for older files. After the checks and
// before ddl, upgrade (if not nil) runs in the same transaction with the
// version recorded so far (0 for a component never recorded). It changes
// what ddl's idempotent statements can't, such as adding a column.
func Upgrade(ctx context.Context, db *sql.DB, component string, version int, ddl []string, upgrade func(ctx context.Context, tx *sql.Tx, from int) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: create schema: %w", component, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS idemhook_schema (
		component TEXT PRIMARY KEY NOT NULL,
		version   INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("%s: create schema: %w", component, err)
	}
	var have int
	err = tx.QueryRowContext(ctx, `SELECT version FROM idemhook_schema WHERE component = ?`, component).Scan(&have)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("%s: read schema version: %w", component, err)
	case have > version:
		return fmt.Errorf("%s: the database has schema version %d, this build knows up to %d: upgrade idemhook or use another file", component, have, version)
	}
	if upgrade != nil && have < version {
		if err := upgrade(ctx, tx, have); err != nil {
			return fmt.Errorf("%s: upgrade schema from version %d: %w", component, have, err)
		}
	}
	for _, q := range ddl {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: create schema: %w", component, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO idemhook_schema (component, version) VALUES (?1, ?2)
		ON CONFLICT (component) DO UPDATE SET version = excluded.version`, component, version); err != nil {
		return fmt.Errorf("%s: record schema version: %w", component, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: create schema: %w", component, err)
	}
	return nil
}
