package provider_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/fakeclock"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/provider"
)

// newPreset builds f's preset with cfg and a clock fixed at now.
func newPreset(t testing.TB, name string, cfg provider.Config, now time.Time) *idemhook.Preset {
	t.Helper()
	cfg.Now = func() time.Time { return now }
	p, err := provider.New(name, cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	if p.Name != name {
		t.Fatalf("preset name %q, want %q", p.Name, name)
	}
	return p
}

func verify(t testing.TB, p *idemhook.Preset, r *http.Request) error {
	t.Helper()
	return p.Verify(r, readBody(t, r))
}

// TestPresetsVerifyAndKey runs the same cases on every preset: a valid
// delivery and its key, a wrong secret, a tampered body, stale and future
// timestamps, a missing and a malformed header, rotated secrets.
func TestPresetsVerifyAndKey(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			p := newPreset(t, f.name, f.cfg, baseTime)
			sent := baseTime.Add(-10 * time.Second)

			type testCase struct {
				name  string
				give  func() *http.Request
				cfg   *provider.Config
				want  error // nil: Verify passes
				skip  bool
				check func(t *testing.T, err error)
			}
			rotated := f.cfg
			other := f.rotateWith
			if other == "" {
				other = f.wrongSecret
			}
			rotated.Secrets = []string{other, "", f.secret()}
			tests := []testCase{
				{name: "valid", give: func() *http.Request { return f.build(t, "1", sent, f.secret()) }},
				{name: "wrong secret", give: func() *http.Request { return f.build(t, "1", sent, f.wrongSecret) }, want: f.badReason,
					check: func(t *testing.T, err error) {
						// The message names the reason, never a secret or the expected MAC.
						valid := f.build(t, "1", sent, f.secret())
						msg := err.Error()
						for _, leak := range []string{f.secret(), valid.Header.Get(f.sigHeader)} {
							if leak != "" && strings.Contains(msg, leak) {
								t.Errorf("error %q leaks %q", msg, leak)
							}
						}
						var ve *provider.VerifyError
						if !errors.As(err, &ve) || ve.Preset != f.name {
							t.Errorf("error %v is not a *VerifyError for %s", err, f.name)
						}
					}},
				{name: "tampered body", skip: !f.bodySigned, want: provider.ErrNoMatchingSignature, give: func() *http.Request {
					r := f.build(t, "1", sent, f.secret())
					b := readBody(t, r)
					if f.name == "stone" {
						// flip a character inside the ciphertext
						i := len(b) - 30
						b[i] ^= 1
						if b[i] == '"' || b[i] == '.' || b[i] == '\\' {
							b[i] ^= 3
						}
					} else {
						b = append(b, ' ')
					}
					r2 := post(r.URL.String(), string(b))
					r2.Header = r.Header.Clone()
					return r2
				},
					check: func(t *testing.T, err error) {
						if f.name == "stone" && errors.Is(err, provider.ErrMalformedBody) {
							return // a flipped base64url bit may also break the encoding
						}
						if !errors.Is(err, provider.ErrNoMatchingSignature) {
							t.Errorf("got %v, want %v", err, provider.ErrNoMatchingSignature)
						}
					}},
				{name: "stale timestamp", skip: !f.timestamped, want: provider.ErrTimestampOutOfTolerance,
					give: func() *http.Request { return f.build(t, "1", baseTime.Add(-6*time.Minute), f.secret()) }},
				{name: "future timestamp", skip: !f.timestamped, want: provider.ErrTimestampOutOfTolerance,
					give: func() *http.Request { return f.build(t, "1", baseTime.Add(6*time.Minute), f.secret()) }},
				{name: "just inside tolerance", skip: !f.timestamped,
					give: func() *http.Request { return f.build(t, "1", baseTime.Add(-5*time.Minute), f.secret()) }},
				{name: "missing header", skip: f.sigHeader == "", want: provider.ErrMissingHeader, give: func() *http.Request {
					r := f.build(t, "1", sent, f.secret())
					r.Header.Del(f.sigHeader)
					return r
				}},
				{name: "malformed header", skip: f.malformed == "", want: provider.ErrMalformedHeader, give: func() *http.Request {
					r := f.build(t, "1", sent, f.secret())
					r.Header.Set(f.sigHeader, f.malformed)
					return r
				}},
				{name: "rotated secrets", cfg: &rotated, give: func() *http.Request { return f.build(t, "1", sent, f.secret()) }},
			}
			for _, tt := range tests {
				if tt.skip { // not applicable to this scheme (no timestamp, no header)
					continue
				}
				t.Run(tt.name, func(t *testing.T) {
					pp := p
					if tt.cfg != nil {
						pp = newPreset(t, f.name, *tt.cfg, baseTime)
					}
					err := verify(t, pp, tt.give())
					switch {
					case tt.check != nil:
						if err == nil {
							t.Fatalf("Verify passed, want %v", tt.want)
						}
						tt.check(t, err)
					case tt.want == nil && err != nil:
						t.Fatalf("Verify: %v", err)
					case tt.want != nil && !errors.Is(err, tt.want):
						t.Fatalf("Verify = %v, want %v", err, tt.want)
					}
				})
			}

			t.Run("key", func(t *testing.T) {
				for _, id := range []string{"1", "2"} {
					r := f.build(t, id, sent, f.secret())
					got, err := p.Key(r, readBody(t, r))
					if err != nil || got != f.key(id) {
						t.Fatalf("Key(event %s) = %q, %v; want %q", id, got, err, f.key(id))
					}
				}
				// A retry, re-signed later where the scheme signs a timestamp,
				// has the same key.
				r := f.build(t, "1", baseTime, f.secret())
				if got, _ := p.Key(r, readBody(t, r)); got != f.key("1") {
					t.Fatalf("Key(retry) = %q, want %q", got, f.key("1"))
				}
			})
			if p.DuplicateStatus != f.dupStatus {
				t.Errorf("DuplicateStatus = %d, want %d", p.DuplicateStatus, f.dupStatus)
			}
		})
	}
}

