package provider_test

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// TestTwilioNodeVectors: the requests Twilio's own SDK signed (and
// validated) pass the preset twice over real HTTP: received directly over
// TLS at the URL Twilio called, and behind a proxy at another address with
// the public_url option. Without the option the proxied copy fails, even
// with X-Forwarded-Proto and -Host saying the right thing: the preset never
// reads them. A forged vector, a changed body or query fail.
func TestTwilioNodeVectors(t *testing.T) {
	for _, v := range nodeVectors(t, "twilio") {
		t.Run(v.Name, func(t *testing.T) {
			p, ok := checkNodeVector(t, "twilio", v)
			if !ok {
				return // a forged vector, refused
			}
			altered := v
			if v.Method == http.MethodGet {
				altered.URL += "&Digits=1"
			} else {
				altered.Body += " "
			}
			if err := verify(t, p, altered.request(altered.Body)); !errors.Is(err, provider.ErrNoMatchingSignature) {
				t.Fatalf("altered request: Verify = %v", err)
			}

			behind := newServer(t, "twilio", "", newPreset(t, "twilio", provider.Config{Secrets: []string{v.Secret},
				Twilio: provider.TwilioOptions{PublicURL: "https://hooks.example.com/"}}, time.Unix(v.Now, 0)))
			if got := behind.send(t, v.request(v.Body)); got.status != 201 || behind.runs.Load() != 1 {
				t.Fatalf("behind a proxy with public_url: %d %q", got.status, got.body)
			}
			plain := newServer(t, "twilio", "", newPreset(t, "twilio", provider.Config{Secrets: []string{v.Secret}}, time.Unix(v.Now, 0)))
			r := v.request(v.Body)
			r.Header.Set("X-Forwarded-Proto", "https")
			r.Header.Set("X-Forwarded-Host", "hooks.example.com")
			if got := plain.send(t, r); got.status != 401 || plain.runs.Load() != 0 {
				t.Fatalf("behind a proxy without public_url: %d %q, want 401", got.status, got.body)
			}
		})
	}
}

