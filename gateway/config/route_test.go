package config

import (
	"testing"
)

// Two routes may share a source, and so their keys, when both say so.
func TestConfigShareKeys(t *testing.T) {
	cfg, err := Parse("idemhook.yaml", []byte("routes:\n"+
		"  - {path: /a, upstream: 'http://h/', source: s, share_keys: true}\n"+
		"  - {path: /b, upstream: 'http://h/', source: s, share_keys: true}\n"), envOf())
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Routes[0].ShareKeys || !cfg.Routes[1].ShareKeys {
		t.Fatalf("share_keys not read: %+v", cfg.Routes)
	}
}
