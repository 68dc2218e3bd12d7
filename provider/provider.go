// Package provider has ready-made [idemhook.Preset] values for common webhook
// providers. Each one has a key that stays the same across the provider's
// retries and differs between events. It has the provider's signature
// check, run before anything is claimed so that a forged request cannot
// claim a real event's key. And it has the status the provider expects when
// a duplicate is answered.
//
// Every preset is built only from the exported fields of [idemhook.Preset]
// (Name, Verify, Handshake, Key, DuplicateStatus, SuccessStatus,
// SuccessBody, RetryWindow, Items), so a custom preset is written the same
// way (see Example_customPreset). How long a provider waits for an answer
// is for the gateway only, not the middleware: [ResponseTimeout] gives it
// for a preset, and a [Spec]'s ResponseTimeout for a provider described.
//
// A provider without a preset can be described rather than programmed: a
// [Spec] (its signature scheme, where its key is, the success answer it
// expects, its handshakes) builds an [idemhook.Preset] with [Spec.Preset],
// through the same signature parsers and checks as the presets. The
// gateway reads one from a route's provider: mapping (docs/gateway.md, "Any
// provider from YAML"). Nine presets are specs themselves (asaas, github,
// ifood, mercadopago, paddle, shopify, standardwebhooks, stripe, svix),
// built by that same code, so that such a preset and a provider described
// in YAML are the same thing by construction; the others keep Go code
// where a spec can't describe their scheme or their behaviour, each file
// saying why (docs/providers.md has the list).
//
// Keys are the key part only. The middleware stores them under
// "idem:<source>:<key>" after [idemhook.NormalizeKey]. An empty key means
// "fall back to the body hash".
//
// One route for many tenants of a provider, each with its own secret
// (/webhooks/stripe/{tenant}), takes a [Tenants]: the tenant's preset
// checks each delivery, and the keys are "idem:<source>@<tenant>:<key>".
//
// Verify errors are [*VerifyError] values that wrap one of the Err* sentinels
// below. Their text names the header and the reason (missing, malformed,
// timestamp outside tolerance, no matching signature). It never contains a
// secret or an expected MAC.
//
// The package imports only the standard library and package idemhook.
package provider

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// Config configures a preset. The gateway fills it from a route's YAML
// (secret_env, the list of rotated secrets, tolerance and provider options).
type Config struct {
	// Secrets are the signing secrets or tokens. Several are accepted during a
	// rotation, and a request passes if it matches any of them. Empty strings are
	// ignored. Required: at least one non-empty secret, except for sendgrid,
	// whose verification keys (public keys) they are, and which takes its
	// key from SendGridOptions.PublicKey instead when that is set.
	Secrets []string

	// Tolerance is how far a signed timestamp may be from Now, in either
	// direction, for providers whose scheme signs one. These are stripe,
	// standardwebhooks, svix, slack, paddle, twitch, zoom, mailgun,
	// sendgrid and hubspot, and also mercadopago and stone when it is set.
	// Default (0): the provider's default, 5 minutes for all of them but
	// twitch (10 minutes), zoom (2 hours), mailgun (9 hours) and sendgrid
	// (25 hours) (see each constructor). Set for a provider that signs no
	// timestamp (adyen, asaas, evolution, github, ifood, shopify, twilio,
	// whatsapp-cloud, messenger, instagram), it is an error.
	Tolerance time.Duration

	// WhatsAppCloud, Messenger, Instagram, Evolution, Stone, Twilio,
	// SendGrid and HubSpot are the settings of the presets that have any. Each is read by its own
	// preset only: set for another one, it is an *OptionError. Default:
	// zero, the preset's defaults.
	WhatsAppCloud WhatsAppCloudOptions
	Messenger     MessengerOptions
	Instagram     InstagramOptions
	Evolution     EvolutionOptions
	Stone         StoneOptions
	Twilio        TwilioOptions
	SendGrid      SendGridOptions
	HubSpot       HubSpotOptions

	// Now is the clock used for timestamp tolerance. Default: time.Now.
	Now func() time.Time
}

