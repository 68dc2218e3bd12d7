package provider_test

// The differential test of provider specs: each Go preset that a
// provider.Spec can express is written as YAML in testdata/specs, read by
// the gateway's own reader (config.ParseProviderSpec, the code that reads
// a route's provider: mapping), built by Spec.Preset, and run beside the
// Go preset on the same signed, forged, stale, tampered and handshake
// requests: both must accept and refuse the same ones, for the same
// reason and header, give the same key and answer handshakes alike.
//
// Nine presets are specs themselves (provider.BuiltinSpecs): they and
// their YAML are the same thing by construction, which
// TestBuiltinSpecsAreTheYAML checks, so the differential test compares
// only the presets still written in Go.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/provider"
)

// notExpressible are the presets no spec describes, and why. A new preset
// must be given a spec in testdata/specs or a reason here.
var notExpressible = map[string]string{
	"adyen": "the HMAC is inside the body, one per notification item, over eight of the item's fields " +
		"(additionalData.hmacSignature); a spec's signature is in a header, over one signed content per request",
	"stone": "nothing is signed in a header: the body is a JWE (RSA-OAEP-256, A256GCM) to decrypt with the " +
		"application's private key, wrapping an RS256 JWS checked against Stone's JWKS",
}

// partly are the presets a spec describes for their common requests only,
// and what it does not describe: TestSpecsMatchPresets compares them on the
// fixture's requests, and TestSpecPartly checks that the spec refuses what
// it can't check rather than accept it.
var partly = map[string]string{
	"twilio": "HMAC-SHA256 chosen by the X-Twilio-Webhooks-Signature-Settings header (a Webhook Rule's SharedKey), " +
		"JSON bodies signed through the bodySHA256 query parameter (Event Streams), and the key's exclusion of " +
		"forms with an EventType (Conversations)",
	"messenger": "the key of an unsent message (is_deleted: true, read as a value only by the preset) and of an " +
		"event without an id (the preset's is the event's canonical hash, a spec's the body hash): " +
		"TestSpecKnownKeyDifferences pins both",
	"instagram": "as messenger",
	"hubspot": "the URL HubSpot signed with the percent-escapes its validation guide lists decoded (%3A %2F %3F " +
		"%40 ...): a spec signs the URL as the request arrived (with and without the default port) only, and the " +
		"refusal of a request carrying only a v1 or v2 signature is reported as a missing v3 header",
}

// specEnv is the environment the specs are read with.
func specEnv(name string) string {
	return map[string]string{"WHATSAPP_VERIFY_TOKEN": "vt-123", "MESSENGER_VERIFY_TOKEN": "vt-page", "INSTAGRAM_VERIFY_TOKEN": "vt-ig"}[name]
}

// loadSpec reads testdata/specs/<name>.yaml as the gateway reads a
// route's provider: mapping.
func loadSpec(t testing.TB, name string) provider.Spec {
	t.Helper()
	file := filepath.Join("testdata", "specs", name+".yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := config.ParseProviderSpec(file, data, specEnv)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return spec
}

func specPreset(t testing.TB, spec provider.Spec, cfg provider.Config, now time.Time) *idemhook.Preset {
	t.Helper()
	cfg.Now = func() time.Time { return now }
	// The spec's own settings replace the Go preset's options.
	cfg.WhatsAppCloud = provider.WhatsAppCloudOptions{}
	cfg.Twilio = provider.TwilioOptions{}
	cfg.HubSpot = provider.HubSpotOptions{}
	cfg.Messenger = provider.MessengerOptions{}
	cfg.Instagram = provider.InstagramOptions{}
	cfg.SendGrid = provider.SendGridOptions{}
	p, err := spec.Preset(cfg)
	if err != nil {
		t.Fatalf("Spec.Preset: %v", err)
	}
	return p
}

// outcome is what a preset does with a request: Verify's result, and when
// it passes, the key and the handshake's answer.
type outcome struct {
	verified  bool
	reason    error // the Err* sentinel
	header    string
	key       string
	handshake string // "" when Handshake does not answer
}

var sentinels = []error{provider.ErrMissingHeader, provider.ErrMalformedHeader, provider.ErrTimestampOutOfTolerance,
	provider.ErrNoMatchingSignature, provider.ErrTokenMismatch, provider.ErrMalformedBody, provider.ErrUnsignedTimestamp}

func run(p *idemhook.Preset, r *http.Request, body []byte) outcome {
	var o outcome
	err := p.Verify(r, body)
	if err != nil {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				o.reason = s
			}
		}
		var ve *provider.VerifyError
		if errors.As(err, &ve) {
			o.header = strings.ToLower(ve.Header)
		}
		return o
	}
	o.verified = true
	o.key, _ = p.Key(r, body)
	if p.Handshake != nil {
		w := httptest.NewRecorder()
		if p.Handshake(w, r, body) {
			o.handshake = fmt.Sprintf("%d %s %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
		}
	}
	return o
}

// diff runs r through both presets and describes how they differ, or "".
func diff(t testing.TB, goP, specP *idemhook.Preset, r *http.Request) string {
	d, _ := diffOutcome(t, goP, specP, r)
	return d
}

// diffOutcome is diff, and the Go preset's outcome.
func diffOutcome(t testing.TB, goP, specP *idemhook.Preset, r *http.Request) (string, outcome) {
	body := readBody(t, r)
	a := run(goP, r.Clone(r.Context()), body)
	b := run(specP, r.Clone(r.Context()), body)
	if a != b {
		return fmt.Sprintf("Go preset %+v, spec %+v", a, b), a
	}
	return "", a
}

// specCase is one request both presets get.
type specCase struct {
	name string
	cfg  *provider.Config // nil: the fixture's
	at   time.Time        // the presets' clock; zero: baseTime
	give func() *http.Request
}

