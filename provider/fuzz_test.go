package provider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// Fuzz targets for every signature-header parser. Each checks that the
// parser never panics, that what it accepts has the documented shape, and
// that the preset's Verify agrees with it (a header the parser refuses is
// never accepted, and the error is one of the package's reasons).

var fuzzNow = time.Unix(1_780_000_000, 0)

// fuzzVerify runs preset name's Verify on a POST with header set to v and
// checks that a failure is a *VerifyError with a known reason.
func fuzzVerify(t *testing.T, name string, cfg Config, header, v string) error {
	cfg.Now = func() time.Time { return fuzzNow }
	p, err := New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	r.Header.Set(header, v)
	r.Header.Set("webhook-id", "msg_1")
	r.Header.Set("webhook-timestamp", "1780000000")
	r.Header.Set("X-Slack-Request-Timestamp", "1780000000")
	r.Header.Set(ZoomTimestampHeader, "1780000000")
	r.Header.Set(TwitchMessageIDHeader, "m-1")
	r.Header.Set(TwitchMessageTimestampHeader, fuzzNow.UTC().Format(time.RFC3339Nano))
	err = p.Verify(r, []byte("{}"))
	var ve *VerifyError
	if err != nil && !errors.As(err, &ve) {
		t.Fatalf("Verify error %v is not a *VerifyError", err)
	}
	if err != nil && strings.Contains(err.Error(), cfg.Secrets[0]) {
		t.Fatalf("error %q leaks the secret", err)
	}
	return err
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// fuzzTimestamped checks the parser of a timestamped header h on v (what it
// accepts has a numeric timestamp and a signature) and that the Verify of
// preset refuses v for the parser's reason when the parser refuses it. It
// returns the parsed timestamp, the parse error and Verify's error.
func fuzzTimestamped(t *testing.T, h timestampedHeader, preset string, cfg Config, v string) (ts string, err, verr error) {
	t.Helper()
	ts, sigs, err := h.parse(v)
	if err == nil && (!allDigits(ts) || len(sigs) == 0) {
		t.Fatalf("accepted %q with ts %q and %d signatures", v, ts, len(sigs))
	}
	verr = fuzzVerify(t, preset, cfg, h.name, v)
	if err != nil && !errors.Is(verr, err) {
		t.Fatalf("parse error %v but Verify %v", err, verr)
	}
	return ts, err, verr
}

// The signature headers of the presets written as specs, as the fuzz
// tests' oracles: a spec's pairs are read by the same parser, and its
// single values by parseMAC.
var (
	stripeSignature      = timestampedHeader{name: StripeSignatureHeader, sep: ",", tsKey: "t", sigKey: "v1"}
	paddleSignature      = timestampedHeader{name: PaddleSignatureHeader, sep: ";", tsKey: "ts", sigKey: "h1"}
	mercadoPagoSignature = timestampedHeader{name: MercadoPagoSignatureHeader, sep: ",", tsKey: "ts", sigKey: "v1", spaced: true}
	standardSignature    = timestampedHeader{sep: " ", assign: ",", sigKey: "v1", decode: base64.StdEncoding.DecodeString}
)

// parseStandardSignature decodes the v1 entries of a webhook-signature value.
func parseStandardSignature(v string) ([][]byte, error) {
	_, sigs, err := standardSignature.parse(v)
	return sigs, err
}

// parseShopifySignature decodes X-Shopify-Hmac-Sha256 (standard base64).
func parseShopifySignature(v string) ([]byte, error) {
	return parseMAC(v, "", base64.StdEncoding.DecodeString, sha256.Size)
}

func FuzzStripeSignature(f *testing.F) {
	f.Add("t=1780000000,v1=" + strings.Repeat("ab", 32))
	f.Add("t=1780000000,v1=00,v1=11,v0=22")
	f.Add("t=,v1=")
	f.Add("v1=ab")
	f.Add(",,,=")
	f.Fuzz(func(t *testing.T, v string) {
		ts, err, verr := fuzzTimestamped(t, stripeSignature, "stripe", Config{Secrets: []string{"whsec_fuzz"}}, v)
		if err == nil && verr == nil {
			// Only possible with the right MAC over "<ts>.{}".
			want := hmac.New(sha256.New, []byte("whsec_fuzz"))
			want.Write([]byte(ts + ".{}"))
			if !strings.Contains(v, hex.EncodeToString(want.Sum(nil))) {
				t.Fatalf("Verify accepted %q without the right MAC", v)
			}
		}
	})
}

func FuzzStandardWebhooks(f *testing.F) {
	f.Add("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	f.Add("v1a,abc v1,bm9wZQ==")
	f.Add("v1, v2,")
	f.Add("   ")
	f.Fuzz(func(t *testing.T, v string) {
		sigs, err := parseStandardSignature(v)
		if err == nil && len(sigs) == 0 {
			t.Fatalf("accepted %q without a signature", v)
		}
		for _, name := range []string{"standardwebhooks", "svix"} {
			verr := fuzzVerify(t, name, Config{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, WebhookSignatureHeader, v)
			if err != nil && !errors.Is(verr, err) {
				t.Fatalf("%s: parse error %v but Verify %v", name, err, verr)
			}
		}
	})
}

func FuzzPaddleSignature(f *testing.F) {
	f.Add("ts=1780000000;h1=" + strings.Repeat("cd", 32))
	f.Add("ts=1;h1=00;h1=11")
	f.Add("h1=;ts=")
	f.Fuzz(func(t *testing.T, v string) {
		fuzzTimestamped(t, paddleSignature, "paddle", Config{Secrets: []string{"pdl_fuzz"}}, v)
	})
}

func FuzzMercadoPagoSignature(f *testing.F) {
	f.Add("ts=1704908010,v1=618c85345248dd820d5fd456117c2ab2ef8eda45a0282ff693eac24131a5e839")
	f.Add(" ts = 1 , v1 = 00 ")
	f.Add("ts=,v1=")
	f.Fuzz(func(t *testing.T, v string) {
		fuzzTimestamped(t, mercadoPagoSignature, "mercadopago", Config{Secrets: []string{"mp_fuzz"}, Tolerance: time.Minute}, v)
	})
}

// hexMAC is parseHexMAC for one prefix.
func hexMAC(prefix string) func(string) ([]byte, error) {
	return func(v string) ([]byte, error) { return parseHexMAC(v, prefix) }
}

// FuzzBodyHMACSignatures covers the single-MAC headers: GitHub and Meta's
// X-Hub-Signature-256, Slack's v0, Shopify's base64, iFood's bare hex,
// Twitch's sha256= and Zoom's v0=.
func FuzzBodyHMACSignatures(f *testing.F) {
	f.Add("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	f.Add("v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	f.Add("dXNlcm5hbWU6cGFzc3dvcmQ=")
	f.Add("ZZ")
	f.Fuzz(func(t *testing.T, v string) {
		parsers := []struct {
			preset, header string
			parse          func(string) ([]byte, error)
		}{
			{"github", HubSignatureHeader, hexMAC("sha256=")},
			{"whatsapp-cloud", HubSignatureHeader, hexMAC("sha256=")},
			{"messenger", HubSignatureHeader, hexMAC("sha256=")},
			{"instagram", HubSignatureHeader, hexMAC("sha256=")},
			{"slack", SlackSignatureHeader, hexMAC("v0=")},
			{"shopify", ShopifySignatureHeader, parseShopifySignature},
			{"ifood", IFoodSignatureHeader, hexMAC("")},
			{"twitch", TwitchMessageSignatureHeader, hexMAC("sha256=")},
			{"zoom", ZoomSignatureHeader, hexMAC("v0=")},
		}
		for _, p := range parsers {
			sig, err := p.parse(v)
			if err == nil && len(sig) != sha256.Size {
				t.Fatalf("%s accepted %q as a %d-byte MAC", p.preset, v, len(sig))
			}
			verr := fuzzVerify(t, p.preset, Config{Secrets: []string{"fuzz-secret"}}, p.header, v)
			if err != nil && !errors.Is(verr, err) {
				t.Fatalf("%s: parse error %v but Verify %v", p.preset, err, verr)
			}
			if verr == nil {
				t.Fatalf("%s: Verify accepted %q over a body it was not made for", p.preset, v)
			}
		}
	})
}

// FuzzPresetKeys feeds arbitrary bodies to the JSON key extractors.
func FuzzPresetKeys(f *testing.F) {
	f.Add(`{"object":"whatsapp_business_account","entry":[{"changes":[{"value":{"messages":[{"id":"wamid.A"}]}}]}]}`)
	f.Add(`{"event":"messages.update","data":{"keyId":"A","status":"READ"}}`)
	f.Add(`{"id":12345,"event_id":null}`)
	f.Add(`{"event":"meeting.started","event_ts":1,"payload":{"object":{"id":1}}}`)
	f.Add(`[1,2`)
	f.Add(`[{"eventId":100,"attemptNumber":0}]`)
	f.Add(`[{"eventId":"a"},{"eventId":"b"}]`)
	f.Add(`{"object":"page","entry":[{"messaging":[{"message":{"mid":"m_1","is_deleted":true}}]}]}`)
	f.Add(`{"object":"instagram","entry":[{"changes":[{"field":"comments","value":{"id":"1"}}],"standby":[]}]}`)
	batched := []*idemhook.Items{whatsAppItems(), messengerItems(), instagramItems(),
		{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "{subscriptionId}:{eventId}"}}}}
	f.Fuzz(func(t *testing.T, body string) {
		b := []byte(body)
		for _, items := range batched {
			if k := items.OneItemKey(b); k != "" && idemhook.NormalizeKey(k) != k {
				t.Fatalf("item key %q is not a normalized key", k)
			}
		}
		_ = evolutionKey(b)
		if k := zoomKey(b); k != "" && !strings.HasPrefix(strings.TrimLeft(body, " \t\r\n"), "{") {
			t.Fatalf("zoom key %q from a body that is not an object", k)
		}
		_ = topLevelID(b, "id")
		if k := topLevelID(b, "id"); k != "" && !strings.Contains(body, k) && !strings.Contains(body, `\`) {
			t.Fatalf("id %q is not in the body %q", k, body)
		}
	})
}

// FuzzStoneBody feeds arbitrary bodies to Stone's JWE/JWS opening: it must
// refuse them with ErrMalformedBody or ErrNoMatchingSignature, never panic.
func FuzzStoneBody(f *testing.F) {
	f.Add(`{"encrypted_body":"e30.e30.AAAAAAAAAAAAAAAA.e30.AAAAAAAAAAAAAAAAAAAAAA"}`)
	f.Add(`{"encrypted_body":"eyJhbGciOiJSU0EtT0FFUC0yNTYiLCJlbmMiOiJBMjU2R0NNIn0.AA.AAAAAAAAAAAAAAAA.AA.AAAAAAAAAAAAAAAAAAAAAA"}`)
	f.Add(`{"encrypted_body":""}`)
	f.Add(`{}`)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	pubs := []stoneKey{{kid: "k", pub: &key.PublicKey}}
	f.Fuzz(func(t *testing.T, body string) {
		_, err := openStoneBody([]byte(body), []*rsa.PrivateKey{key}, pubs)
		if err == nil {
			t.Fatalf("accepted %q", body)
		}
		if jws := []byte(body); len(jws) > 0 {
			if _, err := verifyJWS(jws, pubs); err == nil {
				t.Fatalf("verifyJWS accepted %q", body)
			}
		}
	})
}

// FuzzTwilioSignature covers X-Twilio-Signature, the signature settings
// header and the form body: Verify never panics, fails with one of the
// package's reasons, and accepts only the MAC of the URL and the form.
func FuzzTwilioSignature(f *testing.F) {
	const body = "MessageSid=SM1&MessageStatus=sent"
	m := hmac.New(sha1.New, []byte("fuzz-token"))
	m.Write([]byte("https://hooks.example.com/t" + "MessageSidSM1MessageStatussent"))
	valid := m.Sum(nil)
	f.Add(base64.StdEncoding.EncodeToString(valid), "", body)
	f.Add(base64.StdEncoding.EncodeToString(valid), "key=k,algorithm=HMAC_SHA1", body)
	f.Add("bm9wZQ==", "algorithm=HMAC_SHA256", "a=%zz")
	f.Add("", "algorithm=", "&&=")
	f.Fuzz(func(t *testing.T, sig, settings, form string) {
		p, err := New("twilio", Config{Secrets: []string{"fuzz-token"}, Twilio: TwilioOptions{PublicURL: "https://hooks.example.com"}})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/t", strings.NewReader(form))
		r.Header.Set(TwilioSignatureHeader, sig)
		r.Header.Set(TwilioSignatureSettingsHeader, settings)
		err = p.Verify(r, []byte(form))
		var ve *VerifyError
		if err != nil && !errors.As(err, &ve) {
			t.Fatalf("Verify error %v is not a *VerifyError", err)
		}
		if err == nil {
			got, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(sig))
			if !hmac.Equal(got, valid) || form != body && twilioParamsOf(form) != "MessageSidSM1MessageStatussent" {
				t.Fatalf("Verify accepted signature %q over %q", sig, form)
			}
		}
		_ = twilioKey(r, []byte(form))
	})
}

// twilioParamsOf is what a form signs, or "" when it is not a form.
func twilioParamsOf(form string) string {
	v, err := url.ParseQuery(form)
	if err != nil {
		return ""
	}
	return string(twilioParams(v))
}

// FuzzMailgunBody feeds arbitrary bodies to Mailgun's signature object
// parser: never a panic; what it accepts has a numeric timestamp, a token
// and 32-byte MACs; Verify refuses what it refuses, for its reason, and
// accepts only the right MAC.
func FuzzMailgunBody(f *testing.F) {
	m := hmac.New(sha256.New, []byte("key-fuzz"))
	m.Write([]byte("1780000000tok"))
	valid := hex.EncodeToString(m.Sum(nil))
	f.Add(`{"signature":{"timestamp":"1780000000","token":"tok","signature":"` + valid + `"},"event-data":{"id":"e"}}`)
	f.Add(`{"signature":{"timestamp":1780000000,"token":"tok","signature":"00","parent-signature":""}}`)
	f.Add(`{"signature":null}`)
	f.Add(`timestamp=1&token=t&signature=00`)
	f.Fuzz(func(t *testing.T, body string) {
		sig, err := parseMailgunSignature([]byte(body))
		if err == nil {
			if !allDigits(sig.timestamp) || sig.token == "" || len(sig.macs) == 0 {
				t.Fatalf("accepted %q as %+v", body, sig)
			}
			for _, mac := range sig.macs {
				if len(mac) != sha256.Size {
					t.Fatalf("accepted a %d-byte MAC in %q", len(mac), body)
				}
			}
		}
		p, perr := New("mailgun", Config{Secrets: []string{"key-fuzz"}, Now: func() time.Time { return fuzzNow }})
		if perr != nil {
			t.Fatal(perr)
		}
		verr := p.Verify(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), []byte(body))
		if err != nil && !errors.Is(verr, ErrMalformedBody) {
			t.Fatalf("parse error %v but Verify %v", err, verr)
		}
		if verr == nil && (sig.timestamp+sig.token != "1780000000tok" && !strings.Contains(body, valid)) {
			t.Fatalf("Verify accepted %q", body)
		}
		_, _ = p.Key(nil, []byte(body))
	})
}

// FuzzAdyenBody feeds arbitrary bodies to Adyen's item parser: never a
// panic; Verify refuses what the parser refuses, for a malformed body, and
// accepts only bodies whose every item carries the MAC of its own signed
// fields; a key comes only from a body of one item, made of its fields.
func FuzzAdyenBody(f *testing.F) {
	key, _ := hex.DecodeString("44782def547aaa06c910c43932b1eb0c71fc68d9d0c057550c48ec2acf6ba056")
	mac := func(s string) string { return base64.StdEncoding.EncodeToString(hmacSHA256(key, []byte(s))) }
	valid := `{"notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":"` + mac("psp1::M:R:1130:EUR:AUTHORISATION:true") +
		`"},"amount":{"value":1130,"currency":"EUR"},"eventCode":"AUTHORISATION","merchantAccountCode":"M","merchantReference":"R","pspReference":"psp1","success":"true"}}]}`
	f.Add(valid)
	f.Add(`{"notificationItems":[{"NotificationRequestItem":{"pspReference":1e3,"success":true,"amount":{"value":-0.5},"additionalData":{"hmacSignature":null}}}]}`)
	f.Add(`{"notificationItems":[{"NotificationRequestItem":{}},{"NotificationRequestItem":[]}]}`)
	f.Add(`{"notificationItems":{}}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, body string) {
		items, err := adyenItems([]byte(body))
		p, perr := New("adyen", Config{Secrets: []string{"44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"}})
		if perr != nil {
			t.Fatal(perr)
		}
		verr := p.Verify(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), []byte(body))
		var ve *VerifyError
		if verr != nil && !errors.As(verr, &ve) {
			t.Fatalf("Verify error %v is not a *VerifyError", verr)
		}
		if err != nil && !errors.Is(verr, ErrMalformedBody) {
			t.Fatalf("parse error %v but Verify %v", err, verr)
		}
		if verr == nil {
			if len(items) == 0 {
				t.Fatalf("Verify accepted %q with no items", body)
			}
			for _, it := range items {
				got, _ := base64.StdEncoding.DecodeString(it.signature)
				if !hmac.Equal(got, hmacSHA256(key, []byte(it.signingString()))) {
					t.Fatalf("Verify accepted item %+v of %q", it, body)
				}
			}
		}
		k, _ := p.Key(nil, []byte(body))
		if k != "" && (len(items) != 1 || k != items[0].signed[0]+":"+items[0].signed[6]+":"+items[0].signed[7]) {
			t.Fatalf("Key %q from %q (%d items)", k, body, len(items))
		}
	})
}

// FuzzSendGridHeaders feeds arbitrary signature and timestamp headers and
// bodies to the sendgrid preset: never a panic, every failure a
// *VerifyError, and nothing accepted but what the key signed.
func FuzzSendGridHeaders(f *testing.F) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	pub := base64.StdEncoding.EncodeToString(der)
	body := `[{"event":"open","sg_event_id":"a"}]`
	sum := sha256.Sum256([]byte("1780000000" + body))
	sig, _ := ecdsa.SignASN1(rand.Reader, priv, sum[:])
	valid := base64.StdEncoding.EncodeToString(sig)
	f.Add(valid, "1780000000", body)
	f.Add("MEUCIQ==", "1780000000", body)
	f.Add("", "", "")
	f.Add(valid, "01780000000", body)
	f.Add(valid, "1780000000 ", body+" ")
	p, err := New("sendgrid", Config{Secrets: []string{pub}, Now: func() time.Time { return fuzzNow }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sigHeader, ts, b string) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(b))
		r.Header.Set(SendGridSignatureHeader, sigHeader)
		r.Header.Set(SendGridTimestampHeader, ts)
		err := p.Verify(r, []byte(b))
		var ve *VerifyError
		if err != nil && !errors.As(err, &ve) {
			t.Fatalf("Verify error %v is not a *VerifyError", err)
		}
		if err == nil {
			got, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(sigHeader))
			h := sha256.Sum256([]byte(strings.TrimSpace(r.Header.Get(SendGridTimestampHeader)) + b))
			if !ecdsa.VerifyASN1(&priv.PublicKey, h[:], got) {
				t.Fatalf("Verify accepted %q %q %q", sigHeader, ts, b)
			}
		}
	})
}

// FuzzHubSpotHeaders feeds arbitrary v3 signature and timestamp headers,
// and request targets, to the hubspot preset: never a panic, every failure
// a *VerifyError, and nothing accepted whose MAC is not the one of a URI
// the preset tries.
func FuzzHubSpotHeaders(f *testing.F) {
	const secret = "hubspot-client-secret"
	valid := base64.StdEncoding.EncodeToString(hmacSHA256([]byte(secret), []byte("POSThttps://hooks.example.com/hs?a=%3A[]1780000000000")))
	f.Add(valid, "1780000000000", "/hs?a=%3A")
	f.Add("not base64!", "1780000000000", "/")
	f.Add(valid, "1780000000", "/hs?a=%3a")
	f.Add("", "", "/%zz")
	p, err := New("hubspot", Config{Secrets: []string{secret}, HubSpot: HubSpotOptions{PublicURL: "https://hooks.example.com"}, Now: func() time.Time { return fuzzNow }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sigHeader, ts, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" || !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			return
		}
		r := httptest.NewRequest(http.MethodPost, target, strings.NewReader("[]"))
		r.Header.Set(HubSpotSignatureV3Header, sigHeader)
		r.Header.Set(HubSpotTimestampHeader, ts)
		verr := p.Verify(r, []byte("[]"))
		var ve *VerifyError
		if verr != nil && !errors.As(verr, &ve) {
			t.Fatalf("Verify error %v is not a *VerifyError", verr)
		}
		if verr == nil {
			got, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(sigHeader))
			ok := false
			for _, uri := range hubSpotURIs("https://hooks.example.com", r) {
				ok = ok || hmac.Equal(got, hmacSHA256([]byte(secret), []byte("POST"+uri+"[]"+strings.TrimSpace(r.Header.Get(HubSpotTimestampHeader)))))
			}
			if !ok {
				t.Fatalf("Verify accepted %q %q %q", sigHeader, ts, target)
			}
		}
	})
}
