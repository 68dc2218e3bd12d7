package main

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/idemhook/idemhook/pgstore"
)

// postgresStore reads the fields of store: {driver: postgres}: url
// (required) and table.
func (p *parser) postgresStore(sf map[string]field, section *yaml.Node, sc *storeSettings) {
	const at = "store"
	before := len(p.errs)
	u, un, hasURL := p.str(sf, at, "url")
	switch {
	case !hasURL && len(p.errs) > before:
		// The url was given but is unusable, and the error says why.
	case !hasURL:
		n := section
		if d, ok := sf["driver"]; ok {
			n = d.value
		}
		p.errorf(n, join(at, "url"), "driver postgres needs url (postgres://user:password@host:5432/db)")
	default:
		if err := checkPostgresURL(u); err != nil {
			p.errorf(un, join(at, "url"), "invalid PostgreSQL URL %q: %v (want postgres://user:password@host:5432/db)", redactURL(u), err)
		}
		sc.URL = u
	}
	sc.Table = pgstore.DefaultTable
	if v, n, ok := p.str(sf, at, "table"); ok {
		if err := pgstore.ValidateTable(v); err != nil {
			p.errorf(n, join(at, "table"), "%v", err)
		}
		sc.Table = v
	}
}

// checkPostgresURL checks a PostgreSQL URL the way pgx will read it, without
// connecting. The error never holds the URL (nor its password).
func checkPostgresURL(u string) error {
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return errors.New("the scheme must be postgres:// or postgresql://")
	}
	if _, err := pgx.ParseConfig(u); err != nil {
		// pgx's message quotes the URL (password hidden) before the reason:
		// keep the reason only, the caller shows the URL.
		msg := err.Error()
		if _, reason, ok := strings.Cut(msg, "`: "); ok {
			msg = reason
		}
		return errors.New(msg)
	}
	return nil
}