// specCases are the requests of TestPresetsVerifyAndKey, and more, for a
// fixture.
func specCases(t testing.TB, f fixture) []specCase {
	sent := baseTime.Add(-10 * time.Second)
	rotated := f.cfg
	other := f.rotateWith
	if other == "" {
		other = f.wrongSecret
	}
	rotated.Secrets = []string{other, "", f.secret()}
	wrongOnly := f.cfg
	wrongOnly.Secrets = []string{f.wrongSecret}
	valid := func(id string, at time.Time) func() *http.Request {
		return func() *http.Request { return f.build(t, id, at, f.secret()) }
	}
	edit := func(fn func(r *http.Request, body []byte) *http.Request) func() *http.Request {
		return func() *http.Request {
			r := f.build(t, "1", sent, f.secret())
			return fn(r, readBody(t, r))
		}
	}
	withBody := func(r *http.Request, b []byte) *http.Request {
		r2 := httptest.NewRequest(r.Method, r.URL.String(), bytes.NewReader(b))
		r2.Header = r.Header.Clone()
		return r2
	}
	cases := []specCase{
		{name: "valid", give: valid("1", sent)},
		{name: "another event", give: valid("2", sent)},
		{name: "retry re-signed", give: valid("1", baseTime)},
		{name: "wrong secret", give: func() *http.Request { return f.build(t, "1", sent, f.wrongSecret) }},
		{name: "only the wrong secret configured", cfg: &wrongOnly, give: valid("1", sent)},
		{name: "rotated secrets", cfg: &rotated, give: valid("1", sent)},
		{name: "tampered body", give: edit(func(r *http.Request, b []byte) *http.Request { return withBody(r, append(b, ' ')) })},
		{name: "body of another event", give: edit(func(r *http.Request, _ []byte) *http.Request {
			return withBody(r, readBody(t, f.build(t, "2", sent, f.secret())))
		})},
		{name: "empty body", give: edit(func(r *http.Request, _ []byte) *http.Request { return withBody(r, nil) })},
		{name: "stale", give: valid("1", baseTime.Add(-6*time.Minute))},
		{name: "future", give: valid("1", baseTime.Add(6*time.Minute))},
		{name: "just inside tolerance", give: valid("1", baseTime.Add(-5*time.Minute))},
		{name: "a day old", give: valid("1", baseTime.Add(-24*time.Hour))},
		{name: "a day old, clock a day back", at: baseTime.Add(-24 * time.Hour), give: valid("1", baseTime.Add(-24*time.Hour))},
	}
	if f.timestamped || f.name == "mercadopago" {
		// The route's tolerance replaces the spec's (and turns on Mercado
		// Pago's age check).
		tight := f.cfg
		tight.Tolerance = time.Minute
		cases = append(cases,
			specCase{name: "route tolerance, inside", cfg: &tight, give: valid("1", baseTime.Add(-50*time.Second))},
			specCase{name: "route tolerance, outside", cfg: &tight, give: valid("1", baseTime.Add(-2*time.Minute))})
	}
	if f.sigHeader != "" {
		cases = append(cases,
			specCase{name: "missing header", give: edit(func(r *http.Request, b []byte) *http.Request {
				r.Header.Del(f.sigHeader)
				return withBody(r, b)
			})},
			specCase{name: "malformed header", give: edit(func(r *http.Request, b []byte) *http.Request {
				r.Header.Set(f.sigHeader, f.malformed)
				return withBody(r, b)
			})},
			specCase{name: "header with spaces around", give: edit(func(r *http.Request, b []byte) *http.Request {
				r.Header.Set(f.sigHeader, "  "+r.Header.Get(f.sigHeader)+" ")
				return withBody(r, b)
			})},
			specCase{name: "header upper case", give: edit(func(r *http.Request, b []byte) *http.Request {
				r.Header.Set(f.sigHeader, strings.ToUpper(r.Header.Get(f.sigHeader)))
				return withBody(r, b)
			})},
			specCase{name: "header truncated", give: edit(func(r *http.Request, b []byte) *http.Request {
				v := r.Header.Get(f.sigHeader)
				r.Header.Set(f.sigHeader, v[:len(v)-2])
				return withBody(r, b)
			})},
			specCase{name: "header doubled", give: edit(func(r *http.Request, b []byte) *http.Request {
				v := r.Header.Get(f.sigHeader)
				r.Header.Set(f.sigHeader, v+v)
				return withBody(r, b)
			})},
		)
	}
	// Every other header removed in turn: timestamps, ids, key headers.
	probe := f.build(t, "1", sent, f.secret())
	for name := range probe.Header {
		if strings.EqualFold(name, f.sigHeader) || name == "Content-Type" {
			continue
		}
		cases = append(cases,
			specCase{name: "without " + name, give: edit(func(r *http.Request, b []byte) *http.Request {
				r.Header.Del(name)
				return withBody(r, b)
			})},
			specCase{name: "bad " + name, give: edit(func(r *http.Request, b []byte) *http.Request {
				r.Header.Set(name, "x"+r.Header.Get(name))
				return withBody(r, b)
			})})
	}
	return cases
}

// TestSpecsMatchPresets is the differential test: for each preset written
// as a spec, the same requests give the same outcome.
func TestSpecsMatchPresets(t *testing.T) {
	specified := 0
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			if why, ok := notExpressible[f.name]; ok {
				if _, err := os.Stat(filepath.Join("testdata", "specs", f.name+".yaml")); err == nil {
					t.Fatalf("%s has a spec but is listed as not expressible", f.name)
				}
				t.Skipf("not expressible as a spec: %s", why)
			}
			specified++
			if _, ok := provider.BuiltinSpecs()[f.name]; ok {
				t.Skip("a spec itself: the same as its YAML by construction (TestBuiltinSpecsAreTheYAML)")
			}
			spec := loadSpec(t, f.name)
			goP := newPreset(t, f.name, f.cfg, baseTime)
			specP := specPreset(t, spec, f.cfg, baseTime)
			seen, reasons, answered := map[bool]int{}, map[error]bool{}, 0
			if got, want := presetFields(specP), presetFields(goP); got != want {
				t.Errorf("preset fields: spec %s, Go %s", got, want)
			}
			if got, want := spec.ResponseTimeout, provider.ResponseTimeout(f.name); got != want {
				t.Errorf("response timeout: spec %v, Go %v", got, want)
			}
			for _, c := range specCases(t, f) {
				cfg, at := f.cfg, baseTime
				if c.cfg != nil {
					cfg = *c.cfg
				}
				if !c.at.IsZero() {
					at = c.at
				}
				g, s := newPreset(t, f.name, cfg, at), specPreset(t, spec, cfg, at)
				d, o := diffOutcome(t, g, s, c.give())
				if d != "" {
					t.Errorf("%s: %s", c.name, d)
				}
				seen[o.verified]++
				if o.reason != nil {
					reasons[o.reason] = true
				}
			}
			for _, h := range handshakeCases(t, f.name) {
				d, o := diffOutcome(t, goP, specP, h.give())
				if d != "" {
					t.Errorf("handshake %s: %s", h.name, d)
				}
				if o.handshake != "" {
					answered++
				}
			}
			// The cases must have something to compare: accepted and
			// refused requests, for more than one reason, and answered
			// handshakes where the preset has them.
			if seen[true] == 0 || seen[false] == 0 || len(reasons) < 2 {
				t.Errorf("cases accepted %d, refused %d, reasons %v: too few to compare", seen[true], seen[false], reasons)
			}
			if goP.Handshake != nil && answered == 0 {
				t.Error("no handshake was answered")
			}
		})
	}
	if want := len(provider.Names()) - len(notExpressible); specified != want {
		t.Errorf("%d presets compared, want %d", specified, want)
	}
}

