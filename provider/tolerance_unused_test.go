package provider_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// TestToleranceWithoutTimestamp: a tolerance set for a provider that signs
// no timestamp would do nothing while the configuration suggests replays
// are bounded; like an unknown option, it is an error that says so. The
// providers that sign one accept it.
func TestToleranceWithoutTimestamp(t *testing.T) {
	for _, name := range []string{"asaas", "evolution", "github", "ifood", "shopify", "whatsapp-cloud"} {
		_, err := provider.New(name, provider.Config{Secrets: []string{"s"}, Tolerance: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "tolerance") {
			t.Errorf("New(%s) with a tolerance = %v, want an error about tolerance", name, err)
		}
	}
	for _, name := range []string{"mercadopago", "paddle", "slack", "stripe"} {
		if _, err := provider.New(name, provider.Config{Secrets: []string{"s"}, Tolerance: time.Minute}); err != nil {
			t.Errorf("New(%s) with a tolerance: %v", name, err)
		}
	}
	if _, err := provider.New("standardwebhooks", provider.Config{Secrets: []string{stdWebhooksSecret}, Tolerance: time.Minute}); err != nil {
		t.Errorf("New(standardwebhooks) with a tolerance: %v", err)
	}
}
