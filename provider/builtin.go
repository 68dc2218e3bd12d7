package provider

import (
	"fmt"

	"github.com/idemhook/idemhook"
)

// builtin is a preset written as a [Spec]: the same data a route's
// provider: mapping gives the gateway, built by the same code
// ([Spec.Preset]'s), so that a preset and a provider described in YAML are
// the same thing by construction. Nine presets are one (stripe.go,
// github.go, ...). Those that are not keep Go code, each for a reason its
// file gives: a scheme a spec can't describe (adyen, stone, sendgrid,
// twilio, hubspot) or a behaviour a spec does not have (the presets whose
// keys decode the body into a Go struct; Meta's).
//
// Besides the spec, a builtin keeps the words the preset used before it
// was a spec, so that no error a user sees changes.
type builtin struct {
	spec Spec
	// malformed is the detail of the error for a malformed signature
	// header (e.g. `want "t=<unix seconds>,v1=<hex>"`).
	malformed string
	// secrets, when set, checks the secrets first and refuses them in the
	// preset's own words.
	secrets func(s settings) error
}

// build is the preset's constructor (Stripe, GitHub, ...): cfg checked as
// for any registered preset (its options, its tolerance), then the spec
// compiled with it.
func (b builtin) build(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check(b.spec.Name)
	if err != nil {
		return nil, err
	}
	if b.secrets != nil {
		if err := b.secrets(s); err != nil {
			return nil, err
		}
	}
	c, err := b.spec.compile(cfg)
	if err != nil {
		return nil, err
	}
	c.malformed = b.malformed
	return c.preset(), nil
}

// builtins returns the presets written as specs.
func builtins() []builtin {
	return []builtin{asaasPreset, githubPreset, ifoodPreset, mercadoPagoPreset, paddlePreset,
		shopifyPreset, standardWebhooksPreset, stripePreset, svixPreset}
}

// init compiles every builtin's spec once, so that a spec that can't be
// used stops the program when it starts (and every test) rather than when
// a route names its preset.
func init() {
	for _, b := range builtins() {
		if _, err := b.spec.compile(Config{Secrets: []string{checkSecret}}); err != nil {
			panic(fmt.Sprintf("provider: the spec of the %s preset does not compile: %v", b.spec.Name, err))
		}
	}
}

// checkSecret is the secret init compiles the specs with: "x" in base64,
// so that it is a secret for every encoding the builtins use (raw, and
// base64 for the whsec_ ones).
const checkSecret = "eA=="
