package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestConfigPostgresStore(t *testing.T) {
	const routes = "routes:\n  - path: /a\n    upstream: http://127.0.0.1:3000\n    source: a\n"
	t.Run("valid", func(t *testing.T) {
		text := "store:\n  driver: postgres\n  url: ${PG}\n  table: hooks.idemhook_keys\n" + routes
		cfg, err := parseConfig("f.yaml", []byte(text), envOf("PG", "postgres://gw:pw@db.internal:5432/shop"))
		if err != nil {
			t.Fatal(err)
		}
		want := storeSettings{Driver: "postgres", URL: "postgres://gw:pw@db.internal:5432/shop", Table: "hooks.idemhook_keys"}
		if fmt.Sprint(cfg.Store) != fmt.Sprint(want) {
			t.Fatalf("store %+v, want %+v", cfg.Store, want)
		}
		// The audit trail goes to the same database by default.
		if cfg.Audit.Sink != "postgres" || cfg.Audit.URL != want.URL || cfg.Audit.Table != "" {
			t.Fatalf("audit %+v, want the postgres sink on the store's URL", cfg.Audit)
		}
	})
	t.Run("defaults and audit overrides", func(t *testing.T) {
		text := "store: {driver: postgres, url: \"postgresql://127.0.0.1/x\"}\naudit: {sink: log}\n" + routes
		cfg, err := parseConfig("f.yaml", []byte(text), envOf())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Store.Table != "idemhook_keys" || cfg.Audit.Sink != "log" || cfg.Audit.URL != "" {
			t.Fatalf("store %+v audit %+v", cfg.Store, cfg.Audit)
		}
		text = "store: {driver: postgres, url: \"postgresql://127.0.0.1/x\"}\naudit: {sink: postgres, table: trail}\n" + routes
		if cfg, err = parseConfig("f.yaml", []byte(text), envOf()); err != nil || cfg.Audit.URL != "postgresql://127.0.0.1/x" || cfg.Audit.Table != "trail" {
			t.Fatalf("audit postgres without url: %+v, %v", cfg.Audit, err)
		}
	})
	for _, tt := range []struct{ name, store, want string }{
		{"no url", "store:\n  driver: postgres\n", "f.yaml:2: store.url: driver postgres needs url"},
		{"unset env", "store:\n  driver: postgres\n  url: ${NOPE}\n", "f.yaml:3: store.url: environment variable NOPE is not set"},
		{"bad scheme", "store:\n  driver: postgres\n  url: mysql://x\n", "f.yaml:3: store.url: invalid PostgreSQL URL \"mysql://x\": the scheme must be postgres:// or postgresql://"},
		{"bad port, password hidden", "store:\n  driver: postgres\n  url: postgres://u:s3cret@h:99999/db\n", "f.yaml:3: store.url: invalid PostgreSQL URL \"postgres://u:xxxxx@h:99999/db\": invalid port"},
		{"bad table", "store:\n  driver: postgres\n  url: postgres://h/db\n  table: \"x; DROP TABLE y\"\n", "f.yaml:4: store.table: table \"x; DROP TABLE y\": want letters, digits and underscores"},
		{"table for sqlite", "store:\n  driver: sqlite\n  table: keys\n", "f.yaml:3: store.table: only used by driver postgres (driver is sqlite)"},
		{"url for memory", "store:\n  driver: memory\n  url: postgres://h/db\n", "f.yaml:3: store.url: only used by drivers redis and postgres (driver is memory)"},
		{"prefix for postgres", "store:\n  driver: postgres\n  url: postgres://h/db\n  prefix: p\n", "f.yaml:4: store.prefix: only used by driver redis (driver is postgres)"},
		{"unknown driver", "store:\n  driver: mysql\n", "f.yaml:2: store.driver: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig("f.yaml", []byte(tt.store+routes), envOf())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tt.want)
			}
			if strings.Contains(fmt.Sprint(err), "s3cret") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}
