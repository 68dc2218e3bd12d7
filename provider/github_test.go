package provider_test

import (
	"testing"

	"github.com/idemhook/idemhook/provider"
)

func TestGitHubAndShopifyKeyFallbacks(t *testing.T) {
	gh := newPreset(t, "github", provider.Config{Secrets: []string{"s"}}, baseTime)
	r := post("/", `{}`)
	r.Header.Set("X-GitHub-Delivery", "d-1")
	if k, _ := gh.Key(r, nil); k != "d-1" {
		t.Fatalf("github key without hook id = %q", k)
	}
	sh := newPreset(t, "shopify", provider.Config{Secrets: []string{"s"}}, baseTime)
	r = post("/", `{}`)
	r.Header.Set("X-Shopify-Event-Id", "ev-1")
	r.Header.Set("X-Shopify-Topic", "orders/create")
	if k, _ := sh.Key(r, nil); k != "ev-1:orders/create" {
		t.Fatalf("shopify key without webhook id = %q", k)
	}
	r.Header.Del("X-Shopify-Topic")
	if k, _ := sh.Key(r, nil); k != "" {
		t.Fatalf("shopify key with only an event id = %q, want \"\"", k)
	}
}