// TestBuiltinSpecsAreTheYAML: each preset written as a spec compiles, and
// its YAML in testdata/specs, read as the gateway reads a route's
// provider: mapping, is the same spec.
func TestBuiltinSpecsAreTheYAML(t *testing.T) {
	builtins := provider.BuiltinSpecs()
	if len(builtins) == 0 {
		t.Fatal("no preset is a spec")
	}
	for name, spec := range builtins {
		if _, err := spec.Preset(provider.Config{Secrets: []string{"eA=="}}); err != nil {
			t.Errorf("%s: the spec does not compile: %v", name, err)
		}
		if _, err := provider.New(name, provider.Config{Secrets: []string{"eA=="}}); err != nil {
			t.Errorf("%s: New: %v", name, err)
		}
		if got := loadSpec(t, name); !reflect.DeepEqual(got, spec) {
			t.Errorf("%s: testdata/specs/%s.yaml is\n%+v\nthe preset's spec is\n%+v", name, name, got, spec)
		}
		if got := provider.ResponseTimeout(name); got != spec.ResponseTimeout {
			t.Errorf("%s: ResponseTimeout is %v, the spec's response_timeout %v", name, got, spec.ResponseTimeout)
		}
	}
}

// presetFields prints what the middleware reads of a preset besides its
// functions.
func presetFields(p *idemhook.Preset) string {
	return fmt.Sprintf("name %s duplicate %d success %d %q retry %v handshake %v",
		p.Name, p.DuplicateStatus, p.SuccessStatus, p.SuccessBody, p.RetryWindow, p.Handshake != nil)
}

