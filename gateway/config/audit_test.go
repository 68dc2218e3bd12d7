package config

import (
	"strings"
	"testing"

	"github.com/idemhook/idemhook/audit"
)

func TestConfigAudit(t *testing.T) {
	const routes = "routes:\n  - {path: /wh, upstream: http://127.0.0.1:3000/x, source: s}\n"
	tests := []struct {
		name    string
		give    string
		want    Audit // Instance is checked apart
		wantErr string
	}{
		{"sqlite store: sqlite sink in its file", "store: {driver: sqlite, path: a.db}\n",
			Audit{Sink: "sqlite", Path: "a.db", Retention: audit.DefaultRetention, Buffer: defaultAuditBuffer}, ""},
		{"memory store: a ring", "store: {driver: memory}\n",
			Audit{Sink: "memory", Retention: audit.DefaultRetention, Buffer: defaultAuditBuffer}, ""},
		{"redis store: a stream under the store's prefix", "store: {driver: redis, url: redis://127.0.0.1:6379/0, prefix: \"gw1:\"}\n",
			Audit{Sink: "redis", Key: "gw1:idemhook:audit", Retention: audit.DefaultRetention, Buffer: defaultAuditBuffer}, ""},
		{"redis with size, key, buffer, instance", "store: {driver: redis, url: redis://127.0.0.1:6379/0}\naudit: {size: 5000, key: trail, buffer: 50, instance: gw-7}\n",
			Audit{Sink: "redis", Key: "trail", Size: 5000, Retention: audit.DefaultRetention, Buffer: 50, Instance: "gw-7"}, ""},
		{"memory ring size", "store: {driver: memory}\naudit: {size: 100}\n",
			Audit{Sink: "memory", Size: 100, Retention: audit.DefaultRetention, Buffer: defaultAuditBuffer}, ""},
		{"sink redis needs the redis store", "store: {driver: memory}\naudit: {sink: redis}\n", Audit{},
			"idemhook.yaml:2: audit.sink: sink redis writes a stream on the store's Redis: it needs store.driver redis (store is memory)"},
		{"size only for memory and redis", "audit: {sink: sqlite, size: 10}\n", Audit{},
			"idemhook.yaml:1: audit.size: only used by sinks memory and redis (sink is sqlite)"},
		{"key only for redis", "store: {driver: memory}\naudit: {key: k}\n", Audit{},
			"idemhook.yaml:2: audit.key: only used by sink redis (sink is memory)"},
		{"bad buffer", "audit: {buffer: -3}\n", Audit{},
			`idemhook.yaml:1: audit.buffer: want a whole number from 1 to 100000000, got "-3"`},
		{"empty instance", "audit: {instance: \"\"}\n", Audit{},
			"idemhook.yaml:1: audit.instance: empty instance name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("idemhook.yaml", []byte(tt.give+routes), envOf())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.Audit
			if tt.want.Instance == "" {
				if got.Instance != defaultInstance() || got.Instance == "" {
					t.Errorf("Instance = %q, want the host name %q", got.Instance, defaultInstance())
				}
				got.Instance = ""
			}
			if got != tt.want {
				t.Errorf("audit =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}
