package provider_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/idemhook/idemhook/provider"
)

// TestSpecEveryProblem: Spec.Preset reports every problem of a spec at
// once, in the order of the fields, each at its field: one section's
// problem hides none of another's, nor one template's another's.
func TestSpecEveryProblem(t *testing.T) {
	spec := provider.Spec{
		Signature: provider.Signature{Algorithm: "hmac-sha521", Header: "X-Sig", Encoding: "base46",
			Signed: "{timestamp}.{bdy}", Timestamp: provider.Timestamp{Header: "X-Ts"}, SecretEncoding: "hx"},
		Key:        provider.KeySpec{Templates: []string{"{jsn:id}", "{header:X-Id}", "{json:a[*]}"}},
		Handshakes: []provider.Handshake{{Match: provider.Match{Method: "get"}, Answer: provider.Answer{Body: "{query:}", Status: 999}}},
	}
	_, err := spec.Preset(provider.Config{Secrets: []string{"s"}})
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Preset: %v, want several problems", err)
	}
	var got []string
	for _, e := range j.Unwrap() {
		var se *provider.SpecError
		if !errors.As(e, &se) {
			t.Fatalf("not a *SpecError: %v", e)
		}
		got = append(got, se.Field+": "+se.Reason)
	}
	want := []string{
		`signature.algorithm: unknown algorithm "hmac-sha521": did you mean "hmac-sha512"?`,
		`signature.encoding: unknown encoding "base46": did you mean "base64"?`,
		`signature.signed: unknown placeholder {bdy} here: did you mean "body"?`,
		`signature.secret_encoding: unknown encoding "hx": did you mean "hex"?`,
		`key.templates[0]: unknown placeholder {jsn:id} here: did you mean "json"?`,
		`key.templates[2]: {json:a[*]}: [*] selects several values`,
		`handshakes[0].match.method: "get" is not a method`,
		`handshakes[0].answer.body: {query:}: name the query`,
		`handshakes[0].answer.status: 999 is not an HTTP status`,
	}
	if len(got) != len(want) || !slices.EqualFunc(got, want, strings.HasPrefix) {
		t.Errorf("problems:\n%s\nwant (each a prefix):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSpecEveryFormatProblem: the signature's format reports each of its
// settings' problems, not the first: pairs settings on a value format, and
// a pairs format with several mistakes.
func TestSpecEveryFormatProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  provider.Signature
		want []string
	}{
		{"value with pairs settings", provider.Signature{Algorithm: "hmac-sha256", Header: "X-Sig", Signed: "{body}", Separator: ";", Assign: ":", TrimSpaces: true}, []string{
			"signature.separator: is a setting of format: pairs",
			"signature.assign: is a setting of format: pairs",
			"signature.trim_spaces: is a setting of format: pairs",
		}},
		{"pairs with several mistakes", provider.Signature{Algorithm: "hmac-sha256", Header: "X-Sig", Format: "pairs", Prefix: "v1=", Separator: "=", Signed: "{timestamp}.{body}",
			TimestampKey: "t", Timestamp: provider.Timestamp{Header: "X-Ts"}}, []string{
			"signature.prefix: has no effect with format: pairs",
			"signature.signature_key: missing",
			`signature.assign: is the separator "=" too`,
			"signature.timestamp.header: the timestamp is read from the pairs",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := provider.Spec{Signature: tc.sig, Key: provider.KeySpec{Templates: []string{"{header:X-Id}"}}}
			_, err := spec.Preset(provider.Config{Secrets: []string{"s"}})
			var got []string
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					var se *provider.SpecError
					if errors.As(e, &se) {
						got = append(got, se.Field+": "+se.Reason)
					}
				}
			} else if err != nil {
				got = append(got, err.Error())
			}
			if len(got) != len(tc.want) || !slices.EqualFunc(got, tc.want, strings.HasPrefix) {
				t.Errorf("problems:\n%s\nwant (each a prefix):\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
