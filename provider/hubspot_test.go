package provider_test

import (
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
)

// TestHubSpotNodeVectors checks the requests signed by HubSpot's own SDK
// (@hubspot/api-client, Signature v3) and checked by its isValid: the ones
// it accepts pass, the one signed with another client secret fails. One
// vector is signed over the URI with the escapes HubSpot's guide lists
// decoded while the request carries them escaped.
func TestHubSpotNodeVectors(t *testing.T) {
	for _, v := range nodeVectors(t, "hubspot") {
		t.Run(v.Name, func(t *testing.T) {
			p, ok := checkNodeVector(t, "hubspot", v)
			if !ok {
				return // a forged vector, refused
			}
			if k, _ := p.Key(v.request(v.Body), []byte(v.Body)); k != v.Key {
				t.Fatalf("key %q, want %q", k, v.Key)
			}
			if err := verify(t, p, v.request(strings.Replace(v.Body, `"eventId":`, `"eventId": `, 1))); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("body with a space added: Verify = %v", err)
			}
			// The signed URL: another path fails.
			r := v.request(v.Body)
			r.URL.Path += "x"
			if err := verify(t, p, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("another path: Verify = %v", err)
			}
		})
	}
}

// TestHubSpot covers what the shared fixture cases don't: the timestamp in
// milliseconds, v1/v2-only requests, the URI's decoded escapes, the
// public_url option, the key of a batch and the preset's Items.
func TestHubSpot(t *testing.T) {
	const secret = "hubspot-client-secret"
	cfg := provider.Config{Secrets: []string{secret}, HubSpot: provider.HubSpotOptions{PublicURL: "https://hooks.example.com"}}
	p := newPreset(t, "hubspot", cfg, baseTime)
	body := `[{"eventId":100,"subscriptionId":1,"portalId":2,"occurredAt":1779999990000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":3}]`
	sent := baseTime.Add(-10 * time.Second)

	t.Run("timestamp", func(t *testing.T) {
		r := hubSpotRequest("https://hooks.example.com", "/hs", sent, secret, body)
		r.Header.Del(provider.HubSpotTimestampHeader)
		if err := verify(t, p, r); !errors.Is(err, provider.ErrMissingHeader) {
			t.Fatalf("no timestamp: %v", err)
		}
		r = hubSpotRequest("https://hooks.example.com", "/hs", sent, secret, body)
		r.Header.Set(provider.HubSpotTimestampHeader, "1779999990.5")
		if err := verify(t, p, r); !errors.Is(err, provider.ErrMalformedHeader) {
			t.Fatalf("timestamp not whole milliseconds: %v", err)
		}
		// Seconds where milliseconds belong read as 1970: out of tolerance.
		r = hubSpotRequest("https://hooks.example.com", "/hs", sent, secret, body)
		ts := strconv.FormatInt(sent.Unix(), 10)
		r.Header.Set(provider.HubSpotTimestampHeader, ts)
		r.Header.Set(provider.HubSpotSignatureV3Header, hmacB64([]byte(secret), "POSThttps://hooks.example.com/hs"+body+ts))
		if err := verify(t, p, r); !errors.Is(err, provider.ErrTimestampOutOfTolerance) {
			t.Fatalf("timestamp in seconds: %v", err)
		}
		// The timestamp is signed: another one fails.
		r = hubSpotRequest("https://hooks.example.com", "/hs", sent, secret, body)
		r.Header.Set(provider.HubSpotTimestampHeader, strconv.FormatInt(sent.UnixMilli()+1, 10))
		if err := verify(t, p, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("timestamp changed: %v", err)
		}
	})
	t.Run("v1 and v2 refused", func(t *testing.T) {
		r := post("/hs", body)
		r.Header.Set("X-HubSpot-Signature", hmacHex("unused", body))
		r.Header.Set("X-HubSpot-Signature-Version", "v1")
		err := verify(t, p, r)
		if !errors.Is(err, provider.ErrMissingHeader) || !strings.Contains(err.Error(), "v3") {
			t.Fatalf("v1 only: %v, want the v3 header missing, saying why", err)
		}
	})
	t.Run("escapes in the URI", func(t *testing.T) {
		target := "/hs?cb=https%3A%2F%2Fexample.com%2Fa%3Bb%2C%28c%29&who=a%40b&sp=a%20b"
		decoded := "/hs?cb=https://example.com/a;b,(c)&who=a@b&sp=a%20b"
		for _, signed := range []string{target, decoded} {
			r := hubSpotRequest("https://hooks.example.com", target, sent, secret, body)
			ts := r.Header.Get(provider.HubSpotTimestampHeader)
			r.Header.Set(provider.HubSpotSignatureV3Header, hmacB64([]byte(secret), "POSThttps://hooks.example.com"+signed+body+ts))
			if err := verify(t, p, r); err != nil {
				t.Fatalf("signed over %s: %v", signed, err)
			}
		}
		// %20 is not among the escapes HubSpot decodes.
		r := hubSpotRequest("https://hooks.example.com", target, sent, secret, body)
		ts := r.Header.Get(provider.HubSpotTimestampHeader)
		r.Header.Set(provider.HubSpotSignatureV3Header, hmacB64([]byte(secret), "POSThttps://hooks.example.com/hs?cb=https://example.com/a;b,(c)&who=a@b&sp=a b"+body+ts))
		if err := verify(t, p, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("signed with %%20 decoded: %v", err)
		}
	})
	t.Run("public_url", func(t *testing.T) {
		for _, give := range []string{"hooks.example.com", "https://", "https://hooks.example.com/?a=1"} {
			_, err := provider.New("hubspot", provider.Config{Secrets: []string{"s"}, HubSpot: provider.HubSpotOptions{PublicURL: give}})
			var oe *provider.OptionError
			if !errors.As(err, &oe) || oe.Option != "public_url" || !strings.Contains(err.Error(), "HubSpot") && !strings.Contains(err.Error(), "without user") {
				t.Errorf("public_url %q: %v, want an OptionError for public_url", give, err)
			}
		}
		var c provider.Config
		if err := c.SetOption("hubspot", "public_url", "https://hooks.example.com/base"); err != nil || c.HubSpot.PublicURL != "https://hooks.example.com/base" {
			t.Fatalf("SetOption: %v %+v", err, c.HubSpot)
		}
		c.Secrets = []string{secret}
		q := newPreset(t, "hubspot", c, baseTime)
		if err := verify(t, q, hubSpotRequest("https://hooks.example.com/base", "/hs", sent, secret, body)); err != nil {
			t.Fatalf("path prefix: %v", err)
		}
		// Without public_url, the URL is rebuilt from the request.
		q = newPreset(t, "hubspot", provider.Config{Secrets: []string{secret}}, baseTime)
		r := hubSpotRequest("https://hooks.example.com", "/hs", sent, secret, body)
		r2 := httptest.NewRequest("POST", "https://hooks.example.com/hs", strings.NewReader(body))
		r2.Header = r.Header
		if err := verify(t, q, r2); err != nil {
			t.Fatalf("URL from the request: %v", err)
		}
		if err := verify(t, q, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("plain http to example.com, signed for https: %v", err)
		}
	})
	t.Run("key and items", func(t *testing.T) {
		for _, tt := range []struct{ body, want string }{
			{body, "1:100"},
			{`[{"eventId":"abc","subscriptionId":"7"}]`, "7:abc"},
			// no subscription: the item's canonical hash, as Items keys it
			{`[{"eventId":"abc"}]`, canonicalKey(`{"eventId":"abc"}`)},
			{`[{"eventId":1,"attemptNumber":0},{"eventId":2,"attemptNumber":0}]`, ""},
			{`[]`, ""},
			{`[{"objectId":1}]`, canonicalKey(`{"objectId":1}`)},
			{`{"eventId":1}`, ""},
		} {
			if got, err := p.Key(nil, []byte(tt.body)); err != nil || got != tt.want {
				t.Errorf("Key(%s) = %q, %v; want %q", tt.body, got, err, tt.want)
			}
		}
		want := idemhook.ItemPath{Path: "[*]", Key: "{subscriptionId}:{eventId}"}
		if p.Items == nil || len(p.Items.Paths) != 1 || p.Items.Paths[0] != want || p.Items.Mode != "" {
			t.Fatalf("Items = %+v, want one path %+v", p.Items, want)
		}
		if rt := provider.ResponseTimeout("hubspot"); rt != 5*time.Second || p.RetryWindow != 24*time.Hour {
			t.Fatalf("ResponseTimeout %v RetryWindow %v", rt, p.RetryWindow)
		}
	})
}