// Retry windows: how long after the first attempt each provider may still
// deliver an event again, from its documentation (docs/providers.md has the
// table with the sources). A route with the preset keeps its answers for the
// window plus a day unless it sets a TTL ([idemhook.Preset.DefaultTTL]).
const (
	day = 24 * time.Hour

	// 3 attempts within the first half minute (9, 18 and 27 s), then a
	// retry queue "for up to 30 days" (2m, 5m, 10m, 15m, 30m, 1h, 2h, 4h,
	// 8h, ...).
	adyenRetryWindow = 30 * day
	// 15 attempts over about 17 hours, then the queue pauses. Events are
	// kept 14 days and are resent when the queue is re-enabled.
	asaasRetryWindow = 14 * day
	// 10 attempts, 5s doubling up to 300s, 20% jitter: about 20 minutes.
	evolutionRetryWindow = 25 * time.Minute
	// No automatic retry. Deliveries of the past 3 days can be redelivered
	// by hand or through the REST API (7 days on GitHub Enterprise Server).
	githubRetryWindow = 3 * day
	// "Up to 10 times", "spread out over the next 24 hours" (HubSpot's
	// webhooks API docs, "Retries").
	hubSpotRetryWindow = day
	// Retries for up to 15 minutes, then the event is discarded.
	ifoodRetryWindow = 15 * time.Minute
	// Graph API webhooks (Instagram's among them): "If a notification sent
	// to your server fails, we will immediately try a few more times.
	// Subsequent attempts will be sent with decreasing frequency over the
	// next 36 hours" (developers.facebook.com/docs/graph-api/webhooks/
	// getting-started, "Event Notifications").
	instagramRetryWindow = 36 * time.Hour
	// "During 8 hours": 5m, 10m, 15m, 1h, 2h, 4h after one another.
	mailgunRetryWindow = 8 * time.Hour
	// Every 15 minutes, then at growing intervals (5m, 45m, 6h, 2d, 4d for
	// IPN): about 6 days and 7 hours.
	mercadoPagoRetryWindow = 7 * day
	// The Graph API's 36 hours, as for Instagram. Messenger's FAQ adds
	// that a webhook failing "for an extended period of time" gets its app
	// unsubscribed (developers.facebook.com/docs/messenger-platform/faq).
	messengerRetryWindow = 36 * time.Hour
	// Live mode: up to 60 times over 3 days.
	paddleRetryWindow = 3 * day
	// "All events are retried at increasing intervals for up to 24 hours
	// after the event occurs" (SendGrid, "Troubleshooting the Event
	// Webhook").
	sendGridRetryWindow = day
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
	// Event Streams retry "until it succeeds or four hours have passed";
	// programmable webhooks retry once, on a failed connection, at once
	// (up to 5 times within the URL's #tt total time).
	twilioRetryWindow = 4 * time.Hour
	// Twitch resends a message when it is unsure it arrived, with the same
	// message id, and documents no schedule: a day is assumed.
	twitchRetryWindow = day
	// Decreasing frequency for up to 7 days.
	whatsAppRetryWindow = 7 * day
	// 3 retries: 5 minutes after the first attempt, 20 minutes after the
	// first retry, 60 minutes after the second: 85 minutes.
	zoomRetryWindow = 85 * time.Minute
)

