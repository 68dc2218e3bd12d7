package provider_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	if err == nil || !strings.Contains(err.Error(), `"paypal"`) || !strings.Contains(err.Error(), "(known: "+strings.Join(names, ", ")+")") {
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
		{"instagram", provider.Config{Secrets: []string{"s"}, Messenger: provider.MessengerOptions{VerifyToken: "x"}}, `option verify_token: is a setting of messenger, not of instagram; unknown option (known: verify_token)`},
		{"messenger", provider.Config{Secrets: []string{"s"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "x"}}, `option verify_token: is a setting of whatsapp-cloud, not of messenger; unknown option (known: verify_token)`},
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

// retentionRoute is a route with preset name (configured by cfg) and no TTL,
// over a memory store, everything on clk. It counts handler runs.
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

// Every preset's default TTL covers its provider's retry window. An attempt
// at the very end of the window, re-signed as the provider does, is
// replayed. Once the default TTL has passed, the key is free again.
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

// The retention table of docs/providers.md is the presets' own: each row's
// retry window and default TTL equal the preset's.
func TestRetentionTableMatchesThePresets(t *testing.T) {
	rows := presetRows(t, docTable(t, "Retention: each preset covers its provider's retry window"))
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
		if len(row) < 3 {
			t.Errorf("%s: retention row %q has %d cells, want preset, retry window, default TTL, source", f.name, row, len(row))
			continue
		}
		if w, err := parseDays(row[1]); err != nil || w != p.RetryWindow {
			t.Errorf("%s: docs say retry window %s, the preset has %v", f.name, row[1], p.RetryWindow)
		}
		if d, err := parseDays(row[2]); err != nil || d != p.DefaultTTL() {
			t.Errorf("%s: docs say default TTL %s, the preset has %v", f.name, row[2], p.DefaultTTL())
		}
	}
	if len(rows) != len(provider.Names()) {
		t.Errorf("docs/providers.md has %d retention rows, want one per preset (%d)", len(rows), len(provider.Names()))
	}
}

// The response-timeout table of docs/providers.md is the presets' own: each
// preset's row gives its ResponseTimeout ("not documented" for 0),
// and a row for a provider without a preset says so.
func TestResponseTimeoutTableMatchesThePresets(t *testing.T) {
	table := docTable(t, "Response timeouts and what providers do after failures")
	for _, row := range table {
		if !strings.HasPrefix(row[0], "`") && !strings.Contains(row[0], "no preset") {
			t.Errorf("docs/providers.md: row %q names neither a preset (in backquotes) nor a provider marked \"no preset\"", row[0])
		}
	}
	rows := presetRows(t, table)
	for _, name := range provider.Names() {
		row, ok := rows[name]
		if !ok {
			t.Errorf("docs/providers.md: no response-timeout row for %s", name)
			continue
		}
		got, err := parseTimeout(row[1])
		if err != nil {
			t.Errorf("%s: response timeout %q: %v", name, row[1], err)
			continue
		}
		if want := provider.ResponseTimeout(name); got != want {
			t.Errorf("%s: docs say response timeout %q, the preset has %v", name, row[1], want)
		}
	}
	if len(rows) != len(provider.Names()) {
		t.Errorf("docs/providers.md has %d response-timeout rows for presets, want one per preset (%d)", len(rows), len(provider.Names()))
	}
}

// docTable returns the rows of the first table under the "## <heading>"
// section of docs/providers.md (up to the next "## "), each row's cells
// trimmed, without the header and the separator row.
func docTable(t *testing.T, heading string) [][]string {
	t.Helper()
	doc, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/providers.md: no section %q", "## "+heading)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var rows [][]string
	inTable := false
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 3 {
		t.Fatalf("docs/providers.md, section %q: no table with rows", heading)
	}
	return rows[2:]
}

// presetRows indexes the rows whose first cell is a preset name in
// backquotes by that name. A name given twice is an error.
func presetRows(t *testing.T, rows [][]string) map[string][]string {
	t.Helper()
	byName := map[string][]string{}
	for _, row := range rows {
		if !strings.HasPrefix(row[0], "`") {
			continue
		}
		name := strings.Trim(row[0], "`")
		if _, dup := byName[name]; dup {
			t.Errorf("docs/providers.md: two rows for %s in one table", name)
		}
		byName[name] = row
	}
	return byName
}

