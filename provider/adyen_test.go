package provider_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// The HMAC keys of the Adyen fixtures, hex as Adyen's Customer Area shows
// them.
const (
	adyenTestKey  = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	adyenOtherKey = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

// TestAdyenNodeVectors: exactly the bodies Adyen's own SDK
// (@adyen/api-library's HmacValidator) signed and validated pass; those it
// refuses (an item signed with another key, alone or among valid ones)
// fail with no matching signature. Each valid one gives the vector's key,
// and still passes with the key among rotated ones.
func TestAdyenNodeVectors(t *testing.T) {
	for _, v := range nodeVectors(t, "adyen") {
		t.Run(v.Name, func(t *testing.T) {
			p, ok := checkNodeVector(t, "adyen", v)
			if !ok {
				return // a forged vector, refused
			}
			rotated := newPreset(t, "adyen", provider.Config{Secrets: []string{adyenOtherKey, strings.ToLower(v.Secret)}}, time.Unix(v.Now, 0))
			if err := verify(t, rotated, v.request(v.Body)); err != nil {
				t.Fatalf("with the key second of two: %v", err)
			}
			// The signed amount changed: refused. A field Adyen does not
			// sign changed: still accepted (the scheme covers eight fields).
			if err := verify(t, p, v.request(strings.Replace(v.Body, `"currency":"`, `"currency":"X`, 1))); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("signed field changed: Verify = %v", err)
			}
			if err := verify(t, p, v.request(strings.Replace(v.Body, `"live":"false"`, `"live":"true"`, 1))); err != nil {
				t.Fatalf("unsigned field changed: Verify = %v", err)
			}
		})
	}
}

// adyenBody is a Standard webhook body of one item per element of items,
// each "<pspReference> <eventCode> <success>", signed as Adyen documents
// with the hex key secret.
func adyenBody(t testing.TB, secret string, items ...string) string {
	k, err := hex.DecodeString(secret)
	if err != nil {
		t.Fatalf("bad test key %q", secret)
	}
	var parts []string
	for _, it := range items {
		f := strings.Fields(it)
		sig := hmacB64(k, strings.Join([]string{f[0], "", "TestMerchant", "order-1", "1130", "EUR", f[1], f[2]}, ":"))
		parts = append(parts, `{"NotificationRequestItem":{"additionalData":{"hmacSignature":"`+sig+`"},"amount":{"currency":"EUR","value":1130},`+
			`"eventCode":"`+f[1]+`","eventDate":"2026-11-30T10:00:00+01:00","merchantAccountCode":"TestMerchant","merchantReference":"order-1",`+
			`"originalReference":"","paymentMethod":"visa","pspReference":"`+f[0]+`","success":"`+f[2]+`"}}`)
	}
	return `{"live":"false","notificationItems":[` + strings.Join(parts, ",") + `]}`
}

func TestAdyen(t *testing.T) {
	p := newPreset(t, "adyen", provider.Config{Secrets: []string{adyenTestKey}}, baseTime)
	valid := adyenBody(t, adyenTestKey, "7914073381342284 AUTHORISATION true")
	tests := []struct {
		name string
		give string
		want error // nil: passes
	}{
		{"one item", valid, nil},
		{"two items", adyenBody(t, adyenTestKey, "7914073381342284 AUTHORISATION true", "8825408195409505 CAPTURE true"), nil},
		{"the second of two items altered", strings.Replace(adyenBody(t, adyenTestKey, "7914073381342284 AUTHORISATION true", "8825408195409505 CAPTURE true"),
			`"pspReference":"8825408195409505"`, `"pspReference":"8825408195409506"`, 1), provider.ErrNoMatchingSignature},
		{"success flipped", strings.Replace(valid, `"success":"true"`, `"success":"false"`, 1), provider.ErrNoMatchingSignature},
		{"no signature", strings.Replace(valid, `"hmacSignature"`, `"hmacSig"`, 1), provider.ErrMalformedBody},
		{"signature not base64", strings.Replace(valid, `"hmacSignature":"`, `"hmacSignature":"*`, 1), provider.ErrMalformedBody},
		{"signature an object", `{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":{}}}}]}`, provider.ErrMalformedBody},
		{"no items", `{"live":"false","notificationItems":[]}`, provider.ErrMalformedBody},
		{"not JSON", `pspReference=1`, provider.ErrMalformedBody},
		{"an item that is not an object", `{"notificationItems":[{"NotificationRequestItem":"x"}]}`, provider.ErrMalformedBody},
		// encoding/json would match "PSPReference" to pspReference: the
		// signed value would then not be the one a JavaScript backend reads.
		{"a field name in another case", strings.Replace(valid, `"pspReference":"7914073381342284"`, `"pspReference":"EVIL","PSPReference":"7914073381342284"`, 1), provider.ErrNoMatchingSignature},
		{"a field given twice: the last counts, as in JSON.parse", strings.Replace(valid, `"pspReference":"7914073381342284"`, `"pspReference":"EVIL","pspReference":"7914073381342284"`, 1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/adyen", strings.NewReader(tt.give))
			err := verify(t, p, r)
			if (err == nil) != (tt.want == nil) || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}

	keys := []struct{ body, want string }{
		{valid, "7914073381342284:AUTHORISATION:true"},
		{adyenBody(t, adyenTestKey, "7914073381342284 AUTHORISATION false"), "7914073381342284:AUTHORISATION:false"},
		{adyenBody(t, adyenTestKey, "7914073381342284 AUTHORISATION true", "8825408195409505 CAPTURE true"), ""}, // several: the body hash
		{strings.Replace(valid, `"pspReference":"7914073381342284",`, ``, 1), ""},                                // no pspReference
		{`{"notificationItems":[{"NotificationRequestItem":{"pspReference":1,"eventCode":"REPORT_AVAILABLE","success":true}}]}`, "1:REPORT_AVAILABLE:true"},
		{`[1]`, ""},
	}
	for _, tt := range keys {
		if got, _ := p.Key(httptest.NewRequest(http.MethodPost, "/adyen", nil), []byte(tt.body)); got != tt.want {
			t.Errorf("Key(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
	if p.SuccessStatus != 200 || p.SuccessBody != "[accepted]" || p.DuplicateStatus != 200 {
		t.Errorf("answers %d %q (duplicates %d), want 200 [accepted] (200)", p.SuccessStatus, p.SuccessBody, p.DuplicateStatus)
	}
}

// A secret that is not a hex HMAC key is a *SecretError naming its
// position among Config.Secrets (empty ones count, as a file's lines do).
func TestAdyenSecrets(t *testing.T) {
	for _, tt := range []struct {
		give  []string
		index int
	}{
		{[]string{"not hex"}, 0},
		{[]string{adyenTestKey, "", "abc"}, 2}, // odd length
	} {
		_, err := provider.New("adyen", provider.Config{Secrets: tt.give})
		var se *provider.SecretError
		want := fmt.Sprintf("provider adyen: secret #%d is not a hex HMAC key", tt.index+1)
		if !errors.As(err, &se) || se.Index != tt.index || se.Preset != "adyen" || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("New(adyen, %q) = %v, want a *SecretError at index %d", tt.give, err, tt.index)
		}
	}
}
