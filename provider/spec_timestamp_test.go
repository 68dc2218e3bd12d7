package provider_test

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/provider"
)

// TestSpecTimestampFromSignedBody: a timestamp read from a body that is
// signed is signed (Linear signs the raw body, and asks receivers to check
// its webhookTimestamp, in milliseconds).
func TestSpecTimestampFromSignedBody(t *testing.T) {
	spec, err := config.ParseProviderSpec("linear.yaml", []byte(`
name: linear
signature:
  algorithm: hmac-sha256
  header: Linear-Signature
  signed: "{body}"
  timestamp: {json: webhookTimestamp, format: unix_ms, tolerance: 1m}
key: "{header:Linear-Delivery}"
`), specEnv)
	if err != nil {
		t.Fatal(err)
	}
	p := specPreset(t, spec, provider.Config{Secrets: []string{"lin_wh_s3cret"}}, baseTime)
	body := func(at time.Time) string {
		return fmt.Sprintf(`{"action":"create","type":"Issue","data":{"id":"i-1"},"webhookTimestamp":%d}`, at.UnixMilli())
	}
	for _, tt := range []struct {
		name string
		body string
		sig  string // what is signed; "": the body
		want error
	}{
		{"fresh", body(baseTime.Add(-30 * time.Second)), "", nil},
		{"stale, signed", body(baseTime.Add(-2 * time.Minute)), "", provider.ErrTimestampOutOfTolerance},
		{"stale, its timestamp made fresh", body(baseTime), body(baseTime.Add(-2 * time.Minute)), provider.ErrNoMatchingSignature},
		{"no timestamp", `{"action":"create"}`, "", provider.ErrMalformedBody},
	} {
		r := post("/", tt.body)
		r.Header.Set("Linear-Signature", hmacHex("lin_wh_s3cret", cmp.Or(tt.sig, tt.body)))
		r.Header.Set("Linear-Delivery", "d-1")
		if err := verify(t, p, r); !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestSpecTimestampMustBeSigned: whether the checked timestamp is signed
// is decided on what is signed in every request: an optional part, left
// out when another of its placeholders is empty, does not count, nor a
// timestamp cut by |first:N, nor a body that does not hold it.
func TestSpecTimestampMustBeSigned(t *testing.T) {
	cfg := provider.Config{Secrets: []string{"s"}}
	for _, tt := range []struct {
		signed, ts string // ts: the timestamp mapping
		refused    string // a part of the error; "": accepted
	}{
		{"{body}[{timestamp}{header:X-Never-Sent}]", "{header: X-Ts}", "only in an optional part"},
		{"[{timestamp}.]{body}", "{header: X-Ts}", "only in an optional part"},
		{"{timestamp|first:4}.{body}", "{header: X-Ts}", "does not sign the timestamp"},
		{"{body}", "{header: X-Ts}", "does not sign the timestamp ({timestamp} or {header:X-Ts})"},
		{"{header:x-ts}.{body}", "{header: X-Ts}", ""},
		{"{timestamp}.{body}[.{header:X-Never-Sent}]", "{header: X-Ts}", ""},
		{"{body}", "{json: sent_at}", ""},
		{"{json:sent_at}.{json:id}", "{json: sent_at}", ""},
		{"{json:id}", "{json: sent_at}", "{body} or {json:sent_at}"},
		{"[{body}{header:X-Never-Sent}]", "{json: sent_at}", "only in an optional part"},
	} {
		spec, err := config.ParseProviderSpec("t.yaml", []byte(fmt.Sprintf(`
signature:
  algorithm: hmac-sha256
  header: X-Sig
  signed: %q
  timestamp: %s
`, tt.signed, tt.ts)), specEnv)
		if err != nil {
			t.Fatal(err)
		}
		_, err = spec.Preset(cfg)
		var se *provider.SpecError
		switch {
		case tt.refused == "" && err != nil:
			t.Errorf("%s with %s: %v", tt.signed, tt.ts, err)
		case tt.refused != "" && (!errors.As(err, &se) || se.Field != "signature.signed" || !strings.Contains(se.Reason, tt.refused)):
			t.Errorf("%s with %s: %v, want signature.signed: ...%s...", tt.signed, tt.ts, err, tt.refused)
		}
	}
}