// Response timeouts: how long each provider waits for the answer to an
// attempt before it counts the attempt as failed, from its documentation
// (docs/providers.md has the table with the sources). Where the attempts of
// one event wait for different times, the shortest is taken, since a route's
// respond_within budget must fit every attempt. Stripe, Stone, Asaas,
// WhatsApp Cloud, Mailgun, SendGrid and Twitch ("within a few seconds")
// document none: [ResponseTimeout] is 0 for them.
const (
	// "If we do not receive this response within 10 seconds ... webhooks
	// ... will be queued and retried" (Adyen's webhook pages).
	adyenResponseTimeout = 10 * time.Second
	// The WEBHOOK_REQUEST_TIMEOUT_MS default of Evolution's own code;
	// a deployment can set another.
	evolutionResponseTimeout = 30 * time.Second
	// github.com and GitHub Enterprise Cloud; GitHub Enterprise Server
	// waits 30 s.
	githubResponseTimeout = 10 * time.Second
	// "If your service takes longer than 5 seconds to send back a
	// response" the batch is retried (HubSpot's webhooks API docs,
	// "Retries"; older versions of the page said 1, then 2 seconds).
	hubSpotResponseTimeout = 5 * time.Second
	// iFood stops waiting after 5 s and advises answering 202 within 2 s.
	ifoodResponseTimeout = 5 * time.Second
	// The first notification waits 22 s, every retry only 5 s.
	mercadoPagoResponseTimeout = 5 * time.Second
	// "A webhook call with timeout after 20 seconds" (Messenger Platform
	// FAQ, developers.facebook.com/docs/messenger-platform/faq), for
	// Messenger and for Instagram's messaging, which the Messenger
	// Platform delivers.
	metaMessagingResponseTimeout = 20 * time.Second
	// 200 within five seconds.
	paddleResponseTimeout = 5 * time.Second
	// 1 s to connect, 5 s in all.
	shopifyResponseTimeout = 5 * time.Second
	// Slack sends its http_timeout retry after 3 s, whether or not the
	// first attempt is still running.
	slackResponseTimeout = 3 * time.Second
	// Svix times out at 15 s; the specification recommends 15 to 30 s,
	// so a sender that follows it waits at least 15 s.
	standardWebhooksResponseTimeout = 15 * time.Second
	// Connect 5 s, read 15 s, 15 s in all (#ct, #rt, #tt change them per
	// URL); Event Streams' sinks wait 5 s.
	twilioResponseTimeout = 15 * time.Second
	// 200 or 204 within three seconds.
	zoomResponseTimeout = 3 * time.Second
)

// defaultTolerance is the timestamp tolerance of every provider that signs a
// timestamp, unless Config.Tolerance says otherwise.
const defaultTolerance = 5 * time.Minute

// WhatsAppCloudOptions are the settings of the whatsapp-cloud preset.
type WhatsAppCloudOptions struct {
	// VerifyToken answers Meta's GET subscription challenge (option
	// verify_token). Default: "", every challenge is refused.
	VerifyToken string
}

// EvolutionOptions are the settings of the evolution preset.
type EvolutionOptions struct {
	// Header names the request header holding the instance's static token
	// (option header). "Authorization" strips a "Bearer " prefix.
	// Default: "apikey".
	Header string
}

// StoneOptions are the settings of the stone preset. One of them is
// required.
type StoneOptions struct {
	// JWKS is the JSON document of Stone's key discovery URL (option jwks).
	JWKS string
	// PublicKey is one PEM public key of Stone's (option public_key).
	PublicKey string
}

// preset is one entry of the registry: a preset's constructor, whether its
// scheme signs a timestamp, and its options by the names a configuration
// file uses.
type preset struct {
	name    string
	build   func(Config) (*idemhook.Preset, error)
	timed   bool // the scheme signs a timestamp: Tolerance applies
	options []option
	// keyOption names the option that can stand in for Secrets (sendgrid's
	// public_key): with it set, no secret is required.
	keyOption string
	// responseTimeout is [ResponseTimeout]'s answer: 0, not documented.
	responseTimeout time.Duration
}

// option is one setting of a preset by its configuration name.
type option struct {
	name string
	set  func(*Config, string)
	get  func(*Config) string
}