func TestNamesAndNew(t *testing.T) {
	names := provider.Names()
	if !slices.IsSorted(names) {
		t.Fatalf("Names() not sorted: %v", names)
	}
	var fixtureNames []string
	for _, f := range fixtures(t) {
		fixtureNames = append(fixtureNames, f.name)
	}
	if !slices.Equal(names, fixtureNames) {
		t.Fatalf("Names() = %v, fixtures cover %v", names, fixtureNames)
	}
	_, err := provider.New("paypal", provider.Config{Secrets: []string{"x"}})
	if err == nil || !strings.Contains(err.Error(), `"paypal"`) || !strings.Contains(err.Error(), "stripe, svix, whatsapp-cloud") {
		t.Fatalf("New(unknown) error = %v, want one naming it and listing the known names", err)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		give provider.Config
		want string
	}{
		{"stripe", provider.Config{}, "no secret configured"},
		{"stripe", provider.Config{Secrets: []string{"", ""}}, "no secret configured"},
		{"stripe", provider.Config{Secrets: []string{"s"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "x"}}, `option verify_token: is a setting of whatsapp-cloud, not of stripe; unknown option (this provider takes no options)`},
		{"evolution", provider.Config{Secrets: []string{"s"}, Stone: provider.StoneOptions{JWKS: "{}"}}, `option jwks: is a setting of stone, not of evolution; unknown option (known: header)`},
		{"paddle", provider.Config{Secrets: []string{"s"}, Tolerance: -time.Second}, "tolerance -1s is negative"},
		{"standardwebhooks", provider.Config{Secrets: []string{"whsec_not base64!"}}, `secret #1 is not "whsec_<base64>"`},
		{"svix", provider.Config{Secrets: []string{stdWebhooksSecret, "whsec_%%"}}, "secret #2"},
		{"evolution", provider.Config{Secrets: []string{"k"}, Evolution: provider.EvolutionOptions{Header: "bad header:"}}, "is not a header name"},
		{"stone", provider.Config{Secrets: []string{"not pem"}}, "secret #1: not a PEM private key"},
		{"stone", provider.Config{Secrets: []string{stoneKeys(t).ourPEM}}, "no Stone public signing key"},
		{"stone", provider.Config{Secrets: []string{stoneKeys(t).ourPEM}, Stone: provider.StoneOptions{JWKS: "{"}}, "option jwks: is not a JWKS JSON document"},
		{"stone", provider.Config{Secrets: []string{stoneKeys(t).ourPEM}, Stone: provider.StoneOptions{PublicKey: "x"}}, "option public_key: is not a PEM public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.want, func(t *testing.T) {
			_, err := provider.New(tt.name, tt.give)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New(%q) error = %v, want it to contain %q", tt.name, err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "provider "+tt.name+":") {
				t.Errorf("error %q does not name the provider", err)
			}
		})
	}
}