// parseTimeout parses the response-timeout column: a Go duration ("5s") or
// "not documented" (0).
func parseTimeout(s string) (time.Duration, error) {
	if s == "not documented" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 5s, or \"not documented\"")
	}
	if d <= 0 {
		return 0, fmt.Errorf("want a positive duration, or \"not documented\"")
	}
	return d, nil
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

// SetOption sets a preset's typed option by its configuration name. Errors
// are typed and name the option. Names, New and OptionNames read one
// registry.
func TestSetOptionAndTypedErrors(t *testing.T) {
	var cfg provider.Config
	if err := cfg.SetOption("whatsapp-cloud", "verify_token", "vt"); err != nil || cfg.WhatsAppCloud.VerifyToken != "vt" {
		t.Fatalf("SetOption verify_token: %v, %+v", err, cfg)
	}
	for _, name := range []string{"messenger", "instagram"} {
		var c provider.Config
		if err := c.SetOption(name, "verify_token", "vt-"+name); err != nil || c.Messenger.VerifyToken+c.Instagram.VerifyToken != "vt-"+name || c.WhatsAppCloud.VerifyToken != "" {
			t.Fatalf("SetOption(%s, verify_token): %v, %+v", name, err, c)
		}
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

// TestToleranceWithoutTimestamp: a tolerance set for a provider that signs
// no timestamp would do nothing while the configuration suggests replays
// are bounded. Like an unknown option, it is an error that says so. The
// providers that sign one accept it.
func TestToleranceWithoutTimestamp(t *testing.T) {
	for _, name := range []string{"adyen", "asaas", "evolution", "github", "ifood", "instagram", "messenger", "shopify", "whatsapp-cloud"} {
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

// End to end through the real middleware and the memory store: for every
// preset, the deliveries a provider really sends.

// server is a webhook endpoint behind the middleware, counting handler runs.
type server struct {
	srv  *httptest.Server
	runs atomic.Int64

	mu       sync.Mutex
	outcomes []idemhook.Outcome
}

// newServer serves handler status 201 and body "handled <n>" on a route of
// source with preset p (nil: none) and header (""": none).
func newServer(t *testing.T, source, header string, p *idemhook.Preset) *server {
	t.Helper()
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := &server{}
	m, err := idemhook.New(st, idemhook.Options{OnDelivery: func(d idemhook.DeliveryInfo) {
		s.mu.Lock()
		s.outcomes = append(s.outcomes, d.Outcome)
		s.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := m.Route(idemhook.Route{Source: source, Header: header, Preset: p})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "handled %d", n)
	})))
	t.Cleanup(s.srv.Close)
	return s
}

// response is what the provider saw.
type response struct {
	status      int
	body        string
	replayed    bool
	contentType string
}

// send delivers r (built with httptest.NewRequest) to the server.
func (s *server) send(t *testing.T, r *http.Request) response {
	t.Helper()
	body, _ := io.ReadAll(r.Body)
	req, err := http.NewRequest(r.Method, s.srv.URL+r.URL.RequestURI(), strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.Header.Clone()
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{
		status:      resp.StatusCode,
		body:        string(b),
		replayed:    resp.Header.Get(idemhook.ReplayedHeader) == "true",
		contentType: resp.Header.Get("Content-Type"),
	}
}

func (s *server) lastOutcome() idemhook.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.outcomes) == 0 {
		return ""
	}
	return s.outcomes[len(s.outcomes)-1]
}

// TestEndToEnd runs every preset through idemhook.New(memstore) and a Route
// with the preset. A first delivery runs the handler once. The provider's
// retry is replayed with the preset's duplicate status. Another event runs
// it again. A bad or stale signature is refused 401 without claiming
// anything, so the valid delivery of that event is then processed first
// time.
func TestEndToEnd(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			s := newServer(t, f.name, "", newPreset(t, f.name, f.cfg, baseTime))
			first := baseTime.Add(-4 * time.Minute)

			expect := func(step string, got response, status int, replayed bool, runs int64, outcome idemhook.Outcome) {
				t.Helper()
				if got.status != status || got.replayed != replayed || s.runs.Load() != runs || s.lastOutcome() != outcome {
					t.Fatalf("%s: status %d replayed %v runs %d outcome %s (body %q); want %d %v %d %s",
						step, got.status, got.replayed, s.runs.Load(), s.lastOutcome(), got.body, status, replayed, runs, outcome)
				}
			}

			got := s.send(t, f.build(t, "1", first, f.secret()))
			expect("first delivery", got, 201, false, 1, idemhook.OutcomeProcessed)
			if got.body != "handled 1" {
				t.Fatalf("first delivery body %q", got.body)
			}

			// The provider's retry carries the same event. It is re-signed
			// with a new timestamp where the scheme signs one (Stone
			// re-encrypts).
			dup := f.dupStatus
			if dup == 0 {
				dup = 201
			}
			got = s.send(t, f.build(t, "1", baseTime, f.secret()))
			expect("retry", got, dup, true, 1, idemhook.OutcomeReplayed)
			if got.body != "handled 1" {
				t.Fatalf("replayed body %q, want the first response's", got.body)
			}

			got = s.send(t, f.build(t, "2", baseTime, f.secret()))
			expect("another event", got, 201, false, 2, idemhook.OutcomeProcessed)

			// A forged delivery of event 3 claims nothing...
			got = s.send(t, f.build(t, "3", baseTime, f.wrongSecret))
			expect("bad signature", got, 401, false, 2, idemhook.OutcomeSignatureInvalid)
			checkProblem(t, got, f.name)
			// ...so the real one is processed first time.
			got = s.send(t, f.build(t, "3", baseTime, f.secret()))
			expect("event 3 after a forgery", got, 201, false, 3, idemhook.OutcomeProcessed)

			if f.timestamped {
				got = s.send(t, f.build(t, "4", baseTime.Add(-6*time.Minute), f.secret()))
				expect("stale signature", got, 401, false, 3, idemhook.OutcomeSignatureInvalid)
				checkProblem(t, got, f.name)
				got = s.send(t, f.build(t, "4", baseTime, f.secret()))
				expect("event 4 after a stale copy", got, 201, false, 4, idemhook.OutcomeProcessed)
			}
		})
	}
}