// registry returns every preset [New] knows, sorted by name: the one list
// Names, New and Config.SetOption read.
func registry() []preset {
	return []preset{
		{name: "adyen", build: Adyen, responseTimeout: adyenResponseTimeout},
		{name: "asaas", build: Asaas},
		{name: "evolution", build: Evolution, responseTimeout: evolutionResponseTimeout, options: []option{
			{"header", func(c *Config, v string) { c.Evolution.Header = v }, func(c *Config) string { return c.Evolution.Header }},
		}},
		{name: "github", build: GitHub, responseTimeout: githubPreset.spec.ResponseTimeout},
		{name: "hubspot", build: HubSpot, responseTimeout: hubSpotResponseTimeout, timed: true, options: []option{
			{"public_url", func(c *Config, v string) { c.HubSpot.PublicURL = v }, func(c *Config) string { return c.HubSpot.PublicURL }},
		}},
		{name: "ifood", build: IFood, responseTimeout: ifoodPreset.spec.ResponseTimeout},
		{name: "instagram", build: Instagram, responseTimeout: metaMessagingResponseTimeout, options: []option{
			{"verify_token", func(c *Config, v string) { c.Instagram.VerifyToken = v }, func(c *Config) string { return c.Instagram.VerifyToken }},
		}},
		{name: "mailgun", build: Mailgun, timed: true},
		{name: "mercadopago", build: MercadoPago, responseTimeout: mercadoPagoPreset.spec.ResponseTimeout, timed: true},
		{name: "messenger", build: Messenger, responseTimeout: metaMessagingResponseTimeout, options: []option{
			{"verify_token", func(c *Config, v string) { c.Messenger.VerifyToken = v }, func(c *Config) string { return c.Messenger.VerifyToken }},
		}},
		{name: "paddle", build: Paddle, responseTimeout: paddlePreset.spec.ResponseTimeout, timed: true},
		{name: "sendgrid", build: SendGrid, timed: true, keyOption: "public_key", options: []option{
			{"public_key", func(c *Config, v string) { c.SendGrid.PublicKey = v }, func(c *Config) string { return c.SendGrid.PublicKey }},
		}},
		{name: "shopify", build: Shopify, responseTimeout: shopifyPreset.spec.ResponseTimeout},
		{name: "slack", build: Slack, responseTimeout: slackResponseTimeout, timed: true},
		{name: "standardwebhooks", build: StandardWebhooks, responseTimeout: standardWebhooksPreset.spec.ResponseTimeout, timed: true},
		{name: "stone", build: Stone, timed: true, options: []option{
			{"jwks", func(c *Config, v string) { c.Stone.JWKS = v }, func(c *Config) string { return c.Stone.JWKS }},
			{"public_key", func(c *Config, v string) { c.Stone.PublicKey = v }, func(c *Config) string { return c.Stone.PublicKey }},
		}},
		{name: "stripe", build: Stripe, timed: true},
		{name: "svix", build: Svix, responseTimeout: svixPreset.spec.ResponseTimeout, timed: true},
		{name: "twilio", build: Twilio, responseTimeout: twilioResponseTimeout, options: []option{
			{"public_url", func(c *Config, v string) { c.Twilio.PublicURL = v }, func(c *Config) string { return c.Twilio.PublicURL }},
		}},
		{name: "twitch", build: Twitch, timed: true},
		{name: "whatsapp-cloud", build: WhatsAppCloud, options: []option{
			{"verify_token", func(c *Config, v string) { c.WhatsAppCloud.VerifyToken = v }, func(c *Config) string { return c.WhatsAppCloud.VerifyToken }},
		}},
		{name: "zoom", build: Zoom, responseTimeout: zoomResponseTimeout, timed: true},
	}
}

func lookup(name string) (preset, bool) {
	for _, p := range registry() {
		if p.name == name {
			return p, true
		}
	}
	return preset{}, false
}

// Names returns the name of every preset [New] knows, sorted.
func Names() []string {
	var names []string
	for _, p := range registry() {
		names = append(names, p.name)
	}
	return names
}

// ResponseTimeout returns how long the provider of the preset called name
// (one of [Names]) waits for the answer to a delivery before it counts the
// attempt as failed (and retries it, or gives up); where attempts wait for
// different times, the shortest. It is 0 when the provider documents none,
// or name is no preset. The gateway warns when a route's respond_within
// budget is not below it, since an answer sent after the provider stopped
// waiting is lost and the event comes again. A provider described by a
// [Spec] has its Spec.ResponseTimeout instead.
func ResponseTimeout(name string) time.Duration {
	p, _ := lookup(name)
	return p.responseTimeout
}