// handshakeCases are the handshakes (and near misses) of a provider.
func handshakeCases(t testing.TB, name string) []specCase {
	get := func(target string) func() *http.Request {
		return func() *http.Request { return httptest.NewRequest(http.MethodGet, target, nil) }
	}
	switch name {
	case "whatsapp-cloud":
		return []specCase{
			{name: "challenge", give: get("/wa?hub.mode=subscribe&hub.verify_token=vt-123&hub.challenge=98765")},
			{name: "wrong verify token", give: get("/wa?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=98765")},
			{name: "no verify token", give: get("/wa?hub.mode=subscribe&hub.challenge=98765")},
			{name: "no challenge", give: get("/wa?hub.mode=subscribe&hub.verify_token=vt-123")},
			{name: "other mode", give: get("/wa?hub.mode=unsubscribe&hub.verify_token=vt-123&hub.challenge=1")},
			{name: "empty mode", give: get("/wa?hub.mode=&hub.verify_token=vt-123&hub.challenge=1")},
			{name: "GET without hub.mode", give: get("/wa?hub.challenge=1")},
			{name: "POST with hub.mode", give: func() *http.Request {
				return post("/wa?hub.mode=subscribe&hub.verify_token=vt-123&hub.challenge=1", `{}`)
			}},
			{name: "batch of two", give: func() *http.Request {
				body := `{"entry":[{"changes":[{"value":{"messages":[{"id":"wamid.1"}],"statuses":[{"id":"wamid.2","status":"read","recipient_id":"55"}]}}]}]}`
				r := post("/wa", body)
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("meta-app-secret", body))
				return r
			}},
			{name: "one status", give: func() *http.Request {
				body := `{"entry":[{"changes":[{"value":{"statuses":[{"id":"wamid.2","status":"read","recipient_id":"55"}]}}]}]}`
				r := post("/wa", body)
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("meta-app-secret", body))
				return r
			}},
			{name: "one status without recipient", give: func() *http.Request {
				body := `{"entry":[{"changes":[{"value":{"statuses":[{"id":"wamid.2","status":"sent"}]}}]}]}`
				r := post("/wa", body)
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("meta-app-secret", body))
				return r
			}},
		}
	case "messenger", "instagram":
		token := map[string]string{"messenger": "vt-page", "instagram": "vt-ig"}[name]
		signed := func(body string) func() *http.Request {
			return func() *http.Request {
				r := post("/meta", body)
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("meta-app-secret", body))
				return r
			}
		}
		return []specCase{
			{name: "challenge", give: get("/meta?hub.mode=subscribe&hub.verify_token=" + token + "&hub.challenge=98765")},
			{name: "wrong verify token", give: get("/meta?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=98765")},
			{name: "no challenge", give: get("/meta?hub.mode=subscribe&hub.verify_token=" + token)},
			{name: "other mode", give: get("/meta?hub.mode=unsubscribe&hub.verify_token=" + token + "&hub.challenge=1")},
			{name: "one message", give: signed(`{"object":"page","entry":[{"messaging":[{"sender":{"id":"1"},"message":{"mid":"m.1","text":"hi"}}]}]}`)},
			{name: "one postback", give: signed(`{"object":"page","entry":[{"messaging":[{"sender":{"id":"1"},"postback":{"mid":"m.2","payload":"P"}}]}]}`)},
			{name: "batch of two", give: signed(`{"object":"page","entry":[{"messaging":[{"message":{"mid":"m.1"}},{"message":{"mid":"m.4"}}]}]}`)},
		}
	case "slack":
		signed := func(body, secret string) func() *http.Request {
			return func() *http.Request {
				r := post("/slack", body)
				r.Header.Set("X-Slack-Request-Timestamp", unix(baseTime))
				r.Header.Set("X-Slack-Signature", "v0="+hmacHex(secret, "v0:"+unix(baseTime)+":"+body))
				return r
			}
		}
		const uv = `{"token":"t","challenge":"c-42","type":"url_verification"}`
		return []specCase{
			{name: "url_verification", give: signed(uv, "8f742231b10e8888abcd99yyyzzz85a5")},
			{name: "unsigned url_verification", give: signed(uv, "other")},
			{name: "slash command", give: signed("token=x&command=%2Fhi&text=", "8f742231b10e8888abcd99yyyzzz85a5")},
			{name: "event without app id", give: signed(`{"type":"event_callback","event_id":"Ev1"}`, "8f742231b10e8888abcd99yyyzzz85a5")},
			{name: "numeric event id", give: signed(`{"type":"event_callback","event_id":12,"api_app_id":"A1"}`, "8f742231b10e8888abcd99yyyzzz85a5")},
		}
	case "twitch":
		return []specCase{
			{name: "callback verification", give: func() *http.Request {
				return twitchRequest("/twitch", "m-1", "webhook_callback_verification", baseTime, "twitch-eventsub-secret", `{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{}}`)
			}},
			{name: "verification without challenge", give: func() *http.Request {
				return twitchRequest("/twitch", "m-2", "webhook_callback_verification", baseTime, "twitch-eventsub-secret", `{"subscription":{}}`)
			}},
			{name: "forged verification", give: func() *http.Request {
				return twitchRequest("/twitch", "m-3", "webhook_callback_verification", baseTime, "other", `{"challenge":"x"}`)
			}},
			{name: "revocation", give: func() *http.Request {
				return twitchRequest("/twitch", "m-4", "revocation", baseTime, "twitch-eventsub-secret", `{"subscription":{"status":"authorization_revoked"}}`)
			}},
		}
	case "zoom":
		return []specCase{
			{name: "url_validation", give: func() *http.Request {
				return zoomRequest("/zoom", baseTime, "zoom-secret-token", `{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
			}},
			{name: "url_validation without token", give: func() *http.Request {
				return zoomRequest("/zoom", baseTime, "zoom-secret-token", `{"payload":{},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
			}},
			{name: "event without payload", give: func() *http.Request {
				return zoomRequest("/zoom", baseTime, "zoom-secret-token", `{"event_ts":1654503849680,"event":"meeting.ended"}`)
			}},
			{name: "event with null payload", give: func() *http.Request {
				return zoomRequest("/zoom", baseTime, "zoom-secret-token", `{"event_ts":1654503849680,"event":"meeting.ended","payload":null}`)
			}},
		}
	case "mailgun":
		body := func(b string) func() *http.Request { return func() *http.Request { return post("/mailgun", b) } }
		const key = "key-mailgun-signing"
		ts := unix(baseTime)
		good := hmacHex(key, ts+"tok")
		return []specCase{
			{name: "signed", give: body(mailgunBody(mailgunSig(key, baseTime, "tok")))},
			{name: "a numeric timestamp", give: body(mailgunBody(`{"timestamp":` + ts + `,"token":"tok","signature":"` + good + `"}`))},
			{name: "a wrong parent-signature beside a right signature", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","signature":"` + good + `","parent-signature":"` + hmacHex("other", ts+"tok") + `"}`))},
			{name: "the parent-signature right", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","signature":"` + hmacHex("other", ts+"tok") + `","parent-signature":"` + good + `"}`))},
			{name: "parent-signature a number", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","signature":"` + good + `","parent-signature":12}`))},
			{name: "parent-signature null", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","signature":"` + good + `","parent-signature":null}`))},
			{name: "parent-signature empty", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","signature":"` + good + `","parent-signature":""}`))},
			{name: "only a parent-signature", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","parent-signature":"` + good + `"}`))},
			{name: "token a number", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":12,"signature":"` + hmacHex(key, ts+"12") + `"}`))},
			{name: "no token", give: body(mailgunBody(`{"timestamp":"` + ts + `","signature":"` + hmacHex(key, ts) + `"}`))},
			{name: "timestamp not seconds", give: body(mailgunBody(`{"timestamp":"soon","token":"tok","signature":"` + hmacHex(key, "soontok") + `"}`))},
			{name: "signature not hex", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","signature":"zz"}`))},
			{name: "signature of 16 bytes", give: body(mailgunBody(`{"timestamp":"` + ts + `","token":"tok","signature":"` + good[:32] + `"}`))},
			{name: "no signature object", give: body(`{"event-data":{"id":"ev-1"}}`)},
			{name: "signature not an object", give: body(`{"signature":"x","event-data":{"id":"ev-1"}}`)},
			{name: "a legacy form webhook", give: body("timestamp=1780000000&token=tok&signature=00&event=delivered")},
		}
	case "evolution":
		tok := func(body string) func() *http.Request {
			return func() *http.Request {
				r := post("/evo", body)
				r.Header.Set("apikey", "evo-key")
				return r
			}
		}
		return []specCase{
			{name: "messages.update", give: tok(`{"event":"messages.update","data":{"keyId":"K1","status":"READ"}}`)},
			{name: "messages.update without status", give: tok(`{"event":"messages.update","data":{"keyId":"K1"}}`)},
			{name: "no event", give: tok(`{"data":{"key":{"id":"K1"}}}`)},
			{name: "not JSON", give: tok(`hello`)},
		}
	case "github":
		return []specCase{
			{name: "no hook id", give: func() *http.Request {
				r := post("/gh", `{}`)
				r.Header.Set("X-GitHub-Delivery", "d-1")
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("It's a Secret to Everybody", `{}`))
				return r
			}},
		}
	case "shopify":
		return []specCase{
			{name: "no webhook id", give: func() *http.Request {
				r := post("/s", `{}`)
				r.Header.Set("X-Shopify-Event-Id", "e-1")
				r.Header.Set("X-Shopify-Topic", "orders/paid")
				r.Header.Set("X-Shopify-Hmac-Sha256", hmacB64([]byte("shpss_client_secret"), `{}`))
				return r
			}},
		}
	case "mercadopago":
		mp := func(target, reqID, sig string) func() *http.Request {
			return func() *http.Request {
				r := post(target, `{"id":123}`)
				if reqID != "" {
					r.Header.Set("x-request-id", reqID)
				}
				r.Header.Set("x-signature", sig)
				return r
			}
		}
		ts := unix(baseTime)
		return []specCase{
			{name: "no data.id", give: mp("/mp", "r-1", "ts="+ts+",v1="+hmacHex("mp-secret-signature", "request-id:r-1;ts:"+ts+";"))},
			{name: "no request id", give: mp("/mp?data.id=ABC", "", "ts="+ts+",v1="+hmacHex("mp-secret-signature", "id:abc;ts:"+ts+";"))},
			{name: "spaces", give: mp("/mp", "", " ts = "+ts+" , v1 = "+hmacHex("mp-secret-signature", "ts:"+ts+";"))},
			{name: "milliseconds", give: mp("/mp", "", "ts="+ts+"000,v1="+hmacHex("mp-secret-signature", "ts:"+ts+"000;"))},
			{name: "two v1", give: mp("/mp", "", "ts="+ts+",v1="+hmacHex("old", "ts:"+ts+";")+",v1="+hmacHex("mp-secret-signature", "ts:"+ts+";"))},
		}
	case "stripe":
		st := func(v string) func() *http.Request {
			return func() *http.Request {
				r := post("/", `{"id":"evt_1"}`)
				r.Header.Set("Stripe-Signature", v)
				return r
			}
		}
		ts := unix(baseTime)
		sig := hmacHex("whsec_test_stripe", ts+`.{"id":"evt_1"}`)
		return []specCase{
			{name: "v0 only", give: st("t=" + ts + ",v0=" + sig)},
			{name: "two t", give: st("t=" + ts + ",t=" + ts + ",v1=" + sig)},
			{name: "negative t", give: st("t=-5,v1=" + sig)},
			{name: "spaced", give: st("t=" + ts + ", v1=" + sig)},
			{name: "empty item", give: st("t=" + ts + ",,v1=" + sig)},
		}
	case "standardwebhooks", "svix":
		const (
			swID   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
			swTS   = "1614265330"
			swBody = `{"test": 2432232314}`
			swSig  = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
		)
		sw := func(prefix, sig string) func() *http.Request {
			return func() *http.Request {
				r := post("/", swBody)
				r.Header.Set(prefix+"id", swID)
				r.Header.Set(prefix+"timestamp", swTS)
				r.Header.Set(prefix+"signature", sig)
				return r
			}
		}
		// Published vectors, signed in 2021: both presets' clocks are then.
		return []specCase{
			{name: "webhook-* vector", give: sw("webhook-", "v1a,c2lnbmF0dXJl v1,bm9wZQ== "+swSig)},
			{name: "svix-* vector", give: sw("svix-", swSig)},
			{name: "entry without comma", give: sw("webhook-", "v1 "+swSig)},
			{name: "v1a only", give: sw("webhook-", "v1a,c2lnbmF0dXJl")},
		}
	}
	return nil
}

// TestSpecVectors runs the SDK-made vectors of testdata/provider-vectors.json
// (twitch, zoom, mailgun, twilio) and the published Standard Webhooks vectors through both.
func TestSpecVectors(t *testing.T) {
	for _, name := range []string{"twitch", "zoom", "mailgun", "twilio"} {
		spec := loadSpec(t, name)
		for i, v := range nodeVectors(t, name) {
			if name == "twilio" && twilioBeyondSpec(v) {
				continue // TestSpecPartly
			}
			cfg := provider.Config{Secrets: []string{v.Secret}}
			now := time.Unix(v.Now, 0)
			g, s := newPreset(t, name, cfg, now), specPreset(t, spec, cfg, now)
			if d := diff(t, g, s, v.request(v.Body)); d != "" {
				t.Errorf("%s vector %d (%s): %s", name, i, v.Name, d)
			}
		}
	}
	swNow := time.Unix(1614265330, 0)
	for _, name := range []string{"standardwebhooks", "svix"} {
		spec := loadSpec(t, name)
		for _, secret := range []string{stdWebhooksSecret, strings.TrimPrefix(stdWebhooksSecret, "whsec_")} {
			cfg := provider.Config{Secrets: []string{secret}}
			g, s := newPreset(t, name, cfg, swNow), specPreset(t, spec, cfg, swNow)
			passed := 0
			for _, c := range handshakeCases(t, name) {
				r := c.give()
				if d := diff(t, g, s, r); d != "" {
					t.Errorf("%s %s: %s", name, c.name, d)
				}
				if verify(t, s, c.give()) == nil {
					passed++
				}
			}
			if passed == 0 {
				t.Errorf("%s: no published vector passes: the comparison compares refusals only", name)
			}
		}
	}
}

// TestSpecDifferencesAreCaught: a spec that is subtly wrong is told apart
// from its preset by the same cases, so the differential test can fail.
func TestSpecDifferencesAreCaught(t *testing.T) {
	byName := map[string]fixture{}
	for _, f := range fixtures(t) {
		byName[f.name] = f
	}
	for _, tt := range []struct {
		preset, why string
		edit        func(*provider.Spec)
	}{
		{"stripe", "signs with ':' instead of '.'", func(s *provider.Spec) { s.Signature.Signed = "{timestamp}:{body}" }},
		{"stripe", "a tolerance of 10 minutes", func(s *provider.Spec) { s.Signature.Timestamp.Tolerance = 10 * time.Minute }},
		{"stripe", "no tolerance", func(s *provider.Spec) { s.Signature.Timestamp.Tolerance = provider.NoTolerance }},
		{"github", "keyed by the delivery alone", func(s *provider.Spec) { s.Key.Templates = s.Key.Templates[1:] }},
		{"ifood", "base64 signatures", func(s *provider.Spec) { s.Signature.Encoding = "base64" }},
		{"ifood", "duplicates answered 200", func(s *provider.Spec) { s.Success.Status = 200 }},
		{"paddle", "signature key v1", func(s *provider.Spec) { s.Signature.SignatureKey = "v1" }},
		{"mercadopago", "data.id not lower-cased", func(s *provider.Spec) {
			s.Signature.Signed = "[id:{query:data.id};][request-id:{header:x-request-id};]ts:{timestamp};"
		}},
		{"svix", "no webhook-* fallback", func(s *provider.Spec) { s.AlternateHeaders = provider.AlternateHeaders{} }},
		{"slack", "no url_verification", func(s *provider.Spec) { s.Handshakes = nil }},
		{"whatsapp-cloud", "challenges are not refused without subscribe", func(s *provider.Spec) { s.Handshakes[0].Require = s.Handshakes[0].Require[1:] }},
		{"zoom", "the answer's token is not hashed", func(s *provider.Spec) {
			s.Handshakes[0].Answer.JSON = map[string]any{"plainToken": "{json:payload.plainToken}", "encryptedToken": "{json:payload.plainToken|sha256}"}
		}},
		{"mailgun", "no parent-signature", func(s *provider.Spec) { s.Signature.JSON = s.Signature.JSON[:1] }},
		{"mailgun", "the token not signed", func(s *provider.Spec) { s.Signature.Signed = "{timestamp}" }},
		{"evolution", "a Bearer prefix accepted on apikey", func(s *provider.Spec) { s.Signature.Prefix = "Bearer " }},
	} {
		t.Run(tt.preset+"/"+tt.why, func(t *testing.T) {
			f := byName[tt.preset]
			spec := loadSpec(t, tt.preset)
			tt.edit(&spec)
			goP := newPreset(t, f.name, f.cfg, baseTime)
			specP := specPreset(t, spec, f.cfg, baseTime)
			found := presetFields(specP) != presetFields(goP)
			cases := append(specCases(t, f), handshakeCases(t, f.name)...)
			cases = append(cases, specCase{name: "bearer", give: func() *http.Request {
				r := f.build(t, "1", baseTime, f.secret())
				if f.name == "evolution" {
					r.Header.Set("apikey", "Bearer "+f.secret())
				}
				return r
			}})
			for _, c := range cases {
				cfg, at := f.cfg, baseTime
				if c.cfg != nil {
					cfg = *c.cfg
				}
				if !c.at.IsZero() {
					at = c.at
				}
				g, s := newPreset(t, f.name, cfg, at), specPreset(t, spec, cfg, at)
				if diff(t, g, s, c.give()) != "" {
					found = true
				}
			}
			if !found {
				t.Fatalf("a spec that %s behaves as the %s preset on every case: the differential test could not fail", tt.why, tt.preset)
			}
		})
	}
}

// TestSpecEndToEnd serves each spec's preset through the middleware over
// real HTTP: a delivery runs the handler once, its retry is replayed with
// the provider's duplicate status, a forgery is refused 401 and claims
// nothing.
func TestSpecEndToEnd(t *testing.T) {
	for _, f := range fixtures(t) {
		if _, ok := notExpressible[f.name]; ok {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			s := newServer(t, f.name, "", specPreset(t, loadSpec(t, f.name), f.cfg, baseTime))
			first := baseTime.Add(-4 * time.Minute)
			expect := func(step string, got response, status int, replayed bool, runs int64) {
				t.Helper()
				if got.status != status || got.replayed != replayed || s.runs.Load() != runs {
					t.Fatalf("%s: status %d replayed %v runs %d (body %q); want %d %v %d",
						step, got.status, got.replayed, s.runs.Load(), got.body, status, replayed, runs)
				}
			}
			expect("first delivery", s.send(t, f.build(t, "1", first, f.secret())), 201, false, 1)
			expect("retry", s.send(t, f.build(t, "1", baseTime, f.secret())), cmpOr(f.dupStatus, 201), true, 1)
			got := s.send(t, f.build(t, "3", baseTime, f.wrongSecret))
			expect("forgery", got, 401, false, 1)
			checkProblem(t, got, f.name)
			expect("event 3", s.send(t, f.build(t, "3", baseTime, f.secret())), 201, false, 2)
		})
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// TestSpecErrors: a spec that can't be used is refused at the field it
// names.
func TestSpecErrors(t *testing.T) {
	base := func() provider.Spec { return loadSpec(t, "stripe") }
	cfg := provider.Config{Secrets: []string{"s"}}
	for _, tt := range []struct {
		field string
		edit  func(*provider.Spec)
	}{
		{"signature.algorithm", func(s *provider.Spec) { s.Signature.Algorithm = "hmac-md5" }},
		{"signature.algorithm", func(s *provider.Spec) { s.Signature.Algorithm = "" }},
		{"signature.header", func(s *provider.Spec) { s.Signature.Header = "" }},
		{"signature.header", func(s *provider.Spec) { s.Signature.Header = "Bad Header" }},
		{"signature.encoding", func(s *provider.Spec) { s.Signature.Encoding = "base32" }},
		{"signature.format", func(s *provider.Spec) { s.Signature.Format = "jwt" }},
		{"signature.signature_key", func(s *provider.Spec) { s.Signature.SignatureKey = "" }},
		{"signature.signed", func(s *provider.Spec) { s.Signature.Signed = "{body}" }},
		{"signature.signed", func(s *provider.Spec) { s.Signature.Signed = "{timestamp}.{bdy}" }},
		{"signature.signed", func(s *provider.Spec) { s.Signature.Signed = "{timestamp}.{body" }},
		{"signature.signed", func(s *provider.Spec) { s.Signature.Signed = "[{timestamp}.[{body}]]" }},
		{"signature.timestamp.format", func(s *provider.Spec) { s.Signature.Timestamp.Format = "iso" }},
		{"signature.timestamp.header", func(s *provider.Spec) { s.Signature.Timestamp.Header = "X-Ts" }},
		{"signature.prefix", func(s *provider.Spec) { s.Signature.Prefix = "v1=" }},
		{"signature.secret_encoding", func(s *provider.Spec) { s.Signature.SecretEncoding = "rot13" }},
		{"key.templates[0]", func(s *provider.Spec) { s.Key.Templates = []string{"{json:}"} }},
		{"key.templates[0]", func(s *provider.Spec) { s.Key.Templates = []string{"{timestamp}"} }},
		{"key.single[0].path", func(s *provider.Spec) { s.Key.Single = []provider.SingleItem{{Path: "data.id", Key: "{item:id}"}} }},
		{"success.status", func(s *provider.Spec) { s.Success.Status = 302 }},
		{"success.body", func(s *provider.Spec) { s.Success.Body = "[accepted]" }},
		{"signature.public_url", func(s *provider.Spec) { s.Signature.PublicURL = "https://hooks.example.com" }},
		{"signature.public_url", func(s *provider.Spec) {
			s.Signature.Signed, s.Signature.PublicURL = "{timestamp}{url}", "ftp://x"
		}},
		{"signature.json", func(s *provider.Spec) { s.Signature.JSON = []string{"sig"} }},
		{"signature.format", func(s *provider.Spec) { s.Signature.Header, s.Signature.JSON = "", []string{"sig"} }},
		{"signature.json[0]", func(s *provider.Spec) {
			s.Signature.Header, s.Signature.Format, s.Signature.JSON = "", "", []string{"a..b"}
			s.Signature.SignatureKey, s.Signature.TimestampKey = "", ""
			s.Signature.Timestamp.JSON = "ts"
		}},
		{"signature.timestamp.json", func(s *provider.Spec) { s.Signature.Timestamp.JSON = "ts" }},
		{"handshakes[0].match", func(s *provider.Spec) { s.Handshakes = []provider.Handshake{{}} }},
		{"handshakes[0].unsigned", func(s *provider.Spec) {
			s.Handshakes = []provider.Handshake{{Match: provider.Match{Method: "GET"}, Unsigned: true}}
		}},
		{"handshakes[0].verify_token", func(s *provider.Spec) {
			s.Handshakes = []provider.Handshake{{Match: provider.Match{Method: "GET"}, VerifyTokenFrom: "{query:t}"}}
		}},
		{"handshakes[0].answer.body", func(s *provider.Spec) {
			s.Handshakes = []provider.Handshake{{Match: provider.Match{Method: "GET"}, Answer: provider.Answer{Body: "{json:x|rot13}"}}}
		}},
		{"alternate_headers.headers", func(s *provider.Spec) {
			s.AlternateHeaders = provider.AlternateHeaders{WhenMissing: "a", Headers: map[string]string{"b": "c"}}
		}},
	} {
		s := base()
		tt.edit(&s)
		_, err := s.Preset(cfg)
		var se *provider.SpecError
		if !errors.As(err, &se) || se.Field != tt.field {
			t.Errorf("%s: err %v, want a *SpecError at %s", tt.field, err, tt.field)
		}
	}
	// Secrets and tolerance are refused as the presets refuse them.
	s := loadSpec(t, "standardwebhooks")
	if _, err := s.Preset(provider.Config{Secrets: []string{"whsec_***"}}); !errors.As(err, new(*provider.SecretError)) {
		t.Errorf("undecodable whsec_ secret: %v", err)
	}
	s = loadSpec(t, "github")
	if _, err := s.Preset(provider.Config{Secrets: []string{"x"}, Tolerance: time.Minute}); !errors.As(err, new(*provider.ToleranceError)) {
		t.Errorf("tolerance without a timestamp: %v", err)
	}
	if _, err := s.Preset(provider.Config{}); err == nil {
		t.Error("no secret: no error")
	}
	if !slices.Contains(provider.SpecAlgorithms, "ed25519") {
		t.Error("ed25519 is not listed")
	}
}

// TestSpecPublicKeys: ed25519 and ECDSA signatures (Standard Webhooks'
// v1a with whpk_ keys; an ECDSA P-256 scheme), with the public keys as PEM,
// base64 DER or raw base64, several during a rotation.
func TestSpecPublicKeys(t *testing.T) {
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecOther, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der := func(pub any) []byte {
		b, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pemOf := func(pub any) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der(pub)}))
	}
	edSpec, err := config.ParseProviderSpec("ed.yaml", []byte(`
name: sw-ed25519
signature:
  algorithm: ed25519
  header: webhook-signature
  format: pairs
  separator: " "
  assign: ","
  signature_key: v1a
  encoding: base64
  secret_prefix: whpk_
  signed: "{header:webhook-id}.{timestamp}.{body}"
  timestamp: {header: webhook-timestamp}
key: "{header:webhook-id}"
`), specEnv)
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"type":"contact.created"}`
	edRequest := func(priv ed25519.PrivateKey, at time.Time, b string) *http.Request {
		r := post("/", b)
		r.Header.Set("webhook-id", "msg_1")
		r.Header.Set("webhook-timestamp", unix(at))
		sig := ed25519.Sign(priv, []byte("msg_1."+unix(at)+"."+body))
		r.Header.Set("webhook-signature", "v1,bm9wZQ== v1a,"+base64.StdEncoding.EncodeToString(sig))
		return r
	}
	for _, keys := range [][]string{
		{"whpk_" + base64.StdEncoding.EncodeToString(edPub)},
		{pemOf(edPub)},
		{base64.StdEncoding.EncodeToString(der(edPub))},
		{pemOf(otherPub), "whpk_" + base64.StdEncoding.EncodeToString(edPub)},
	} {
		p := specPreset(t, edSpec, provider.Config{Secrets: keys}, baseTime)
		for _, tt := range []struct {
			name string
			r    *http.Request
			want error
		}{
			{"valid", edRequest(edPriv, baseTime, body), nil},
			{"another key", edRequest(otherPriv, baseTime, body), provider.ErrNoMatchingSignature},
			{"tampered", edRequest(edPriv, baseTime, body+" "), provider.ErrNoMatchingSignature},
			{"stale", edRequest(edPriv, baseTime.Add(-time.Hour), body), provider.ErrTimestampOutOfTolerance},
		} {
			if tt.name == "another key" && len(keys) == 2 {
				tt.want = nil // the rotation lists it
			}
			if err := verify(t, p, tt.r); !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
				t.Errorf("keys %.20q: %s: %v, want %v", keys, tt.name, err, tt.want)
			}
		}
	}
	if _, err := edSpec.Preset(provider.Config{Secrets: []string{pemOf(&ecPriv.PublicKey)}}); !errors.As(err, new(*provider.SecretError)) {
		t.Errorf("an ECDSA key for ed25519: %v", err)
	}

	ecSpec, err := config.ParseProviderSpec("ec.yaml", []byte(`
name: ecdsa
signature:
  algorithm: ecdsa-sha256
  header: X-Signature
  encoding: base64
  signed: "{timestamp}.{body}"
  timestamp: {header: X-Timestamp}
`), specEnv)
	if err != nil {
		t.Fatal(err)
	}
	p := specPreset(t, ecSpec, provider.Config{Secrets: []string{pemOf(&ecPriv.PublicKey)}}, baseTime)
	ecRequest := func(priv *ecdsa.PrivateKey, raw bool, b string) *http.Request {
		r := post("/", b)
		r.Header.Set("X-Timestamp", unix(baseTime))
		sum := sha256.Sum256([]byte(unix(baseTime) + "." + body))
		var sig []byte
		if raw {
			rr, ss, err := ecdsa.Sign(rand.Reader, priv, sum[:])
			if err != nil {
				t.Fatal(err)
			}
			sig = append(rr.FillBytes(make([]byte, 32)), ss.FillBytes(make([]byte, 32))...)
		} else {
			sig, _ = ecdsa.SignASN1(rand.Reader, priv, sum[:])
		}
		r.Header.Set("X-Signature", base64.StdEncoding.EncodeToString(sig))
		return r
	}
	for _, tt := range []struct {
		name string
		r    *http.Request
		ok   bool
	}{
		{"ASN.1", ecRequest(ecPriv, false, body), true},
		{"r||s", ecRequest(ecPriv, true, body), true},
		{"another key", ecRequest(ecOther, false, body), false},
		{"tampered", ecRequest(ecPriv, false, body+" "), false},
	} {
		if err := verify(t, p, tt.r); (err == nil) != tt.ok {
			t.Errorf("ecdsa %s: %v", tt.name, err)
		}
	}
}

// TestSpecHeadChallenge pins the one difference known in what passes the
// signature check: the whatsapp-cloud preset lets a HEAD carrying hub.mode
// through unsigned (its Handshake then declines it and the middleware
// forwards it), while a spec lets through only the requests its unsigned
// handshake matches (GET), and refuses the HEAD.
func TestSpecHeadChallenge(t *testing.T) {
	cfg := provider.Config{Secrets: []string{"meta-app-secret"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt-123"}}
	g := newPreset(t, "whatsapp-cloud", cfg, baseTime)
	s := specPreset(t, loadSpec(t, "whatsapp-cloud"), cfg, baseTime)
	r := httptest.NewRequest(http.MethodHead, "/wa?hub.mode=subscribe&hub.verify_token=vt-123&hub.challenge=1", nil)
	if err := g.Verify(r, nil); err != nil {
		t.Errorf("the preset refuses the HEAD: %v", err)
	}
	if err := s.Verify(r, nil); !errors.Is(err, provider.ErrMissingHeader) {
		t.Errorf("the spec: %v, want missing header", err)
	}
}

// TestSpecKnownKeyDifferences pins the only differences known between a
// spec and its Go preset, all in keys of bodies no provider sends, none in
// what is accepted or refused. The Go presets that decode the body into a
// struct (slack, evolution, zoom) inherit encoding/json's
// case-insensitive field names, its refusal of a number where the struct
// has a string, and its failure of the whole body on one value of the
// wrong type anywhere in what the struct reads; a spec reads JSON as
// written, each value on its own: field names exactly
// (as the map-based presets, stripe, paddle, asaas, ifood and mercadopago,
// and those keyed as their items are, whatsapp-cloud among them, do), and a string or a number wherever it reads an id. Each such body
// then gets the body hash from one side and a key from the other.
func TestSpecKnownKeyDifferences(t *testing.T) {
	for _, c := range []struct {
		preset, body, goKey, specKey string
	}{
		{"slack", `{"EVENT_ID":"x","api_app_id":"A"}`, "A:x", ""},
		{"evolution", `{"Event":"messages.upsert","data":{"key":{"id":"K"}}}`, "messages.upsert:K", ""},
		{"evolution", `{"event":5,"data":{"key":{"id":"K"}}}`, "", "5:K"},
		{"zoom", `{"Event":"e","event_ts":1,"payload":{}}`, "e:1:44136fa355b3678a1146ad16f7e8649e", ""},
		// A spec reads strings and numbers, never true or false: an unsent
		// message (Instagram's is_deleted: true) is keyed by its mid alone,
		// as the message it unsends; and it keys an event without an id
		// by the body hash, where the preset takes the event's canonical
		// hash (the same for the event in any batch).
		{"instagram", `{"entry":[{"messaging":[{"message":{"mid":"m.3","is_deleted":true}}]}]}`, "m.3:deleted=true", "m.3"},
		{"messenger", `{"entry":[{"messaging":[{"sender":{"id":"1"},"read":{"watermark":1}}]}]}`, "sha256:", ""},
	} {
		cfg := provider.Config{Secrets: []string{"x"}}
		g := newPreset(t, c.preset, cfg, baseTime)
		s := specPreset(t, loadSpec(t, c.preset), cfg, baseTime)
		r := post("/", c.body)
		kg, _ := g.Key(r, []byte(c.body))
		ks, _ := s.Key(r, []byte(c.body))
		if strings.HasPrefix(kg, "sha256:") && c.goKey == "sha256:" {
			kg = "sha256:" // an item's canonical hash
		}
		if kg != c.goKey || ks != c.specKey {
			t.Errorf("%s %s: Go key %q, spec key %q; want %q, %q (update the docs of this difference)", c.preset, c.body, kg, ks, c.goKey, c.specKey)
		}
	}
}

// twilioBeyondSpec reports whether a Twilio vector uses what the spec
// does not describe.
func twilioBeyondSpec(v nodeVector) bool {
	return strings.Contains(v.URL, "bodySHA256") || v.Headers["X-Twilio-Webhooks-Signature-Settings"] != ""
}

// TestSpecPartly: where a spec describes a provider partly, what it does
// not describe is refused by the spec (the Go preset accepts it): a
// partial spec fails closed, never open.
func TestSpecPartly(t *testing.T) {
	spec := loadSpec(t, "twilio")
	beyond := 0
	for _, v := range nodeVectors(t, "twilio") {
		if !twilioBeyondSpec(v) {
			continue
		}
		beyond++
		cfg := provider.Config{Secrets: []string{v.Secret}}
		now := time.Unix(v.Now, 0)
		g, s := newPreset(t, "twilio", cfg, now), specPreset(t, spec, cfg, now)
		if err := verify(t, g, v.request(v.Body)); err != nil {
			t.Errorf("%s: the preset refuses it: %v", v.Name, err)
		}
		if err := verify(t, s, v.request(v.Body)); err == nil {
			t.Errorf("%s: the spec accepts what it can't check", v.Name)
		}
	}
	if beyond == 0 {
		t.Fatal("no vector beyond the spec: nothing was checked")
	}
	// The key: a Conversations form (EventType) is the body hash for the
	// preset, the message for the spec.
	const form = "EventType=onMessageAdded&MessageSid=IM1&MessageStatus=sent"
	cfg := provider.Config{Secrets: []string{"x"}}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(form))
	kg, _ := newPreset(t, "twilio", cfg, baseTime).Key(r, []byte(form))
	ks, _ := specPreset(t, spec, cfg, baseTime).Key(r, []byte(form))
	if kg != "" || ks != "IM1:sent" {
		t.Errorf("Conversations form: Go key %q, spec key %q", kg, ks)
	}

	// HubSpot: a URL whose escapes HubSpot decoded before signing (made by
	// @hubspot/api-client) passes the preset and is refused by the spec.
	hub := loadSpec(t, "hubspot")
	escaped := 0
	for _, v := range nodeVectors(t, "hubspot") {
		if v.Forged || !strings.Contains(v.URL, "%") {
			continue
		}
		escaped++
		cfg := provider.Config{Secrets: []string{v.Secret}, HubSpot: provider.HubSpotOptions{PublicURL: "https://hooks.example.com"}}
		now := time.Unix(v.Now, 0)
		if err := verify(t, newPreset(t, "hubspot", cfg, now), v.request(v.Body)); err != nil {
			t.Errorf("hubspot %s: the preset refuses it: %v", v.Name, err)
		}
		if err := verify(t, specPreset(t, hub, cfg, now), v.request(v.Body)); err == nil {
			t.Errorf("hubspot %s: the spec accepts what it can't check", v.Name)
		}
	}
	if escaped == 0 {
		t.Fatal("no hubspot vector with an escaped URL: nothing was checked")
	}
}