func checkProblem(t *testing.T, got response, preset string) {
	t.Helper()
	if got.contentType != "application/problem+json" {
		t.Fatalf("401 Content-Type %q, want application/problem+json", got.contentType)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(got.body), &p); err != nil || p.Status != 401 || !strings.HasPrefix(p.Detail, preset+": ") {
		t.Fatalf("problem body %q (%v), want status 401 and a detail naming %s", got.body, err, preset)
	}
}

// TestEndToEndHandshakes: Meta's GET challenge and Slack's url_verification
// are answered by the preset and never reach the handler.
func TestEndToEndHandshakes(t *testing.T) {
	wa := newServer(t, "whatsapp", "", newPreset(t, "whatsapp-cloud",
		provider.Config{Secrets: []string{"app-secret"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt"}}, baseTime))
	got := wa.send(t, httptest.NewRequest(http.MethodGet, "/wa?hub.mode=subscribe&hub.verify_token=vt&hub.challenge=98765", nil))
	if got.status != 200 || got.body != "98765" || wa.runs.Load() != 0 {
		t.Fatalf("challenge: %d %q runs %d", got.status, got.body, wa.runs.Load())
	}
	got = wa.send(t, httptest.NewRequest(http.MethodGet, "/wa?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=98765", nil))
	if got.status != 403 || wa.runs.Load() != 0 {
		t.Fatalf("wrong verify token: %d %q runs %d", got.status, got.body, wa.runs.Load())
	}

	sl := newServer(t, "slack", "", newPreset(t, "slack", provider.Config{Secrets: []string{"sec"}}, baseTime))
	body := `{"token":"t","challenge":"c-42","type":"url_verification"}`
	r := post("/slack", body)
	r.Header.Set("X-Slack-Request-Timestamp", unix(baseTime))
	r.Header.Set("X-Slack-Signature", "v0="+hmacHex("sec", "v0:"+unix(baseTime)+":"+body))
	if got := sl.send(t, r); got.status != 200 || got.body != "c-42" || sl.runs.Load() != 0 {
		t.Fatalf("url_verification: %d %q runs %d", got.status, got.body, sl.runs.Load())
	}
	r = post("/slack", body)
	r.Header.Set("X-Slack-Request-Timestamp", unix(baseTime))
	r.Header.Set("X-Slack-Signature", "v0="+hmacHex("other", "v0:"+unix(baseTime)+":"+body))
	if got := sl.send(t, r); got.status != 401 || sl.runs.Load() != 0 {
		t.Fatalf("unsigned url_verification: %d %q runs %d", got.status, got.body, sl.runs.Load())
	}
}