// New returns the preset called name (one of [Names]) configured by cfg.
// An unknown name is an error that lists the known ones.
func New(name string, cfg Config) (*idemhook.Preset, error) {
	p, ok := lookup(name)
	if !ok {
		return nil, fmt.Errorf("provider: unknown provider %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return p.build(cfg)
}

// OptionNames returns the names of the options the preset called name
// takes, as a configuration file gives them (e.g. "verify_token"), in order.
func OptionNames(name string) []string {
	p, _ := lookup(name)
	var names []string
	for _, o := range p.options {
		names = append(names, o.name)
	}
	return names
}

// SetOption sets the option called option of the preset called name, for a
// configuration that names options as text (the gateway's
// provider_options). An option the preset doesn't take is an *OptionError.
func (cfg *Config) SetOption(name, option, value string) error {
	p, ok := lookup(name)
	if !ok {
		return fmt.Errorf("provider: unknown provider %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	for _, o := range p.options {
		if o.name == option {
			o.set(cfg, value)
			return nil
		}
	}
	return &OptionError{Preset: name, Option: option, Reason: unknownOption(p)}
}

func unknownOption(p preset) string {
	if len(p.options) == 0 {
		return "unknown option (this provider takes no options)"
	}
	return "unknown option (known: " + strings.Join(OptionNames(p.name), ", ") + ")"
}

// OptionError is a preset option that is unknown, meant for another
// preset, or whose value the preset can't use. Its field names the option
// so that a configuration can point at its line.
type OptionError struct {
	Preset string
	Option string // as a configuration names it, e.g. "verify_token"
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("provider %s: option %s: %s", e.Preset, e.Option, e.Reason)
}

// ToleranceError is a Config.Tolerance the preset refuses: negative, or set
// for a scheme that signs no timestamp (it would bound nothing).
type ToleranceError struct {
	Preset    string
	Tolerance time.Duration
	Reason    string
}

func (e *ToleranceError) Error() string {
	return fmt.Sprintf("provider %s: tolerance %v %s", e.Preset, e.Tolerance, e.Reason)
}

// settings is a Config checked for one provider.
type settings struct {
	name      string
	secrets   []string
	tolerance time.Duration
	now       func() time.Time
}

// check validates cfg for the provider name and applies the defaults. It
// refuses a tolerance for a scheme that signs no timestamp (it would bound
// nothing) and the options of another preset (they would do nothing).
func (cfg Config) check(name string) (settings, error) {
	self, _ := lookup(name)
	return cfg.checkFor(self, true)
}

// checkFor is check for the preset self, registered (one of registry's,
// whose own options it may take) or not (built from a [Spec]: it takes
// none).
func (cfg Config) checkFor(self preset, registered bool) (settings, error) {
	name := self.name
	s := settings{name: name, tolerance: cfg.Tolerance, now: cfg.Now}
	for _, sec := range cfg.Secrets {
		if sec != "" {
			s.secrets = append(s.secrets, sec)
		}
	}
	if len(s.secrets) == 0 && !self.keyOptionSet(&cfg) {
		if self.keyOption != "" {
			return settings{}, fmt.Errorf("provider %s: no key configured (Config.Secrets is empty and option %s is not set); set the provider's verification key in one of them", name, self.keyOption)
		}
		return settings{}, fmt.Errorf("provider %s: no secret configured (Config.Secrets is empty); set the provider's signing secret or token", name)
	}
	switch {
	case cfg.Tolerance < 0:
		return settings{}, &ToleranceError{Preset: name, Tolerance: cfg.Tolerance, Reason: "is negative"}
	case cfg.Tolerance != 0 && !self.timed:
		return settings{}, &ToleranceError{Preset: name, Tolerance: cfg.Tolerance,
			Reason: fmt.Sprintf("has no effect: %s signs no timestamp; remove it", name)}
	}
	for _, p := range registry() {
		if registered && p.name == name {
			continue
		}
		for _, o := range p.options {
			if o.get(&cfg) != "" {
				return settings{}, &OptionError{Preset: name, Option: o.name,
					Reason: fmt.Sprintf("is a setting of %s, not of %s; %s", p.name, name, unknownOption(self))}
			}
		}
	}
	if s.tolerance == 0 {
		s.tolerance = defaultTolerance
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// keyOptionSet reports whether p's keyOption is set in cfg.
func (p preset) keyOptionSet(cfg *Config) bool {
	for _, o := range p.options {
		if o.name == p.keyOption && o.get(cfg) != "" {
			return true
		}
	}
	return false
}

// KeyOption returns the option of the preset called name that can stand in
// for its secrets (sendgrid: "public_key", its verification key), or "":
// a configuration that sets it needs no secret.
func KeyOption(name string) string {
	p, _ := lookup(name)
	return p.keyOption
}

// secretBytes returns the secrets as byte slices, for HMAC keys.
func (s settings) secretBytes() [][]byte {
	keys := make([][]byte, len(s.secrets))
	for i, sec := range s.secrets {
		keys[i] = []byte(sec)
	}
	return keys
}
