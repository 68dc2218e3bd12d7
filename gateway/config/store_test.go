package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestConfigPostgresStore(t *testing.T) {
	const routes = "routes:\n  - path: /a\n    upstream: http://127.0.0.1:3000\n    source: a\n"
	t.Run("valid", func(t *testing.T) {
		text := "store:\n  driver: postgres\n  url: ${PG}\n  table: hooks.idemhook_keys\n" + routes
		cfg, err := Parse("f.yaml", []byte(text), envOf("PG", "postgres://gw:pw@db.internal:5432/shop"))
		if err != nil {
			t.Fatal(err)
		}
		want := Store{Driver: "postgres", URL: "postgres://gw:pw@db.internal:5432/shop", Table: "hooks.idemhook_keys"}
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
		cfg, err := Parse("f.yaml", []byte(text), envOf())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Store.Table != "idemhook_keys" || cfg.Audit.Sink != "log" || cfg.Audit.URL != "" {
			t.Fatalf("store %+v audit %+v", cfg.Store, cfg.Audit)
		}
		text = "store: {driver: postgres, url: \"postgresql://127.0.0.1/x\"}\naudit: {sink: postgres, table: trail}\n" + routes
		if cfg, err = Parse("f.yaml", []byte(text), envOf()); err != nil || cfg.Audit.URL != "postgresql://127.0.0.1/x" || cfg.Audit.Table != "trail" {
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
		{"compact_keys for sqlite", "store:\n  driver: sqlite\n  compact_keys: true\n", "f.yaml:3: store.compact_keys: only used by driver redis (driver is sqlite)"},
		{"compact_keys not a boolean", "store:\n  driver: redis\n  url: redis://h:6379/0\n  compact_keys: yes\n", "f.yaml:4: store.compact_keys: invalid compact_keys \"yes\" (want true or false)"},
		{"unknown driver", "store:\n  driver: mysql\n", "f.yaml:2: store.driver: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.store+routes), envOf(), clients)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tt.want)
			}
			if strings.Contains(fmt.Sprint(err), "s3cret") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

// TestConfigRedisWait: wait_replicas, wait_timeout and wait_aof, read into
// Store with the store's default timeout, and every way they are refused,
// at their line and field.
func TestConfigRedisWait(t *testing.T) {
	const routes = "routes:\n  - path: /a\n    upstream: http://127.0.0.1:3000\n    source: a\n"
	valid := []struct {
		name, store string
		want        Store
	}{
		{"off", "store: {driver: redis, url: \"redis://h:6379/0\"}\n",
			Store{Driver: "redis", URL: "redis://h:6379/0"}},
		{"replicas, the default timeout", "store: {driver: redis, url: \"redis://h:6379/0\", wait_replicas: 1}\n",
			Store{Driver: "redis", URL: "redis://h:6379/0", WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond}},
		{"replicas and timeout, Sentinel", "store: {driver: redis, addrs: [\"s1:26379\", \"s2:26379\"], master_name: m, wait_replicas: 2, wait_timeout: 50ms}\n",
			Store{Driver: "redis", Addrs: []string{"s1:26379", "s2:26379"}, MasterName: "m", WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond}},
		{"aof alone", "store: {driver: redis, url: \"redis://h:6379/0\", wait_aof: true}\n",
			Store{Driver: "redis", URL: "redis://h:6379/0", WaitAOF: true, WaitTimeout: 100 * time.Millisecond}},
		{"zero replicas", "store: {driver: redis, url: \"redis://h:6379/0\", wait_replicas: 0}\n",
			Store{Driver: "redis", URL: "redis://h:6379/0"}},
		{"a longer store timeout", "store: {driver: redis, url: \"redis://h:6379/0\", timeout: 2s, wait_replicas: 1, wait_timeout: 1s}\n",
			Store{Driver: "redis", URL: "redis://h:6379/0", Timeout: 2 * time.Second, WaitReplicas: 1, WaitTimeout: time.Second}},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(tt.store+routes), envOf())
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(cfg.Store) != fmt.Sprint(tt.want) {
				t.Fatalf("store %+v\nwant  %+v", cfg.Store, tt.want)
			}
		})
	}
	invalid := []struct {
		name, store, want string
	}{
		{"negative count", "store:\n  driver: redis\n  url: redis://h:6379/0\n  wait_replicas: -1\n",
			"f.yaml:4: store.wait_replicas: want a whole number from 0 (no waiting) to 100, got \"-1\""},
		{"not a count", "store:\n  driver: redis\n  url: redis://h:6379/0\n  wait_replicas: one\n",
			"f.yaml:4: store.wait_replicas: want a whole number from 0 (no waiting) to 100, got \"one\""},
		{"timeout without replicas", "store:\n  driver: redis\n  url: redis://h:6379/0\n  wait_timeout: 50ms\n",
			"f.yaml:4: store.wait_timeout: does nothing without wait_replicas or wait_aof"},
		{"timeout with zero replicas", "store:\n  driver: redis\n  url: redis://h:6379/0\n  wait_replicas: 0\n  wait_timeout: 50ms\n",
			"f.yaml:5: store.wait_timeout: does nothing without wait_replicas or wait_aof"},
		{"timeout not positive", "store:\n  driver: redis\n  url: redis://h:6379/0\n  wait_replicas: 1\n  wait_timeout: 0s\n",
			"f.yaml:5: store.wait_timeout: must be positive, got \"0s\""},
		{"timeout not below the store's", "store:\n  driver: redis\n  url: redis://h:6379/0\n  wait_replicas: 1\n  wait_timeout: 250ms\n",
			"f.yaml:5: store.wait_timeout: 250ms is not below store.timeout 250ms: the store call would give up before WAIT answers"},
		{"store timeout under the default wait", "store:\n  driver: redis\n  url: redis://h:6379/0\n  timeout: 80ms\n  wait_replicas: 1\n",
			"f.yaml:4: store.timeout: 80ms is not above wait_timeout's default 100ms: the store call would give up before WAIT answers (set a shorter wait_timeout)"},
		{"aof not a boolean", "store:\n  driver: redis\n  url: redis://h:6379/0\n  wait_aof: yes\n",
			"f.yaml:4: store.wait_aof: invalid wait_aof \"yes\" (want true or false)"},
		{"cluster", "store:\n  driver: redis\n  addrs: [\"n1:6379\", \"n2:6379\", \"n3:6379\"]\n  wait_replicas: 1\n",
			"f.yaml:4: store.wait_replicas: not available on a Redis Cluster (several addrs and no master_name): WAIT has no key, so the cluster client can't send it after the write it counts; use a standalone server or Sentinel, or leave it off"},
		{"cluster, aof", "store:\n  driver: redis\n  addrs: [\"n1:6379\", \"n2:6379\"]\n  wait_aof: true\n",
			"f.yaml:4: store.wait_aof: not available on a Redis Cluster (several addrs and no master_name): WAIT has no key, so the cluster client can't send it after the write it counts; use a standalone server or Sentinel, or leave it off"},
		{"replicas for postgres", "store:\n  driver: postgres\n  url: postgres://h/db\n  wait_replicas: 1\n",
			"f.yaml:4: store.wait_replicas: only used by driver redis (driver is postgres)"},
		{"timeout for sqlite", "store:\n  driver: sqlite\n  wait_timeout: 50ms\n",
			"f.yaml:3: store.wait_timeout: only used by driver redis (driver is sqlite)"},
		{"aof for memory", "store:\n  driver: memory\n  wait_aof: true\n",
			"f.yaml:3: store.wait_aof: only used by driver redis (driver is memory)"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.store+routes), envOf())
			if err == nil || err.Error() != tt.want {
				t.Fatalf("got %v\nwant %s", err, tt.want)
			}
		})
	}
}
