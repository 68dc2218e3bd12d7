package provider_test

import (
	"errors"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/provider"
	"go.yaml.in/yaml/v3"
)

// docsWithoutPreset are the examples of docs/providers.md's "Providers
// without a preset, in YAML", by heading, and their vectors in
// testdata/provider-vectors.json.
var docsWithoutPreset = map[string]string{
	"Linear":               "linear",
	"Discord interactions": "discord",
	"Razorpay":             "razorpay",
	"Sanity":               "sanity",
}

// TestDocsProvidersWithoutPreset: each YAML example of docs/providers.md
// for a provider without a preset is a route the gateway accepts as
// pasted, and its provider: spec accepts the provider's requests made by
// its SDK (vectors.js) with the provider's event id as the key, answers
// its handshake as the SDK's vector says, and refuses the forged ones.
func TestDocsProvidersWithoutPreset(t *testing.T) {
	data, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Providers without a preset, in YAML\n")
	if !ok {
		t.Fatal(`docs/providers.md has no "## Providers without a preset, in YAML" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	examples := regexp.MustCompile("(?s)\n### ([^\n]+)\n.*?```yaml\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(examples) != len(docsWithoutPreset) {
		t.Fatalf("%d examples, want %d (%v)", len(examples), len(docsWithoutPreset), docsWithoutPreset)
	}
	for _, ex := range examples {
		heading, block := ex[1], ex[2]
		name := docsWithoutPreset[heading]
		if name == "" {
			t.Errorf("example %q has no vectors: list it in docsWithoutPreset", heading)
			continue
		}
		t.Run(name, func(t *testing.T) {
			vectors := nodeVectors(t, name)
			// As pasted: the gateway accepts the route.
			env := regexp.MustCompile(`secret_env: (\w+)`).FindStringSubmatch(block)
			if env == nil {
				t.Fatal("the example names no secret_env")
			}
			if _, err := config.Parse("providers.md", []byte(block), func(k string) string {
				return map[string]string{env[1]: vectors[0].Secret}[k]
			}); err != nil {
				t.Fatalf("the example as pasted: %v", err)
			}
			spec := exampleSpec(t, block)
			for _, v := range vectors {
				p := specPreset(t, spec, provider.Config{Secrets: []string{v.Secret}}, time.Unix(v.Now, 0))
				err := verify(t, p, v.request(v.Body))
				if v.Forged {
					if !errors.Is(err, provider.ErrNoMatchingSignature) {
						t.Errorf("%s (forged): Verify = %v", v.Name, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: Verify: %v", v.Name, err)
					continue
				}
				if v.Answer != "" {
					w := httptest.NewRecorder()
					if p.Handshake == nil || !p.Handshake(w, v.request(v.Body), []byte(v.Body)) {
						t.Errorf("%s: not answered as a handshake", v.Name)
					} else if w.Body.String() != v.Answer {
						t.Errorf("%s: answered %s, want %s", v.Name, w.Body.String(), v.Answer)
					}
					continue
				}
				if k, _ := p.Key(v.request(v.Body), []byte(v.Body)); k != v.Key {
					t.Errorf("%s: key %q, want %q", v.Name, k, v.Key)
				}
				// Six minutes late is refused where the provider signs a time
				// and the spec checks its age.
				late := specPreset(t, spec, provider.Config{Secrets: []string{v.Secret}}, time.Unix(v.Now, 0).Add(6*time.Minute))
				checksAge := spec.Signature.Timestamp != (provider.Timestamp{}) && spec.Signature.Timestamp.Tolerance != provider.NoTolerance
				if err := verify(t, late, v.request(v.Body)); checksAge != errors.Is(err, provider.ErrTimestampOutOfTolerance) {
					t.Errorf("%s, 6 minutes later: %v (the spec checks its age: %v)", v.Name, err, checksAge)
				}
			}
		})
	}
}

// exampleSpec returns the provider: spec of the first route of block, a
// gateway configuration, read as the gateway reads it.
func exampleSpec(t *testing.T, block string) provider.Spec {
	t.Helper()
	var file struct {
		Routes []struct {
			Provider yaml.Node `yaml:"provider"`
		} `yaml:"routes"`
	}
	if err := yaml.Unmarshal([]byte(block), &file); err != nil || len(file.Routes) == 0 {
		t.Fatalf("the example: %v", err)
	}
	text, err := yaml.Marshal(&file.Routes[0].Provider)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := config.ParseProviderSpec("providers.md", text, specEnv)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