func TestTwilio(t *testing.T) {
	const token = "tok"
	p := newPreset(t, "twilio", provider.Config{Secrets: []string{token}, Twilio: provider.TwilioOptions{PublicURL: "https://hooks.example.com"}}, baseTime)
	direct := newPreset(t, "twilio", provider.Config{Secrets: []string{token}}, baseTime) // no public_url: the request's own URL
	form := map[string]string{"MessageSid": "SM1", "MessageStatus": "sent"}
	tests := []struct {
		name string
		give func() *http.Request
		want error
	}{
		{"signed", func() *http.Request { return twilioRequest("https://hooks.example.com", "/t", token, form) }, nil},
		{"signed for another path", func() *http.Request {
			r := twilioRequest("https://hooks.example.com", "/t", token, form)
			r.URL.Path = "/u"
			return r
		}, provider.ErrNoMatchingSignature},
		{"signed for another host", func() *http.Request { return twilioRequest("https://other.example.com", "/t", token, form) }, provider.ErrNoMatchingSignature},
		{"signed for http", func() *http.Request { return twilioRequest("http://hooks.example.com", "/t", token, form) }, provider.ErrNoMatchingSignature},
		{"signed with the default port", func() *http.Request { return twilioRequest("https://hooks.example.com:443", "/t", token, form) }, nil},
		{"signed with another port", func() *http.Request { return twilioRequest("https://hooks.example.com:8443", "/t", token, form) }, provider.ErrNoMatchingSignature},
		{"an IPv6 host signed without its port", func() *http.Request {
			r := twilioRequest("https://[2001:db8::1]", "/t", token, form)
			r.Host, r.TLS = "[2001:db8::1]:443", &tls.ConnectionState{}
			return r
		}, nil},
		{"an unknown algorithm", func() *http.Request {
			r := twilioRequest("https://hooks.example.com", "/t", token, form)
			r.Header.Set("X-Twilio-Webhooks-Signature-Settings", "key=k,algorithm=HMAC_MD5")
			return r
		}, provider.ErrMalformedHeader},
		{"SHA-1 MAC announced as SHA-256", func() *http.Request {
			r := twilioRequest("https://hooks.example.com", "/t", token, form)
			r.Header.Set("X-Twilio-Webhooks-Signature-Settings", "algorithm=HMAC_SHA256")
			return r
		}, provider.ErrMalformedHeader},
		{"a body that is not a form", func() *http.Request {
			r := twilioRequest("https://hooks.example.com", "/t", token, form)
			r.Body = http.NoBody
			r2 := httptest.NewRequest(http.MethodPost, "/t", strings.NewReader("a=%zz"))
			r2.Header = r.Header
			return r2
		}, provider.ErrMalformedBody},
		{"JSON without bodySHA256", func() *http.Request {
			r := twilioRequest("https://hooks.example.com", "/t", token, nil) // signs the URL alone
			r2 := httptest.NewRequest(http.MethodPost, "/t", strings.NewReader(`{"id":"EZ1"}`))
			r2.Header = r.Header
			return r2
		}, provider.ErrNoMatchingSignature},
		{"JSON whose bodySHA256 is another body's", func() *http.Request {
			r := twilioRequest("https://hooks.example.com", "/t?bodySHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", token, nil)
			r2 := httptest.NewRequest(http.MethodPost, r.URL.RequestURI(), strings.NewReader(`{"id":"EZ1"}`))
			r2.Header = r.Header
			return r2
		}, provider.ErrNoMatchingSignature},
		{"no signature", func() *http.Request {
			r := twilioRequest("https://hooks.example.com", "/t", token, form)
			r.Header.Del("X-Twilio-Signature")
			return r
		}, provider.ErrMissingHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pp := p
			if strings.HasPrefix(tt.name, "an IPv6 host") {
				pp = direct
			}
			if err := verify(t, pp, tt.give()); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}

	keys := []struct{ body, want string }{
		{"MessageSid=SM1&SmsStatus=received", "SM1:received"},
		{"MessageSid=SM1&SmsStatus=sent&MessageStatus=delivered", "SM1:delivered"},
		{"MessageSid=SM1", ""},                                                // no status: the body hash
		{"CallSid=CA1&CallStatus=in-progress&Digits=1", ""},                   // voice: successive <Gather>s share CallSid and CallStatus
		{"EventType=onMessageUpdated&MessageSid=IM1&ConversationSid=CH1", ""}, // Conversations
	}
	for _, tt := range keys {
		r := httptest.NewRequest(http.MethodPost, "/t", strings.NewReader(tt.body))
		if got, _ := p.Key(r, []byte(tt.body)); got != tt.want {
			t.Errorf("Key(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
	for _, tt := range []struct{ body, want string }{
		{`{"specversion":"1.0","id":"EZ1"}`, "EZ1"},
		{`[{"specversion":"1.0","id":"EZ1"},{"specversion":"1.0","id":"EZ2"}]`, ""}, // a batch: the body hash
		{`{"id":"EZ1"}`, ""}, // not a CloudEvent
	} {
		r := httptest.NewRequest(http.MethodPost, "/t?bodySHA256=00", strings.NewReader(tt.body))
		if got, _ := p.Key(r, []byte(tt.body)); got != tt.want {
			t.Errorf("Key(%s) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

func TestTwilioPublicURLOption(t *testing.T) {
	for _, give := range []string{"hooks.example.com", "ftp://hooks.example.com", "https://", "https://hooks.example.com/?a=1", "https://u:p@hooks.example.com", "https://hooks.example.com/#f", "%"} {
		_, err := provider.New("twilio", provider.Config{Secrets: []string{"t"}, Twilio: provider.TwilioOptions{PublicURL: give}})
		var oe *provider.OptionError
		if !errors.As(err, &oe) || oe.Option != "public_url" {
			t.Errorf("public_url %q: %v, want an OptionError for public_url", give, err)
		}
	}
	var cfg provider.Config
	if err := cfg.SetOption("twilio", "public_url", "https://hooks.example.com/base"); err != nil || cfg.Twilio.PublicURL != "https://hooks.example.com/base" {
		t.Fatalf("SetOption: %v %+v", err, cfg.Twilio)
	}
	// A path prefix the front proxy strips is part of what Twilio signed.
	p := newPreset(t, "twilio", provider.Config{Secrets: []string{"t"}, Twilio: cfg.Twilio}, baseTime)
	if err := verify(t, p, twilioRequest("https://hooks.example.com/base", "/sms", "t", map[string]string{"A": "1"})); err != nil {
		t.Fatal(err)
	}
}
