package provider_test

import (
	"bytes"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
)

// FuzzSpecMatchesPreset: on requests made from a fixture's valid delivery
// with a fuzzed signature header, body or other header, each spec and its
// Go preset verify alike, and give the same key for any request, verified
// or not; except the keys of fuzzed bodies for the presets that decode
// the body into a Go struct, which differ on bodies no provider sends
// (TestSpecKnownKeyDifferences), and twilio's for a form with an
// EventType (TestSpecPartly).
func FuzzSpecMatchesPreset(f *testing.F) {
	type pair struct {
		fx        fixture
		goP, spec *idemhook.Preset
		other     []string // the fixture's other headers, sorted
	}
	var pairs []pair
	for _, fx := range fixtures(f) {
		if _, ok := notExpressible[fx.name]; ok {
			continue
		}
		probe := fx.build(f, "1", baseTime, fx.secret())
		var other []string
		for h := range probe.Header {
			if h != "Content-Type" {
				other = append(other, h)
			}
		}
		slices.Sort(other)
		pairs = append(pairs, pair{fx, newPreset(f, fx.name, fx.cfg, baseTime), specPreset(f, loadSpec(f, fx.name), fx.cfg, baseTime), other})
	}
	for i, p := range pairs {
		r := p.fx.build(f, "1", baseTime, p.fx.secret())
		f.Add(uint8(i), uint8(0), r.Header.Get(p.fx.sigHeader), readBody(f, r))
		f.Add(uint8(i), uint8(1), p.fx.malformed, []byte(nil))
		f.Add(uint8(i), uint8(2), "", readBody(f, p.fx.build(f, "2", baseTime, p.fx.secret())))
		f.Add(uint8(i), uint8(4), " x ", []byte(`{"id":1,"event_id":"e","entry":[{"changes":[{"value":{"statuses":[{"id":"w","status":1}]}}]}]}`))
	}
	f.Fuzz(func(t *testing.T, which, mode uint8, value string, body []byte) {
		p := pairs[int(which)%len(pairs)]
		r := p.fx.build(t, "1", baseTime.Add(-10*time.Second), p.fx.secret())
		b := readBody(t, r)
		if mode&2 != 0 {
			b = body
		}
		r2 := httptest.NewRequest(r.Method, r.URL.String(), bytes.NewReader(b))
		r2.Header = r.Header.Clone()
		if mode&1 != 0 && p.fx.sigHeader != "" {
			r2.Header.Set(p.fx.sigHeader, value)
		}
		if mode&4 != 0 && len(p.other) > 0 {
			r2.Header.Set(p.other[int(mode>>3)%len(p.other)], value)
		}
		if !validFieldValue(value) {
			return // not a header a server would receive
		}
		if d := diff(t, p.goP, p.spec, r2); d != "" {
			t.Fatalf("%s: %s", p.fx.name, d)
		}
		if mode&2 != 0 && structKeyed[p.fx.name] {
			return
		}
		kg, _ := p.goP.Key(r2, b)
		ks, _ := p.spec.Key(r2, b)
		if kg != ks {
			t.Fatalf("%s: key %q from the Go preset, %q from the spec (body %q)", p.fx.name, kg, ks, b)
		}
	})
}

// structKeyed are the presets whose Key decodes the body into a struct,
// and twilio.
var structKeyed = map[string]bool{"slack": true, "evolution": true, "whatsapp-cloud": true, "zoom": true, "mailgun": true, "twilio": true}

// validFieldValue reports whether v can be a header value as a server
// reads it: no control characters but tab, no spaces around it.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return len(v) == 0 || (v[0] != ' ' && v[0] != '\t' && v[len(v)-1] != ' ' && v[len(v)-1] != '\t')
}

// BenchmarkSpecAgainstPreset: Verify and Key of a spec beside its Go
// preset, on each fixture's valid delivery.
func BenchmarkSpecAgainstPreset(b *testing.B) {
	for _, fx := range fixtures(b) {
		if _, ok := notExpressible[fx.name]; ok {
			continue
		}
		r := fx.build(b, "1", baseTime, fx.secret())
		body := readBody(b, r)
		for _, side := range []struct {
			name string
			p    *idemhook.Preset
		}{
			{"go", newPreset(b, fx.name, fx.cfg, baseTime)},
			{"spec", specPreset(b, loadSpec(b, fx.name), fx.cfg, baseTime)},
		} {
			b.Run(fx.name+"/"+side.name, func(b *testing.B) {
				for b.Loop() {
					if err := side.p.Verify(r, body); err != nil {
						b.Fatal(err)
					}
					if k, _ := side.p.Key(r, body); k == "" {
						b.Fatal("no key")
					}
				}
			})
		}
	}
}