// TestPublishedVectors checks the presets against the test vectors the
// providers publish.
func TestPublishedVectors(t *testing.T) {
	t.Run("github", func(t *testing.T) {
		// docs.github.com, "Validating webhook deliveries".
		p := newPreset(t, "github", provider.Config{Secrets: []string{"It's a Secret to Everybody"}}, baseTime)
		r := post("/", "Hello, World!")
		r.Header.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
		if err := verify(t, p, r); err != nil {
			t.Fatal(err)
		}
		r = post("/", "Hello, World?")
		r.Header.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
		if err := verify(t, p, r); !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("other body: %v", err)
		}
	})
	// Standard Webhooks reference libraries (and Svix's): secret, id,
	// timestamp, body and signature.
	const (
		swID   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		swTS   = "1614265330"
		swBody = `{"test": 2432232314}`
		swSig  = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	swNow := time.Unix(1614265330, 0)
	for _, tt := range []struct {
		preset, prefix, secret string
	}{
		{"standardwebhooks", "webhook-", stdWebhooksSecret},
		{"standardwebhooks", "webhook-", strings.TrimPrefix(stdWebhooksSecret, "whsec_")},
		{"svix", "svix-", stdWebhooksSecret},
		{"svix", "webhook-", stdWebhooksSecret},
	} {
		t.Run(tt.preset+"/"+tt.prefix+"/"+tt.secret[:6], func(t *testing.T) {
			p := newPreset(t, tt.preset, provider.Config{Secrets: []string{tt.secret}}, swNow)
			r := post("/", swBody)
			r.Header.Set(tt.prefix+"id", swID)
			r.Header.Set(tt.prefix+"timestamp", swTS)
			r.Header.Set(tt.prefix+"signature", "v1a,c2lnbmF0dXJl v1,bm9wZQ== "+swSig)
			if err := verify(t, p, r); err != nil {
				t.Fatal(err)
			}
			if k, _ := p.Key(r, []byte(swBody)); k != swID {
				t.Fatalf("key %q, want %q", k, swID)
			}
		})
	}
	t.Run("slack", func(t *testing.T) {
		// api.slack.com/authentication/verifying-requests-from-slack.
		const body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
		p := newPreset(t, "slack", provider.Config{Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"}}, time.Unix(1531420618, 0).Add(time.Minute))
		r := post("/", body)
		r.Header.Set("X-Slack-Request-Timestamp", "1531420618")
		r.Header.Set("X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
		if err := verify(t, p, r); err != nil {
			t.Fatal(err)
		}
		if k, _ := p.Key(r, []byte(body)); k != "" {
			t.Fatalf("slash command key %q, want \"\" (body hash)", k)
		}
	})
}

// TestSeveralSignatures: schemes that carry several signatures pass when any
// one matches, and ignore other schemes (no downgrade).
func TestSeveralSignatures(t *testing.T) {
	const body = `{"id":"evt_1","event_id":"evt_1"}`
	ts := unix(baseTime)
	tests := []struct {
		preset, header, give string
		want                 error
	}{
		{"stripe", "Stripe-Signature", "t=" + ts + ",v1=" + hmacHex("old", ts+"."+body) + ",v1=" + hmacHex("whsec_s", ts+"."+body), nil},
		{"stripe", "Stripe-Signature", "t=" + ts + ", v1=" + hmacHex("old", ts+"."+body), provider.ErrNoMatchingSignature},
		// a valid v0 is not enough: only v1 counts.
		{"stripe", "Stripe-Signature", "t=" + ts + ",v0=" + hmacHex("whsec_s", ts+"."+body), provider.ErrMalformedHeader},
		{"stripe", "Stripe-Signature", "t=" + ts + ",t=" + ts + ",v1=" + hmacHex("whsec_s", ts+"."+body), provider.ErrMalformedHeader},
		{"stripe", "Stripe-Signature", "t=-5,v1=" + hmacHex("whsec_s", "-5."+body), provider.ErrMalformedHeader},
		{"paddle", "Paddle-Signature", "ts=" + ts + ";h1=" + hmacHex("old", ts+":"+body) + ";h1=" + hmacHex("whsec_s", ts+":"+body), nil},
		{"paddle", "Paddle-Signature", "ts=" + ts + ";h2=" + hmacHex("whsec_s", ts+":"+body), provider.ErrMalformedHeader},
		{"mercadopago", "x-signature", "ts=" + ts + ",v1=" + hmacHex("old", "ts:"+ts+";") + ",v1=" + hmacHex("whsec_s", "ts:"+ts+";"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.preset+"/"+tt.give, func(t *testing.T) {
			p := newPreset(t, tt.preset, provider.Config{Secrets: []string{"whsec_s"}}, baseTime)
			r := post("/", body)
			r.Header.Set(tt.header, tt.give)
			if err := verify(t, p, r); !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestToleranceOption(t *testing.T) {
	f := fixtures(t)
	stripe := f[slices.IndexFunc(f, func(f fixture) bool { return f.name == "stripe" })]
	cfg := stripe.cfg
	cfg.Tolerance = time.Minute
	p := newPreset(t, "stripe", cfg, baseTime)
	err := verify(t, p, stripe.build(t, "1", baseTime.Add(-2*time.Minute), stripe.secret()))
	if !errors.Is(err, provider.ErrTimestampOutOfTolerance) || !strings.Contains(err.Error(), "signed 2m0s ago, tolerance 1m0s") {
		t.Fatalf("Verify = %v, want a 2m-old timestamp refused with tolerance 1m", err)
	}
	err = verify(t, p, stripe.build(t, "1", baseTime.Add(90*time.Second), stripe.secret()))
	if !errors.Is(err, provider.ErrTimestampOutOfTolerance) || !strings.Contains(err.Error(), "in the future") {
		t.Fatalf("Verify = %v, want a future timestamp refused", err)
	}

	// Mercado Pago: no tolerance unless set; ts in seconds or milliseconds.
	mp := f[slices.IndexFunc(f, func(f fixture) bool { return f.name == "mercadopago" })]
	old := baseTime.Add(-time.Hour)
	if err := verify(t, newPreset(t, "mercadopago", mp.cfg, baseTime), mp.build(t, "1", old, mp.secret())); err != nil {
		t.Fatalf("mercadopago without tolerance: %v", err)
	}
	cfg = mp.cfg
	cfg.Tolerance = 10 * time.Minute
	if err := verify(t, newPreset(t, "mercadopago", cfg, baseTime), mp.build(t, "1", old, mp.secret())); !errors.Is(err, provider.ErrTimestampOutOfTolerance) {
		t.Fatalf("mercadopago 1h old with tolerance 10m: %v", err)
	}
	ms := "1780000000000" // baseTime in milliseconds
	r := post("/mp", `{"id":1}`)
	r.Header.Set("x-signature", "ts="+ms+",v1="+hmacHex(mp.secret(), "ts:"+ms+";"))
	if err := verify(t, newPreset(t, "mercadopago", cfg, baseTime), r); err != nil {
		t.Fatalf("mercadopago ts in milliseconds: %v", err)
	}
}

func TestWhatsAppCloud(t *testing.T) {
	cfg := provider.Config{Secrets: []string{"meta-app-secret"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt-123"}}
	p := newPreset(t, "whatsapp-cloud", cfg, baseTime)

	t.Run("handshake", func(t *testing.T) {
		tests := []struct {
			name       string
			query      string
			wantDone   bool
			wantStatus int
			wantBody   string
		}{
			{"subscribe", "hub.mode=subscribe&hub.verify_token=vt-123&hub.challenge=1158201444", true, 200, "1158201444"},
			{"wrong token", "hub.mode=subscribe&hub.verify_token=vt-12&hub.challenge=1158201444", true, 403, ""},
			{"no token", "hub.mode=subscribe&hub.challenge=1158201444", true, 403, ""},
			{"other mode", "hub.mode=unsubscribe&hub.verify_token=vt-123&hub.challenge=1", true, 403, ""},
			{"not a handshake", "foo=bar", false, 0, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := httptest.NewRequest(http.MethodGet, "/wa?"+tt.query, nil)
				// A challenge passes Verify so that it reaches Handshake; any
				// other unsigned GET is refused.
				if err := p.Verify(r, nil); (err == nil) != tt.wantDone {
					t.Fatalf("Verify(GET) = %v, want nil only for a challenge (hub.mode)", err)
				}
				w := httptest.NewRecorder()
				if done := p.Handshake(w, r, nil); done != tt.wantDone {
					t.Fatalf("Handshake = %v, want %v", done, tt.wantDone)
				}
				if !tt.wantDone {
					return
				}
				if w.Code != tt.wantStatus {
					t.Fatalf("status %d, want %d", w.Code, tt.wantStatus)
				}
				if tt.wantStatus == 200 && (w.Body.String() != tt.wantBody || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain")) {
					t.Fatalf("body %q (%s), want %q text/plain", w.Body, w.Header().Get("Content-Type"), tt.wantBody)
				}
				if strings.Contains(w.Body.String(), "vt-123") {
					t.Fatalf("refusal leaks the verify token: %q", w.Body)
				}
			})
		}
		noToken := newPreset(t, "whatsapp-cloud", provider.Config{Secrets: []string{"s"}}, baseTime)
		w := httptest.NewRecorder()
		noToken.Handshake(w, httptest.NewRequest(http.MethodGet, "/wa?hub.mode=subscribe&hub.verify_token=&hub.challenge=1", nil), nil)
		if w.Code != 403 {
			t.Fatalf("without a configured verify_token, an empty token got %d, want 403", w.Code)
		}
		w = httptest.NewRecorder()
		if p.Handshake(w, post("/wa", `{}`), []byte(`{}`)) {
			t.Fatal("a POST is not a handshake")
		}
	})

	t.Run("key", func(t *testing.T) {
		value := func(items string) string {
			return `{"object":"whatsapp_business_account","entry":[{"id":"WABA","changes":[{"field":"messages","value":{` + items + `}}]}]}`
		}
		tests := []struct {
			name, give, want string
		}{
			{"one message", value(`"messages":[{"id":"wamid.A"}]`), "wamid.A"},
			{"one status", value(`"statuses":[{"id":"wamid.A","status":"delivered"}]`), "wamid.A:delivered"},
			{"two messages", value(`"messages":[{"id":"wamid.A"},{"id":"wamid.B"}]`), ""},
			{"message and status", value(`"messages":[{"id":"wamid.A"}],"statuses":[{"id":"wamid.B","status":"read"}]`), ""},
			{"two entries", `{"entry":[{"changes":[{"value":{"messages":[{"id":"wamid.A"}]}}]},{"changes":[{"value":{"messages":[{"id":"wamid.B"}]}}]}]}`, ""},
			{"no items", value(`"contacts":[]`), ""},
			{"status without status", value(`"statuses":[{"id":"wamid.A"}]`), ""},
			{"not json", `entry=1`, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got, err := p.Key(post("/", tt.give), []byte(tt.give)); got != tt.want || err != nil {
					t.Fatalf("Key = %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	})
}

func TestSlack(t *testing.T) {
	p := newPreset(t, "slack", provider.Config{Secrets: []string{"sec"}}, baseTime)
	body := `{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	w := httptest.NewRecorder()
	if !p.Handshake(w, post("/", body), []byte(body)) || w.Code != 200 || w.Body.String() != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Fatalf("url_verification answered %d %q", w.Code, w.Body)
	}
	ev := `{"type":"event_callback","event_id":"Ev1"}`
	if p.Handshake(httptest.NewRecorder(), post("/", ev), []byte(ev)) {
		t.Fatal("an event_callback is not a handshake")
	}
	if k, _ := p.Key(post("/", ev), []byte(ev)); k != "Ev1" {
		t.Fatalf("key without api_app_id = %q, want Ev1", k)
	}
	r := post("/", ev)
	r.Header.Set("X-Slack-Request-Timestamp", "17800000OO")
	r.Header.Set("X-Slack-Signature", "v0="+hmacHex("sec", "v0:17800000OO:"+ev))
	if err := verify(t, p, r); !errors.Is(err, provider.ErrMalformedHeader) || !strings.Contains(err.Error(), "X-Slack-Request-Timestamp") {
		t.Fatalf("non-numeric timestamp: %v", err)
	}
	r.Header.Del("X-Slack-Request-Timestamp")
	if err := verify(t, p, r); !errors.Is(err, provider.ErrMissingHeader) || !strings.Contains(err.Error(), "X-Slack-Request-Timestamp") {
		t.Fatalf("missing timestamp: %v", err)
	}
}

func TestStandardWebhooksHeaders(t *testing.T) {
	p := newPreset(t, "standardwebhooks", provider.Config{Secrets: []string{stdWebhooksSecret}}, baseTime)
	body := `{}`
	for _, tt := range []struct {
		name, drop string
		want       error
	}{
		{"no id", "webhook-id", provider.ErrMissingHeader},
		{"no timestamp", "webhook-timestamp", provider.ErrMissingHeader},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := post("/", body)
			r.Header.Set("webhook-id", "msg_1")
			r.Header.Set("webhook-timestamp", unix(baseTime))
			r.Header.Set("webhook-signature", "v1,"+hmacB64(swKey(t, stdWebhooksSecret), "msg_1."+unix(baseTime)+"."+body))
			r.Header.Del(tt.drop)
			err := verify(t, p, r)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.drop) {
				t.Fatalf("Verify = %v, want %v naming %s", err, tt.want, tt.drop)
			}
		})
	}
	// Only asymmetric signatures: nothing to check with a symmetric secret.
	r := post("/", body)
	r.Header.Set("webhook-id", "msg_1")
	r.Header.Set("webhook-timestamp", unix(baseTime))
	r.Header.Set("webhook-signature", "v1a,c2ln")
	if err := verify(t, p, r); !errors.Is(err, provider.ErrMalformedHeader) {
		t.Fatalf("v1a only: %v", err)
	}
}

func TestEvolution(t *testing.T) {
	p := newPreset(t, "evolution", provider.Config{Secrets: []string{"k1"}}, baseTime)
	tests := []struct {
		name, give, want string
	}{
		{"upsert", `{"event":"messages.upsert","data":{"key":{"id":"3EB0A"}}}`, "messages.upsert:3EB0A"},
		{"update", `{"event":"messages.update","data":{"keyId":"3EB0A","status":"READ"}}`, "messages.update:3EB0A:READ"},
		{"update without status", `{"event":"messages.update","data":{"keyId":"3EB0A"}}`, ""},
		{"connection", `{"event":"connection.update","data":{"state":"open"}}`, ""},
		{"no event", `{"data":{"key":{"id":"3EB0A"}}}`, ""},
		{"data is a list", `{"event":"contacts.upsert","data":[{"id":"1"}]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := p.Key(post("/", tt.give), []byte(tt.give)); got != tt.want || err != nil {
				t.Fatalf("Key = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	bearer := newPreset(t, "evolution", provider.Config{Secrets: []string{"k1"}, Evolution: provider.EvolutionOptions{Header: "Authorization"}}, baseTime)
	r := post("/", `{}`)
	r.Header.Set("Authorization", "Bearer k1")
	if err := verify(t, bearer, r); err != nil {
		t.Fatalf("Authorization: Bearer: %v", err)
	}
	r.Header.Set("apikey", "k1")
	r.Header.Set("Authorization", "Bearer k2")
	if err := verify(t, bearer, r); !errors.Is(err, provider.ErrTokenMismatch) {
		t.Fatalf("wrong bearer with the right apikey header: %v", err)
	}
}

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

func TestStone(t *testing.T) {
	keys := stoneKeys(t)
	f := fixtures(t)
	stone := f[slices.IndexFunc(f, func(f fixture) bool { return f.name == "stone" })]

	t.Run("public_key option", func(t *testing.T) {
		p := newPreset(t, "stone", provider.Config{Secrets: []string{keys.ourPEM}, Stone: provider.StoneOptions{PublicKey: keys.stonePEM}}, baseTime)
		if err := verify(t, p, stone.build(t, "1", baseTime, stone.secret())); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("not encrypted to us", func(t *testing.T) {
		p := newPreset(t, "stone", provider.Config{Secrets: []string{keys.otherPEM}, Stone: stone.cfg.Stone}, baseTime)
		err := verify(t, p, stone.build(t, "1", baseTime, stone.secret()))
		if !errors.Is(err, provider.ErrNoMatchingSignature) || !strings.Contains(err.Error(), "does not decrypt") {
			t.Fatalf("Verify = %v", err)
		}
	})
	t.Run("malformed body", func(t *testing.T) {
		p := newPreset(t, "stone", stone.cfg, baseTime)
		for _, body := range []string{`{}`, `not json`, `{"encrypted_body":"a.b.c"}`, `{"encrypted_body":"e30.e30.e30.e30.e30"}`} {
			if err := verify(t, p, post("/", body)); !errors.Is(err, provider.ErrMalformedBody) {
				t.Fatalf("body %s: Verify = %v, want ErrMalformedBody", body, err)
			}
		}
	})
	t.Run("iat tolerance when set", func(t *testing.T) {
		cfg := stone.cfg
		cfg.Tolerance = time.Hour
		p := newPreset(t, "stone", cfg, baseTime)
		if err := verify(t, p, stone.build(t, "1", baseTime.Add(-2*time.Hour), stone.secret())); !errors.Is(err, provider.ErrTimestampOutOfTolerance) {
			t.Fatalf("2h-old iat: %v", err)
		}
		if err := verify(t, newPreset(t, "stone", stone.cfg, baseTime), stone.build(t, "1", baseTime.Add(-2*time.Hour), stone.secret())); err != nil {
			t.Fatalf("2h-old iat without tolerance: %v", err)
		}
	})
	t.Run("key without header", func(t *testing.T) {
		p := newPreset(t, "stone", stone.cfg, baseTime)
		r := stone.build(t, "1", baseTime, stone.secret())
		r.Header.Del("x-stone-webhook-event-id")
		if k, err := p.Key(r, readBody(t, r)); k != "" || err != nil {
			t.Fatalf("Key = %q, %v; want \"\" (body hash)", k, err)
		}
	})
}

// retentionRoute is a route with preset name (configured by cfg) and no TTL,
// over a memory store, everything on clk; it counts handler runs.
func retentionRoute(t *testing.T, name string, cfg provider.Config, clk *fakeclock.Clock) (http.Handler, *atomic.Int64) {
	t.Helper()
	st, err := memstore.New(memstore.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := idemhook.New(st, idemhook.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Now = clk.Now
	p, err := provider.New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := m.Route(idemhook.Route{Source: name, Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	runs := &atomic.Int64{}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusOK)
	})), runs
}

// Every preset's default TTL covers its provider's retry window: an attempt
// at the very end of the window, re-signed as the provider does, is replayed;
// once the default TTL has passed the key is free again.
func TestPresetDefaultTTLCoversTheRetryWindow(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			clk := fakeclock.New(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
			h, runs := retentionRoute(t, f.name, f.cfg, clk)
			p, _ := provider.New(f.name, f.cfg)
			if p.RetryWindow <= 0 {
				t.Fatalf("preset %s declares no retry window", f.name)
			}
			attempt := func() int {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, f.build(t, "retention", clk.Now(), f.secret()))
				return rec.Code
			}
			start := clk.Now()
			for _, at := range []time.Duration{0, time.Minute, p.RetryWindow} {
				clk.Advance(start.Add(at).Sub(clk.Now()))
				if code := attempt(); code != 200 && code != f.dupStatus {
					t.Fatalf("attempt at +%v: status %d", at, code)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times for attempts up to the end of the %v window, want 1", n, p.RetryWindow)
			}
			clk.Advance(start.Add(p.DefaultTTL() + time.Second).Sub(clk.Now()))
			attempt()
			if n := runs.Load(); n != 2 {
				t.Fatalf("after the default TTL (%v) the handler ran %d times in all, want 2", p.DefaultTTL(), n)
			}
		})
	}
}

// Stripe retries for about 3 days in live mode, re-signing every attempt.
// With the preset's default TTL, attempts at 0h, 1h, 25h and 71h run the
// handler once (with the old 24h default, the one at 25h ran it again).
func TestStripeRetriesOnDayTwoAndThreeAreReplayed(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	const secret = "whsec_retention"
	h, runs := retentionRoute(t, "stripe", provider.Config{Secrets: []string{secret}}, clk)
	body := `{"id":"evt_retention","object":"event","type":"payment_intent.succeeded"}`
	start := clk.Now()
	for i, at := range []time.Duration{0, time.Hour, 25 * time.Hour, 71 * time.Hour} {
		clk.Advance(start.Add(at).Sub(clk.Now()))
		r := post("/stripe", body)
		ts := unix(clk.Now())
		r.Header.Set("Stripe-Signature", "t="+ts+",v1="+hmacHex(secret, ts, ".", body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		replayed := rec.Header().Get(idemhook.ReplayedHeader) == "true"
		if rec.Code != 200 || replayed != (i > 0) {
			t.Fatalf("attempt at +%v: status %d, replayed %v", at, rec.Code, replayed)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// The retention table of docs/providers.md is the presets' own: each row's
// retry window and default TTL equal the preset's.
func TestRetentionTableMatchesThePresets(t *testing.T) {
	doc, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][2]string{}
	for line := range strings.SplitSeq(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		window, ttl := strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])
		if _, err := parseDays(window); err == nil {
			rows[name] = [2]string{window, ttl}
		}
	}
	for _, f := range fixtures(t) {
		p, err := provider.New(f.name, f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		row, ok := rows[f.name]
		if !ok {
			t.Errorf("docs/providers.md: no retention row for %s", f.name)
			continue
		}
		if w, _ := parseDays(row[0]); w != p.RetryWindow {
			t.Errorf("%s: docs say retry window %s, the preset has %v", f.name, row[0], p.RetryWindow)
		}
		if d, err := parseDays(row[1]); err != nil || d != p.DefaultTTL() {
			t.Errorf("%s: docs say default TTL %s, the preset has %v", f.name, row[1], p.DefaultTTL())
		}
	}
	if len(rows) != len(provider.Names()) {
		t.Errorf("docs/providers.md has %d retention rows, want one per preset (%d)", len(rows), len(provider.Names()))
	}
}

// parseDays parses the table's durations: "3d4h", "15m", "14d".
func parseDays(s string) (time.Duration, error) {
	days := time.Duration(0)
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil {
			return 0, err
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	if s == "" {
		if days == 0 {
			return 0, errors.New("empty duration")
		}
		return days, nil
	}
	d, err := time.ParseDuration(s)
	return days + d, err
}

// SetOption sets a preset's typed option by its configuration name; errors
// are typed and name the option, and Names, New and OptionNames read one
// registry.
func TestSetOptionAndTypedErrors(t *testing.T) {
	var cfg provider.Config
	if err := cfg.SetOption("whatsapp-cloud", "verify_token", "vt"); err != nil || cfg.WhatsAppCloud.VerifyToken != "vt" {
		t.Fatalf("SetOption verify_token: %v, %+v", err, cfg)
	}
	var oe *provider.OptionError
	err := cfg.SetOption("whatsapp-cloud", "verifytoken", "x")
	if !errors.As(err, &oe) || oe.Option != "verifytoken" || err.Error() != "provider whatsapp-cloud: option verifytoken: unknown option (known: verify_token)" {
		t.Fatalf("unknown option: %v", err)
	}
	if err := cfg.SetOption("stripe", "header", "x"); !errors.As(err, &oe) || !strings.Contains(err.Error(), "this provider takes no options") {
		t.Fatalf("option of a preset without options: %v", err)
	}
	if err := cfg.SetOption("strype", "x", "y"); err == nil || !strings.Contains(err.Error(), `unknown provider "strype"`) {
		t.Fatalf("unknown provider: %v", err)
	}
	_, err = provider.New("evolution", provider.Config{Secrets: []string{"k"}, Evolution: provider.EvolutionOptions{Header: "bad header:"}})
	if !errors.As(err, &oe) || oe.Option != "header" {
		t.Fatalf("bad option value: %v", err)
	}
	var te *provider.ToleranceError
	if _, err := provider.New("github", provider.Config{Secrets: []string{"s"}, Tolerance: time.Minute}); !errors.As(err, &te) {
		t.Fatalf("tolerance on an untimed scheme: %v", err)
	}
	for _, name := range provider.Names() {
		if _, err := provider.New(name, provider.Config{}); err == nil || strings.Contains(err.Error(), "unknown provider") {
			t.Errorf("New(%q) with no secret: %v", name, err)
		}
	}
	if got := strings.Join(provider.OptionNames("stone"), ","); got != "jwks,public_key" {
		t.Errorf("OptionNames(stone) = %q", got)
	}
}
