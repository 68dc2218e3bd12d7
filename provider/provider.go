// Package provider has ready-made [idemhook.Preset] values for common webhook
// providers: for each one a key that stays the same across the provider's
// retries and differs between events, the provider's signature check (run
// before anything is claimed, so that a forged request cannot claim a real
// event's key), and the status the provider expects when a duplicate is
// answered.
//
// Every preset is built only from the exported fields of [idemhook.Preset]
// (Name, Verify, Handshake, Key, DuplicateStatus), so a custom preset is
// written the same way (see Example_customPreset).
//
// Keys are the key part only: the middleware stores them under
// "idem:<source>:<key>" after [idemhook.NormalizeKey]. An empty key means
// "fall back to the body hash".
//
// Verify errors are [*VerifyError] values that wrap one of the Err* sentinels
// below; their text names the header and the reason (missing, malformed,
// timestamp outside tolerance, no matching signature) and never contains a
// secret or an expected MAC.
//
// The package imports only the standard library and package idemhook.
package provider

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// Config configures a preset. The gateway fills it from a route's YAML
// (secret_env, the list of rotated secrets, tolerance and provider options).
type Config struct {
	// Secrets are the signing secrets or tokens. Several are accepted during a
	// rotation: a request passes if it matches any of them. Empty strings are
	// ignored. Required: at least one non-empty secret.
	Secrets []string

	// Tolerance is how far a signed timestamp may be from Now, in either
	// direction, for providers whose scheme signs one (stripe, standardwebhooks,
	// svix, slack, paddle; mercadopago and stone only when set). Default (0):
	// the provider's default, 5 minutes for all of them; see each constructor.
	// Set for a provider that signs no timestamp (asaas, evolution, github,
	// ifood, shopify, whatsapp-cloud), it is an error.
	Tolerance time.Duration

	// Options are provider-specific settings, e.g. "verify_token" for
	// whatsapp-cloud or "header" for evolution. An option the provider does
	// not know is an error. Default: none.
	Options map[string]string

	// Now is the clock used for timestamp tolerance. Default: time.Now.
	Now func() time.Time
}

// Retry windows: how long after the first attempt each provider may still
// deliver an event again, from its documentation (docs/providers.md has the
// table with the sources). A route with the preset keeps its answers for the
// window plus a day unless it sets a TTL ([idemhook.Preset.DefaultTTL]).
const (
	day = 24 * time.Hour

	// 15 attempts over about 17 hours, then the queue pauses; events are
	// kept 14 days and are resent when the queue is re-enabled.
	asaasRetryWindow = 14 * day
	// 10 attempts, 5s doubling up to 300s, 20% jitter: about 20 minutes.
	evolutionRetryWindow = 25 * time.Minute
	// No automatic retry; deliveries of the past 3 days can be redelivered
	// by hand or through the REST API (7 days on GitHub Enterprise Server).
	githubRetryWindow = 3 * day
	// Retries for up to 15 minutes, then the event is discarded.
	ifoodRetryWindow = 15 * time.Minute
	// Every 15 minutes, then at growing intervals (5m, 45m, 6h, 2d, 4d for
	// IPN): about 6 days and 7 hours.
	mercadoPagoRetryWindow = 7 * day
	// Live mode: up to 60 times over 3 days.
	paddleRetryWindow = 3 * day
	// 8 times over 4 hours.
	shopifyRetryWindow = 4 * time.Hour
	// 3 retries: at once, after about 1 and 5 minutes.
	slackRetryWindow = 10 * time.Minute
	// The specification's example schedule (Svix's own): 5s, 5m, 30m, 2h,
	// 5h, 10h, 14h, 20h, 24h, about 3 days and 4 hours.
	standardWebhooksRetryWindow = 76 * time.Hour
	// Up to 50 attempts "throughout the day", with no fixed schedule.
	stoneRetryWindow = day
	// Live mode: up to 3 days with exponential backoff.
	stripeRetryWindow = 3 * day
	// Decreasing frequency for up to 7 days.
	whatsAppRetryWindow = 7 * day
)

// defaultTolerance is the timestamp tolerance of every provider that signs a
// timestamp, unless Config.Tolerance says otherwise.
const defaultTolerance = 5 * time.Minute

// Names returns the name of every preset [New] knows, sorted.
func Names() []string {
	return []string{
		"asaas", "evolution", "github", "ifood", "mercadopago", "paddle",
		"shopify", "slack", "standardwebhooks", "stone", "stripe", "svix",
		"whatsapp-cloud",
	}
}

// New returns the preset called name (one of [Names]) configured by cfg.
// An unknown name is an error that lists the known ones.
func New(name string, cfg Config) (*idemhook.Preset, error) {
	switch name {
	case "asaas":
		return Asaas(cfg)
	case "evolution":
		return Evolution(cfg)
	case "github":
		return GitHub(cfg)
	case "ifood":
		return IFood(cfg)
	case "mercadopago":
		return MercadoPago(cfg)
	case "paddle":
		return Paddle(cfg)
	case "shopify":
		return Shopify(cfg)
	case "slack":
		return Slack(cfg)
	case "standardwebhooks":
		return StandardWebhooks(cfg)
	case "stone":
		return Stone(cfg)
	case "stripe":
		return Stripe(cfg)
	case "svix":
		return Svix(cfg)
	case "whatsapp-cloud":
		return WhatsAppCloud(cfg)
	}
	return nil, fmt.Errorf("provider: unknown provider %q (known: %s)", name, strings.Join(Names(), ", "))
}

// settings is a Config checked for one provider.
type settings struct {
	name      string
	secrets   []string
	tolerance time.Duration
	options   map[string]string
	now       func() time.Time
}

// check validates cfg for the provider name, which accepts the options
// listed in known, and applies the defaults.
func (cfg Config) check(name string, known ...string) (settings, error) {
	s := settings{name: name, tolerance: cfg.Tolerance, now: cfg.Now, options: map[string]string{}}
	for _, sec := range cfg.Secrets {
		if sec != "" {
			s.secrets = append(s.secrets, sec)
		}
	}
	if len(s.secrets) == 0 {
		return settings{}, fmt.Errorf("provider %s: no secret configured (Config.Secrets is empty); set the provider's signing secret or token", name)
	}
	if cfg.Tolerance < 0 {
		return settings{}, fmt.Errorf("provider %s: negative tolerance %v", name, cfg.Tolerance)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Options)) {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return settings{}, fmt.Errorf("provider %s: unknown option %q (this provider takes no options)", name, k)
			}
			return settings{}, fmt.Errorf("provider %s: unknown option %q (known: %s)", name, k, strings.Join(known, ", "))
		}
		s.options[k] = cfg.Options[k]
	}
	if s.tolerance == 0 {
		s.tolerance = defaultTolerance
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// checkUntimed is check for a provider that signs no timestamp: a
// tolerance would have nothing to bound, so setting one is an error rather
// than a setting that silently does nothing.
func (cfg Config) checkUntimed(name string, known ...string) (settings, error) {
	if cfg.Tolerance != 0 {
		return settings{}, fmt.Errorf("provider %s: tolerance %v has no effect: %s signs no timestamp; remove it", name, cfg.Tolerance, name)
	}
	return cfg.check(name, known...)
}

// secretBytes returns the secrets as byte slices, for HMAC keys.
func (s settings) secretBytes() [][]byte {
	keys := make([][]byte, len(s.secrets))
	for i, sec := range s.secrets {
		keys[i] = []byte(sec)
	}
	return keys
}
