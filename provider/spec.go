package provider

import (
	"cmp"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"maps"
	"math/big"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/suggest"
)

// Spec describes a provider declaratively, so that a provider without a
// preset is configured rather than programmed: the gateway reads it from a
// route's provider: mapping (docs/gateway.md, "Any provider from YAML").
// [Spec.Preset] builds an [idemhook.Preset] from it with the same
// signature parsers and checks as the Go presets.
//
// The yaml tags are the names a configuration file uses; a [SpecError]
// names a field by them (e.g. "signature.timestamp.format").
//
// Templates: what a signature signs ("{timestamp}.{body}"), a key
// ("{header:X-GitHub-Hook-ID}:{header:X-GitHub-Delivery}") and a
// handshake's values and answer are texts with placeholders:
//
//	{body}             the raw body
//	{timestamp}        the signed timestamp, as sent
//	{method}           the request's method
//	{header:Name}      a request header (the first value)
//	{query:name}       a parameter of the URL's query (the first value)
//	{json:a.b[0].c}    a string or number of a JSON body, as written; null,
//	                   true, false, objects and lists give nothing
//	{raw:a.b}          the JSON value at the path, compacted
//	{item:a.b}         the same in the item a key.single path selected
//	{form:name}        a field of a form body (the first value)
//	{form_sorted}      a form body's fields sorted by name, each name
//	                   followed by its values (Twilio's signed parameters)
//	{url}              the URL the provider called: signature.public_url
//	                   (or the request's scheme and host) and the request's
//	                   path and query; a signature over it is tried with and
//	                   without the scheme's default port
//
// A placeholder may end with filters, applied in order: |lower, |upper,
// |trim, |sha256 (hex of its SHA-256), |first:N (its first N bytes),
// |hmac (hex of the HMAC of the value with the secret that signed the
// request, in a handshake's answer, as Zoom's url_validation wants).
//
// [ ... ] is an optional part, left out when one of its placeholders is
// empty (Mercado Pago's manifest leaves out its absent parts). Outside
// one, an empty placeholder makes a key or a handshake check give nothing,
// and a missing header or body field makes a signature check fail
// (ErrMissingHeader, ErrMalformedBody); in what is signed, {json:...}
// reads strings only. {timestamp}, {url} and {form_sorted} are for what is
// signed only, {item:...} for key.single. A backslash writes the next
// character as is: \{ \} \[ \] \\.
type Spec struct {
	// Name names the preset in errors, logs and metrics. Default "custom"
	// (the gateway uses the route's source).
	Name string `yaml:"name"`
	// Signature is how a request proves it comes from the provider.
	// Required.
	Signature Signature `yaml:"signature"`
	// Key is where the event's idempotency key is. Default: none, the body
	// hash.
	Key KeySpec `yaml:"key"`
	// Success is the answer the provider counts as a success.
	Success Success `yaml:"success"`
	// Handshakes are requests the provider sends to check the endpoint
	// (Slack's url_verification, Meta's GET challenge), answered by the
	// preset and never forwarded.
	Handshakes []Handshake `yaml:"handshakes"`
	// AlternateHeaders reads other header names when a request lacks one:
	// Svix's svix-* headers, or the webhook-* ones.
	AlternateHeaders AlternateHeaders `yaml:"alternate_headers"`
	// RetryWindow is how long the provider may retry an event; the keys
	// are kept that long plus a day unless the route sets a TTL.
	RetryWindow time.Duration `yaml:"retry_window"`
	// ResponseTimeout is how long the provider waits for an answer.
	ResponseTimeout time.Duration `yaml:"response_timeout"`
}

// Signature is the signature scheme of a [Spec].
type Signature struct {
	// Algorithm: hmac-sha256, hmac-sha1, hmac-sha512 (the secrets are the
	// HMAC keys); ed25519, ecdsa-sha256 (the secrets are the provider's
	// public keys: PEM, or hex or base64 of the DER, or for ed25519 of the
	// 32 raw bytes, as Discord's portal shows it in hex); or token (the header holds one of the secrets as is: no
	// signature, compared in constant time). Required.
	Algorithm string `yaml:"algorithm"`
	// Header holds the signature (or the token). Required, or JSON.
	Header string `yaml:"header"`
	// JSON are the fields of a JSON body holding the signature instead of
	// a header (Mailgun's signature.signature): the first must be there,
	// the others may be (signature.parent-signature); each is a JSON
	// string, and any of them may match.
	JSON []string `yaml:"json"`
	// Prefix comes before the encoded signature, e.g. "sha256=". It is
	// required when set, except for a token, where it is removed when
	// present (e.g. "Bearer ", in any case).
	Prefix string `yaml:"prefix"`
	// Encoding of the signature: hex (default, either case), base64 or
	// base64url (padded or not).
	Encoding string `yaml:"encoding"`
	// Format of the header: "value" (default: Prefix and one signature) or
	// "pairs": items separated by Separator, each a key, Assign and a
	// value, such as Stripe's "t=<unix>,v1=<hex>" or Standard Webhooks'
	// "v1,<base64> v1,<base64>".
	Format string `yaml:"format"`
	// Separator between pairs: "," (default), ";" or " " (any white
	// space).
	Separator string `yaml:"separator"`
	// Assign separates a pair's key and value: "=" (default) or ",".
	Assign string `yaml:"assign"`
	// SignatureKey is the key of the signatures among the pairs, e.g. v1.
	// Pairs of other keys are ignored, so a downgrade is impossible.
	// Several are accepted (a rotation). Required with pairs.
	SignatureKey string `yaml:"signature_key"`
	// TimestampKey is the key of the signed timestamp among the pairs,
	// e.g. t. Set it or Timestamp.Header, not both.
	TimestampKey string `yaml:"timestamp_key"`
	// TrimSpaces allows spaces around the keys and values of pairs.
	TrimSpaces bool `yaml:"trim_spaces"`
	// Signed is the template of what is signed (see [Spec]). Default
	// "{body}". With a timestamp, it must sign it outside optional parts:
	// {timestamp}, {header:<Timestamp.Header>}, or for Timestamp.JSON
	// {body} or {json:<Timestamp.JSON>}; a placeholder cut by |first:N
	// does not count.
	Signed string `yaml:"signed"`
	// SecretEncoding is how a secret is written. An HMAC secret: raw
	// (default: its bytes), base64 or hex. A public key (ed25519,
	// ecdsa-sha256) is text: PEM, or the hex or base64 of its DER or, for
	// ed25519, of its 32 bytes; by default the form is recognised, and hex
	// or base64 here accepts that one only (raw is refused).
	SecretEncoding string `yaml:"secret_encoding"`
	// SecretPrefix is removed from a secret (or a public key) when
	// present, e.g. "whsec_".
	SecretPrefix string `yaml:"secret_prefix"`
	// PublicURL is the scheme, host and any path prefix the provider
	// calls, for a signed {url} behind a proxy (e.g.
	// https://hooks.example.com). Default: the request's own.
	PublicURL string `yaml:"public_url"`
	// Timestamp is the signed timestamp.
	Timestamp Timestamp `yaml:"timestamp"`
}

// Timestamp is the signed timestamp of a [Signature].
type Timestamp struct {
	// Header holds it. Or JSON, or Signature.TimestampKey.
	Header string `yaml:"header"`
	// JSON is the field of a JSON body holding it (a string or a number),
	// e.g. signature.timestamp.
	JSON string `yaml:"json"`
	// Format: unix (default: decimal seconds), unix_ms, unix_s_or_ms
	// (seconds, or milliseconds when too large to be seconds), rfc3339.
	Format string `yaml:"format"`
	// Tolerance is how far it may be from now, in either direction.
	// Default 5 minutes; a route's tolerance overrides it. NoTolerance
	// ("none" in YAML) checks no age unless the route sets a tolerance.
	Tolerance time.Duration `yaml:"tolerance"`
}

// NoTolerance is a [Timestamp.Tolerance] that checks no age unless the
// route sets one (Mercado Pago documents no tolerance).
const NoTolerance time.Duration = -1

// KeySpec is where a [Spec] finds the idempotency key.
type KeySpec struct {
	// Templates are tried in order: the first whose placeholders outside
	// optional parts are all non-empty is the key. In YAML, key: may be
	// one template or a list of them.
	Templates []string `yaml:"templates,shorthand"`
	// Single selects items of the body by paths with [*]. When they select
	// exactly one item in all, the key is its path's template, whose
	// {item:...} placeholders read the item; otherwise Templates are
	// tried. (WhatsApp: one message or status per request is keyed by its
	// id, a batch by the body hash.)
	Single []SingleItem `yaml:"single"`
}

// SingleItem is one path of [KeySpec.Single].
type SingleItem struct {
	Path string `yaml:"path"` // e.g. entry[*].changes[*].value.messages[*]
	Key  string `yaml:"key"`  // e.g. "{item:id}"
}

// Success is the answer a provider counts as a success. Status, when set,
// replaces any 2xx of the backend and answers duplicates
// (idemhook.Preset's SuccessStatus and DuplicateStatus); Body, when set,
// replaces a success's body (SuccessBody, e.g. Adyen's "[accepted]").
type Success struct {
	Status int    `yaml:"status"`
	Body   string `yaml:"body"`
}

// Handshake is a request the provider sends to check the endpoint.
type Handshake struct {
	// Match tells the handshake from a delivery. Required.
	Match Match `yaml:"match"`
	// Unsigned: the provider does not sign it (Meta's GET challenge). A
	// request that matches passes the signature check, and the handshake
	// answers it: never forwarded. Then VerifyToken should be set.
	Unsigned bool `yaml:"unsigned"`
	// VerifyTokenFrom is the template of where the request carries the
	// verify token, e.g. "{query:hub.verify_token}"; it must equal
	// VerifyToken (compared in constant time).
	VerifyTokenFrom string `yaml:"verify_token_from"`
	VerifyToken     string `yaml:"verify_token"`
	// Require are checks the request must pass, else it is refused.
	Require []Check `yaml:"require"`
	// Answer is the answer to a handshake that passes. Default 200,
	// text/plain, empty.
	Answer Answer `yaml:"answer"`
	// Refuse is the answer to one that does not. Default 400 "<name>:
	// handshake refused".
	Refuse Answer `yaml:"refuse"`
}

// Match selects requests: all that is set must hold.
type Match struct {
	Method string            `yaml:"method"`
	Header map[string]string `yaml:"header"` // name: value; "*": present
	Query  map[string]string `yaml:"query"`  // name: value; "*": present
	JSON   map[string]string `yaml:"json"`   // path: string or number as written
}

// Check is one requirement of a [Handshake]: the template Value is
// non-empty and, when Equals is set, equal to it.
type Check struct {
	Value  string `yaml:"value"`
	Equals string `yaml:"equals"`
}

// Answer is a handshake's answer: Body (a template) or JSON, an object
// written as JSON. JSON's values keep their types: numbers, booleans,
// null, lists and objects (map[string]any, []any) are written as they
// are, and only its strings are templates (Discord's PONG is
// {"type": 1}, Zoom's answer {"plainToken": "{json:payload.plainToken}",
// ...}).
type Answer struct {
	Status      int            `yaml:"status"`
	ContentType string         `yaml:"content_type"`
	Body        string         `yaml:"body"`
	JSON        map[string]any `yaml:"json"`
}

// AlternateHeaders: when a request lacks the header WhenMissing but has
// its alternate, every header the spec reads is read under its alternate
// name in Headers (as Svix's libraries read webhook-* headers).
type AlternateHeaders struct {
	WhenMissing string            `yaml:"when_missing"`
	Headers     map[string]string `yaml:"headers"`
}

// SpecError is a field of a [Spec] that can't be used. Field is its path
// by the names a configuration file uses, e.g. "signature.encoding", so
// that a configuration can point at its line.
type SpecError struct {
	Spec   string
	Field  string
	Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("provider %s: %s: %s", e.Spec, e.Field, e.Reason)
}

// Choices of the fields of a Spec.
var (
	SpecAlgorithms       = []string{"hmac-sha256", "hmac-sha1", "hmac-sha512", "ed25519", "ecdsa-sha256", "token"}
	SpecEncodings        = []string{"hex", "base64", "base64url"}
	SpecFormats          = []string{"value", "pairs"}
	SpecTimestampFormats = []string{"unix", "unix_ms", "unix_s_or_ms", "rfc3339"}
	SpecSecretEncodings  = []string{"raw", "base64", "hex"}
)

// compiled is a Spec checked and ready to serve.
type compiled struct {
	s         settings
	spec      Spec
	alg       string
	newHash   func() hash.Hash // hmac-*
	size      int              // the signature's length; 0: any
	decode    func(string) ([]byte, error)
	secrets   []string           // Config.Secrets, as given
	noSecrets bool               // the algorithm is unknown: the secrets are not read
	keys      [][]byte           // hmac-*
	pubs      []crypto.PublicKey // ed25519, ecdsa-sha256
	pairs     timestampedHeader
	signed    *template
	publicURL string
	tsHeader  string
	tsJSON    []step   // the timestamp's body field
	sigJSON   [][]step // the signatures' body fields
	parseTS   func(string) (time.Time, bool)
	checkAge  bool
	keyTmpls  []*template
	single    []singleItem
	handshake []compiledHandshake
	// malformed, when set, replaces the detail of a malformed signature
	// header: a preset's own words (see builtin).
	malformed string
}

type singleItem struct {
	path []step
	key  *template
}

type compiledHandshake struct {
	h          Handshake
	match      map[string][]step // json paths of Match.JSON
	tokenFrom  *template
	require    []*template
	answer     *template
	answerJSON any // Answer.JSON, its strings parsed as *template
	refuse     *template
	usesHMAC   bool
}

// Preset builds the preset the spec describes, with cfg's secrets (or
// public keys), tolerance and clock. A field it can't use is a
// [*SpecError]; a secret, a [*SecretError]; cfg's Tolerance and options as
// [New]'s presets refuse them. Several problems are returned together
// (errors.Join), in the order of the fields.
func (sp Spec) Preset(cfg Config) (*idemhook.Preset, error) {
	c, err := sp.compile(cfg)
	if err != nil {
		return nil, err
	}
	return c.preset(), nil
}

// compile checks the spec and cfg, and compiles them.
func (sp Spec) compile(cfg Config) (*compiled, error) {
	if sp.Name == "" {
		sp.Name = "custom"
	}
	fail := func(field, format string, args ...any) error {
		return &SpecError{Spec: sp.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	sig := &sp.Signature
	c := &compiled{spec: sp, alg: sig.Algorithm, secrets: cfg.Secrets}
	var algErr error
	switch sig.Algorithm {
	case "":
		algErr = fail("signature.algorithm", "missing: one of %s", strings.Join(SpecAlgorithms, ", "))
	case "hmac-sha256":
		c.newHash = sha256.New
	case "hmac-sha1":
		c.newHash = sha1.New
	case "hmac-sha512":
		c.newHash = sha512.New
	case "ed25519":
		c.size = ed25519.SignatureSize
	case "ecdsa-sha256":
	case "token":
	default:
		algErr = fail("signature.algorithm", "unknown algorithm %q%s (known: %s)", sig.Algorithm, suggest.DidYouMean(sig.Algorithm, SpecAlgorithms), strings.Join(SpecAlgorithms, ", "))
	}
	if algErr != nil {
		// The other fields are checked as for HMAC-SHA256, the secrets not.
		c.alg, c.newHash, c.noSecrets = "hmac-sha256", sha256.New, true
	}
	if c.newHash != nil {
		c.size = c.newHash().Size()
	}
	// Every section is checked, so that a file's problems are reported at
	// once.
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	add(algErr)
	timed := sig.Timestamp.Header != "" || sig.TimestampKey != "" || sig.Timestamp.JSON != ""
	s, err := cfg.checkFor(preset{name: sp.Name, timed: timed}, false)
	add(err)
	c.s = s
	c.s.name = sp.Name
	if err := c.checkSignatureSource(fail); err != nil {
		add(err)
	} else {
		add(c.compileSignature(fail))
	}
	add(c.compileKey(fail))
	add(c.compileHandshakes(fail))
	if st := sp.Success.Status; st != 0 && (st < 200 || st > 299) {
		add(fail("success.status", "%d is not a success (want 200 to 299)", st))
	}
	if sp.Success.Body != "" && sp.Success.Status == 0 {
		add(fail("success.body", "is answered with success.status, which is not set (e.g. status: 200)"))
	}
	if sp.RetryWindow < 0 {
		add(fail("retry_window", "must be positive"))
	}
	if sp.ResponseTimeout < 0 {
		add(fail("response_timeout", "must be positive"))
	}
	add(c.compileAlternates(fail))
	if cfg.Tolerance == 0 {
		switch t := sig.Timestamp.Tolerance; {
		case t == NoTolerance:
		case t < 0:
			add(fail("signature.timestamp.tolerance", "must be positive (or none: checked only when the route sets a tolerance)"))
		case t > 0:
			c.s.tolerance = t
		}
	}
	if err := joinFlat(errs...); err != nil {
		return nil, err
	}
	c.checkAge = timed && (cfg.Tolerance > 0 || sig.Timestamp.Tolerance != NoTolerance)
	return c, nil
}

// preset is the preset of the compiled spec.
func (c *compiled) preset() *idemhook.Preset {
	sp := c.spec
	p := &idemhook.Preset{
		Name:            sp.Name,
		RetryWindow:     sp.RetryWindow,
		Verify:          c.verify,
		Key:             c.key,
		DuplicateStatus: sp.Success.Status,
		SuccessStatus:   sp.Success.Status,
		SuccessBody:     sp.Success.Body,
	}
	if len(c.handshake) > 0 {
		p.Handshake = c.answerHandshake
	}
	return p
}

type failFunc func(field, format string, args ...any) error

// joinFlat joins errs as errors.Join does, the errors of a joined one in
// its place, so that each problem is one of the result's.
func joinFlat(errs ...error) error {
	var flat []error
	for _, err := range errs {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			flat = append(flat, j.Unwrap()...)
		} else if err != nil {
			flat = append(flat, err)
		}
	}
	return errors.Join(flat...)
}

// checkSignatureSource checks where the signature is, and what a token
// can't have.
func (c *compiled) checkSignatureSource(fail failFunc) error {
	sig := &c.spec.Signature
	switch {
	case sig.Header != "" && len(sig.JSON) > 0:
		return fail("signature.json", "the signature is in a header or in the body: give header or json, not both")
	case sig.Header == "" && len(sig.JSON) == 0:
		return fail("signature.header", "missing: the header that holds the %s", map[bool]string{true: "token", false: "signature (or json: the body fields)"}[c.alg == "token"])
	case sig.Header != "" && !validHeaderName(sig.Header):
		return fail("signature.header", "%q is not a header name", sig.Header)
	case len(sig.JSON) > 0 && c.alg == "token":
		return fail("signature.json", "a token is read from a header: give header")
	}
	if c.alg != "token" {
		return nil
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"signature.encoding", sig.Encoding != ""}, {"signature.format", sig.Format != ""}, {"signature.separator", sig.Separator != ""},
		{"signature.assign", sig.Assign != ""}, {"signature.signature_key", sig.SignatureKey != ""}, {"signature.timestamp_key", sig.TimestampKey != ""},
		{"signature.trim_spaces", sig.TrimSpaces}, {"signature.signed", sig.Signed != ""}, {"signature.secret_encoding", sig.SecretEncoding != ""},
		{"signature.secret_prefix", sig.SecretPrefix != ""}, {"signature.public_url", sig.PublicURL != ""},
		{"signature.timestamp", sig.Timestamp != Timestamp{}},
	} {
		if f.set {
			return fail(f.name, "has no effect with algorithm token (the header holds the secret itself, nothing is signed); remove it")
		}
	}
	return nil
}

// compileSignature compiles the signature: its encoding and format, its
// timestamp and what it signs, and its secrets, each part's first problem
// reported.
func (c *compiled) compileSignature(fail failFunc) error {
	if c.alg == "token" {
		return nil
	}
	return joinFlat(c.compileFormat(fail), c.compileSigned(fail), c.compileSecrets(fail))
}

// compileFormat compiles the signature's encoding and format.
func (c *compiled) compileFormat(fail failFunc) error {
	sig := &c.spec.Signature
	var encErr error
	switch sig.Encoding {
	case "", "hex":
		c.decode = hex.DecodeString
	case "base64":
		c.decode = base64.StdEncoding.DecodeString
	case "base64url":
		c.decode = func(v string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "=")) }
	default:
		// The format is checked as for hex.
		c.decode = hex.DecodeString
		encErr = fail("signature.encoding", "unknown encoding %q%s (known: %s)", sig.Encoding, suggest.DidYouMean(sig.Encoding, SpecEncodings), strings.Join(SpecEncodings, ", "))
	}
	return joinFlat(encErr, c.compileLayout(fail))
}

// compileLayout compiles the signature's format: a value, or pairs. It
// reports every problem of the format's settings, not the first.
func (c *compiled) compileLayout(fail failFunc) error {
	sig := &c.spec.Signature
	var errs []error
	switch sig.Format {
	case "", "value":
		for _, f := range []struct {
			name string
			set  bool
		}{{"separator", sig.Separator != ""}, {"assign", sig.Assign != ""}, {"signature_key", sig.SignatureKey != ""}, {"timestamp_key", sig.TimestampKey != ""}, {"trim_spaces", sig.TrimSpaces}} {
			if f.set {
				errs = append(errs, fail("signature."+f.name, "is a setting of format: pairs; set format: pairs or remove it"))
			}
		}
	case "pairs":
		if len(sig.JSON) > 0 {
			errs = append(errs, fail("signature.format", "pairs are read from a header: with json, each field holds one signature"))
		}
		if sig.Prefix != "" {
			errs = append(errs, fail("signature.prefix", "has no effect with format: pairs (name the signatures' key with signature_key)"))
		}
		if sig.SignatureKey == "" {
			errs = append(errs, fail("signature.signature_key", "missing: the key of the signatures among the pairs, e.g. v1 for \"t=...,v1=...\""))
		}
		sep, assign := cmp.Or(sig.Separator, ","), cmp.Or(sig.Assign, "=")
		if len(sep) != 1 || len(assign) != 1 {
			errs = append(errs, fail("signature.separator", "separator and assign are one character each, e.g. \",\" and \"=\""))
		} else if sep == assign {
			errs = append(errs, fail("signature.assign", "is the separator %q too", sep))
		}
		if sig.TimestampKey != "" && sig.Timestamp.Header != "" {
			errs = append(errs, fail("signature.timestamp.header", "the timestamp is read from the pairs (timestamp_key %s): remove timestamp.header", sig.TimestampKey))
		}
		if len(errs) > 0 {
			break
		}
		c.pairs = timestampedHeader{
			sep: sep, assign: assign, tsKey: sig.TimestampKey, sigKey: sig.SignatureKey,
			spaced: sig.TrimSpaces, decode: c.decode,
		}
		if sig.TimestampKey != "" {
			c.pairs.format = fmt.Sprintf(`want "%s%s<timestamp>%s%s%s<signature>"`, sig.TimestampKey, assign, sep, sig.SignatureKey, assign)
		} else {
			c.pairs.format = fmt.Sprintf(`want %q items`, sig.SignatureKey+assign+"<signature>")
		}
	default:
		errs = append(errs, fail("signature.format", "unknown format %q%s (known: %s)", sig.Format, suggest.DidYouMean(sig.Format, SpecFormats), strings.Join(SpecFormats, ", ")))
	}
	return joinFlat(errs...)
}

// compileSigned compiles the timestamp and what is signed.
func (c *compiled) compileSigned(fail failFunc) error {
	sig := &c.spec.Signature
	ts := sig.Timestamp
	timed := ts.Header != "" || sig.TimestampKey != "" || ts.JSON != ""
	if !timed && (ts.Format != "" || ts.Tolerance != 0) {
		return fail("signature.timestamp", "has no header (or json, or signature.timestamp_key): where is the timestamp?")
	}
	if ts.JSON != "" && (ts.Header != "" || sig.TimestampKey != "") {
		return fail("signature.timestamp.json", "the timestamp is in one place: give header, json or signature.timestamp_key")
	}
	if ts.JSON != "" {
		path, err := jsonPath(ts.JSON)
		if err != nil {
			return fail("signature.timestamp.json", "%v", err)
		}
		c.tsJSON = path
	}
	for i, p := range sig.JSON {
		path, err := jsonPath(p)
		if err != nil {
			return fail(fmt.Sprintf("signature.json[%d]", i), "%v", err)
		}
		c.sigJSON = append(c.sigJSON, path)
	}
	if ts.Header != "" && !validHeaderName(ts.Header) {
		return fail("signature.timestamp.header", "%q is not a header name", ts.Header)
	}
	c.tsHeader = ts.Header
	switch ts.Format {
	case "", "unix":
		c.parseTS = parseUnix
	case "unix_ms":
		c.parseTS = func(v string) (time.Time, bool) {
			t, ok := parseUnix(v)
			return time.UnixMilli(t.Unix()), ok
		}
	case "unix_s_or_ms":
		c.parseTS = func(v string) (time.Time, bool) {
			t, ok := parseUnix(v)
			if n := t.Unix(); n > 1e11 {
				return time.UnixMilli(n), ok
			}
			return t, ok
		}
	case "rfc3339":
		c.parseTS = func(v string) (time.Time, bool) {
			t, err := time.Parse(time.RFC3339Nano, v)
			return t, err == nil
		}
	default:
		return fail("signature.timestamp.format", "unknown format %q%s (known: %s)", ts.Format, suggest.DidYouMean(ts.Format, SpecTimestampFormats), strings.Join(SpecTimestampFormats, ", "))
	}
	if sig.TimestampKey != "" {
		c.pairs.validTS = func(v string) bool { _, ok := c.parseTS(v); return ok }
	}
	// What is signed.
	allowed := []string{"body", "method", "url", "header", "query", "form", "form_sorted", "json"}
	if timed {
		allowed = append(allowed, "timestamp")
	}
	signed, err := parseTemplate(cmp.Or(sig.Signed, "{body}"), allowed, false)
	if err != nil {
		if !timed && strings.Contains(err.Error(), "{timestamp}") {
			return fail("signature.signed", "%v (set signature.timestamp.header or signature.timestamp_key)", err)
		}
		return fail("signature.signed", "%v", err)
	}
	c.signed = signed
	if timed {
		if err := c.checkTimestampSigned(fail); err != nil {
			return err
		}
	}
	if sig.PublicURL != "" {
		if !signed.uses("url") {
			return fail("signature.public_url", "is the URL of {url}, which signature.signed does not sign")
		}
		u, err := checkPublicURL(sig.PublicURL, "the provider")
		if err != nil {
			return fail("signature.public_url", "%v", err)
		}
		c.publicURL = u
	}
	return nil
}

// compileSecrets reads the secrets or public keys.
func (c *compiled) compileSecrets(fail failFunc) error {
	sig := &c.spec.Signature
	switch sig.SecretEncoding {
	case "", "raw", "base64", "hex":
	default:
		return fail("signature.secret_encoding", "unknown encoding %q%s (known: %s)", sig.SecretEncoding, suggest.DidYouMean(sig.SecretEncoding, SpecSecretEncodings), strings.Join(SpecSecretEncodings, ", "))
	}
	if c.newHash == nil && sig.SecretEncoding == "raw" {
		return fail("signature.secret_encoding", "raw is for HMAC secrets: the secrets of %s are public keys, written as text (%s)", c.alg, publicKeyForms(c.alg))
	}
	for idx, sec := range c.secrets {
		if sec == "" || c.noSecrets {
			continue // Config.check skips it
		}
		sec = strings.TrimPrefix(sec, sig.SecretPrefix)
		if c.newHash == nil || sig.SecretEncoding != "" && sig.SecretEncoding != "raw" {
			sec = strings.TrimSpace(sec) // a key's text; a raw HMAC secret is used as given, as the presets use it
		}
		if c.newHash != nil {
			var k []byte
			var err error
			switch sig.SecretEncoding {
			case "", "raw":
				k = []byte(sec)
			case "base64":
				k, err = base64.StdEncoding.DecodeString(sec)
			case "hex":
				k, err = hex.DecodeString(sec)
			}
			if err != nil || len(k) == 0 {
				return &SecretError{Preset: c.s.name, Index: idx, Reason: fmt.Sprintf("is not %s (secret_encoding %s)", sig.SecretEncoding, sig.SecretEncoding)}
			}
			c.keys = append(c.keys, k)
			continue
		}
		pub, err := parsePublicKey(c.alg, sec, sig.SecretEncoding)
		if err != nil {
			return &SecretError{Preset: c.s.name, Index: idx, Reason: err.Error()}
		}
		c.pubs = append(c.pubs, pub)
	}
	return nil
}

// publicKeyForms names the ways a public key of alg may be written.
func publicKeyForms(alg string) string {
	if alg == "ed25519" {
		return "PEM; hex or base64 of its 32 bytes (Discord's portal shows hex); or hex or base64 of its DER"
	}
	return "PEM, or hex or base64 of its DER"
}

// parsePublicKey reads an ed25519 or ECDSA public key: PEM, or the hex or
// base64 of its DER (SubjectPublicKeyInfo) or, for ed25519, of its 32 raw
// bytes. encoding ("", hex or base64: signature.secret_encoding) says
// which of hex and base64 it is; "" tells them apart (hex first: the hex
// of a key is never valid base64 of another key, which would be 3/4 as
// long).
func parsePublicKey(alg, text, encoding string) (crypto.PublicKey, error) {
	var der []byte
	var form string
	if block, _ := pem.Decode([]byte(text)); block != nil && encoding == "" {
		der, form = block.Bytes, "PEM"
	} else if b, err := hex.DecodeString(text); err == nil && encoding != "base64" {
		der, form = b, "hex"
	} else if b, err := base64.StdEncoding.DecodeString(text); err == nil && encoding != "hex" {
		der, form = b, "base64"
	} else {
		what := "PEM, hex or base64"
		if encoding != "" {
			what = encoding + " (secret_encoding)"
		}
		return nil, fmt.Errorf("is not %s: write an %s public key as %s", what, alg, publicKeyForms(alg))
	}
	if alg == "ed25519" && len(der) == ed25519.PublicKeySize {
		return ed25519.PublicKey(der), nil
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		raw := ""
		if alg == "ed25519" {
			raw = fmt.Sprintf("neither the key's %d bytes nor ", ed25519.PublicKeySize)
		}
		return nil, fmt.Errorf("is %s of %d bytes: %sa DER public key (%v); write an %s public key as %s", form, len(der), raw, err, alg, publicKeyForms(alg))
	}
	switch k := k.(type) {
	case ed25519.PublicKey:
		if alg == "ed25519" {
			return k, nil
		}
	case *ecdsa.PublicKey:
		if alg == "ecdsa-sha256" {
			return k, nil
		}
	}
	return nil, fmt.Errorf("is a %T, not a %s public key", k, alg)
}

func (c *compiled) compileKey(fail failFunc) error {
	var errs []error
	allowed := []string{"method", "header", "query", "form", "json", "raw"}
	for i, src := range c.spec.Key.Templates {
		t, err := parseTemplate(src, allowed, false)
		if err != nil {
			errs = append(errs, fail(fmt.Sprintf("key.templates[%d]", i), "%v", err))
			continue
		}
		c.keyTmpls = append(c.keyTmpls, t)
	}
	for i, it := range c.spec.Key.Single {
		at := fmt.Sprintf("key.single[%d]", i)
		path, err := parsePath(it.Path)
		if err != nil {
			errs = append(errs, fail(at+".path", "%v", err))
			continue
		}
		if !slices.ContainsFunc(path, func(s step) bool { return s.wildcard }) {
			errs = append(errs, fail(at+".path", "%q selects one value: a single path selects items with [*], e.g. data[*]", it.Path))
			continue
		}
		if it.Key == "" {
			errs = append(errs, fail(at+".key", "missing: the item's key, e.g. \"{item:id}\""))
			continue
		}
		t, err := parseTemplate(it.Key, append(slices.Clone(allowed), "item"), false)
		if err != nil {
			errs = append(errs, fail(at+".key", "%v", err))
			continue
		}
		c.single = append(c.single, singleItem{path, t})
	}
	return errors.Join(errs...)
}

func (c *compiled) compileHandshakes(fail failFunc) error {
	var errs []error
	for i, h := range c.spec.Handshakes {
		ch, err := c.compileHandshake(fmt.Sprintf("handshakes[%d]", i), h, fail)
		errs = append(errs, err)
		c.handshake = append(c.handshake, ch)
	}
	return joinFlat(errs...)
}

// compileHandshake compiles the handshake h at field at, every problem of
// it joined in the error.
func (c *compiled) compileHandshake(at string, h Handshake, fail failFunc) (compiledHandshake, error) {
	var errs []error
	add := func(field, format string, args ...any) { errs = append(errs, fail(field, format, args...)) }
	allowed := []string{"method", "header", "query", "form", "json", "raw"}
	ch := compiledHandshake{h: h, match: map[string][]step{}}
	m := h.Match
	if m.Method == "" && len(m.Header) == 0 && len(m.Query) == 0 && len(m.JSON) == 0 {
		add(at+".match", "missing: what tells the handshake from a delivery (method, header, query or json)")
	}
	if m.Method != "" && (m.Method != strings.ToUpper(m.Method) || !validHeaderName(m.Method)) {
		add(at+".match.method", "%q is not a method (e.g. GET)", m.Method)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Header)) {
		if !validHeaderName(name) {
			add(at+".match.header."+name, "%q is not a header name", name)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(m.JSON)) {
		path, err := parsePath(p)
		if err == nil && slices.ContainsFunc(path, func(s step) bool { return s.wildcard }) {
			err = errors.New("[*] selects several values")
		}
		if err != nil {
			add(at+".match.json."+p, "%v", err)
			continue
		}
		ch.match[p] = path
	}
	if h.Unsigned && h.VerifyTokenFrom == "" {
		add(at+".unsigned", "an unsigned handshake needs verify_token_from and verify_token: anyone could send it")
	} else if (h.VerifyTokenFrom == "") != (h.VerifyToken == "") {
		field, missing := at+".verify_token", "verify_token (the token you gave the provider)"
		if h.VerifyTokenFrom == "" {
			field, missing = at+".verify_token_from", "verify_token_from (where the request carries it, e.g. \"{query:hub.verify_token}\")"
		}
		add(field, "missing: %s", missing)
	}
	var err error
	if h.VerifyTokenFrom != "" {
		if ch.tokenFrom, err = parseTemplate(h.VerifyTokenFrom, allowed, false); err != nil {
			add(at+".verify_token_from", "%v", err)
		}
	}
	for j, r := range h.Require {
		if r.Value == "" {
			add(fmt.Sprintf("%s.require[%d].value", at, j), "missing: the template that must be non-empty, e.g. \"{json:challenge}\"")
			continue
		}
		t, err := parseTemplate(r.Value, allowed, false)
		if err != nil {
			add(fmt.Sprintf("%s.require[%d].value", at, j), "%v", err)
			continue
		}
		ch.require = append(ch.require, t)
	}
	hmacOK := c.newHash != nil && !h.Unsigned
	if h.Answer.Body != "" && len(h.Answer.JSON) > 0 {
		add(at+".answer.json", "give the answer's body or json, not both")
	}
	if ch.answer, err = parseTemplate(h.Answer.Body, allowed, hmacOK); err != nil {
		add(at+".answer.body", "%v", err)
	} else {
		ch.usesHMAC = ch.answer.usesFilter("hmac")
	}
	if len(h.Answer.JSON) > 0 {
		if ch.answerJSON, err = compileJSON(map[string]any(h.Answer.JSON), at+".answer.json", func(v string) (*template, error) {
			t, err := parseTemplate(v, allowed, hmacOK)
			ch.usesHMAC = ch.usesHMAC || (err == nil && t.usesFilter("hmac"))
			return t, err
		}, fail); err != nil {
			errs = append(errs, err)
		}
	}
	if ch.refuse, err = parseTemplate(cmp.Or(h.Refuse.Body, c.s.name+": handshake refused"), allowed, false); err != nil {
		add(at+".refuse.body", "%v", err)
	}
	if len(h.Refuse.JSON) > 0 {
		add(at+".refuse.json", "a refusal is text: give refuse.body")
	}
	for _, a := range []struct {
		name string
		st   int
	}{{"answer", h.Answer.Status}, {"refuse", h.Refuse.Status}} {
		if a.st != 0 && (a.st < 100 || a.st > 599) {
			add(at+"."+a.name+".status", "%d is not an HTTP status", a.st)
		}
	}
	return ch, joinFlat(errs...)
}

// compileJSON returns v, a JSON answer's value at field at, with its
// strings parsed by parse; its other values are kept as they are, so a
// number stays a number. A value JSON can't write is refused.
func compileJSON(v any, at string, parse func(string) (*template, error), fail failFunc) (any, error) {
	switch v := v.(type) {
	case string:
		t, err := parse(v)
		if err != nil {
			return nil, fail(at, "%v", err)
		}
		return t, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			e, err := compileJSON(v[k], at+"."+k, parse, fail)
			if err != nil {
				return nil, err
			}
			out[k] = e
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			var err error
			if out[i], err = compileJSON(e, fmt.Sprintf("%s[%d]", at, i), parse, fail); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if _, err := json.Marshal(v); err != nil {
		return nil, fail(at, "%v can't be written as JSON (%T): want a string, number, boolean, null, list or mapping", v, v)
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct, reflect.Pointer:
		return nil, fail(at, "a %T: write a mapping as map[string]any and a list as []any, so that its strings are templates", v)
	}
	return v, nil
}

// renderJSON returns v, a compiled JSON answer, its templates rendered.
func renderJSON(v any, ctx *tctx) any {
	switch v := v.(type) {
	case *template:
		s, _ := v.render(ctx, false)
		return string(s)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = renderJSON(e, ctx)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = renderJSON(e, ctx)
		}
		return out
	}
	return v
}

func (c *compiled) compileAlternates(fail failFunc) error {
	a := c.spec.AlternateHeaders
	if a.WhenMissing == "" && len(a.Headers) == 0 {
		return nil
	}
	if a.WhenMissing == "" {
		return fail("alternate_headers.when_missing", "missing: the header whose absence switches to the alternates")
	}
	if _, ok := a.Headers[a.WhenMissing]; !ok {
		return fail("alternate_headers.headers", "has no alternate for %s (when_missing)", a.WhenMissing)
	}
	for k, v := range a.Headers {
		if !validHeaderName(k) || !validHeaderName(v) {
			return fail("alternate_headers.headers."+k, "%q: %q is not a pair of header names", k, v)
		}
	}
	return nil
}

// headerFunc returns how r's headers are read: under their alternate names
// when r lacks the WhenMissing header and carries its alternate.
func (c *compiled) headerFunc(r *http.Request) (get func(string) string, name func(string) string) {
	a := c.spec.AlternateHeaders
	name = func(h string) string { return h }
	if a.WhenMissing != "" && r.Header.Get(a.WhenMissing) == "" && r.Header.Get(alternate(a.Headers, a.WhenMissing)) != "" {
		name = func(h string) string { return alternate(a.Headers, h) }
	}
	return func(h string) string { return r.Header.Get(name(h)) }, name
}

// alternate returns the alternate name of header h, or h.
func alternate(m map[string]string, h string) string {
	for k, v := range m {
		if strings.EqualFold(k, h) {
			return v
		}
	}
	return h
}

// verify is the preset's Verify.
func (c *compiled) verify(r *http.Request, body []byte) error {
	if c.unsignedHandshake(r, body) {
		return nil // the handshake checks its verify token
	}
	_, err := c.signer(r, body)
	return err
}

// signer checks the request's signature and returns the index of the key
// that signed it.
func (c *compiled) signer(r *http.Request, body []byte) (int, error) {
	get, name := c.headerFunc(r)
	sig := &c.spec.Signature
	if c.alg == "token" {
		err := c.s.verifyToken(name(sig.Header), sig.Prefix)(r, body)
		return 0, err
	}
	// The headers the signed content needs, then the timestamp, the
	// signature, its age and the match, in the order of the Go presets.
	doc := newJSONDoc(body)
	for _, ph := range c.signed.required("header") {
		if get(ph.arg) == "" {
			return -1, c.s.fail(name(ph.arg), ErrMissingHeader, "")
		}
	}
	var ts string
	switch {
	case c.tsHeader != "":
		ts = get(c.tsHeader)
		if ts == "" {
			return -1, c.s.fail(name(c.tsHeader), ErrMissingHeader, "")
		}
		if _, ok := c.parseTS(ts); !ok {
			return -1, c.s.fail(name(c.tsHeader), ErrMalformedHeader, "want "+c.tsFormat())
		}
	case c.tsJSON != nil:
		ts = jsonScalar(doc.lookup(c.tsJSON))
		if _, ok := c.parseTS(ts); !ok {
			return -1, c.s.fail("", ErrMalformedBody, sig.Timestamp.JSON+": want "+c.tsFormat())
		}
	}
	for _, ph := range c.signed.required("json") {
		if v, _, _ := jsonString(doc.lookup(ph.path)); v == "" {
			return -1, c.s.fail("", ErrMalformedBody, ph.arg+": want a non-empty string")
		}
	}
	sigHeader := name(sig.Header)
	var sigs [][]byte
	switch {
	case c.sigJSON != nil:
		for i, path := range c.sigJSON {
			v, present, isString := jsonString(doc.lookup(path))
			if (present && !isString) || (i == 0 && v == "") {
				return -1, c.s.fail("", ErrMalformedBody, sig.JSON[i]+": want a signature string")
			}
			if v == "" {
				continue // an optional one
			}
			one, err := parseMAC(v, sig.Prefix, c.decode, c.size)
			if err != nil {
				return -1, c.s.fail("", ErrMalformedBody, fmt.Sprintf("%s: want \"%s<%s of a %s signature>\"", sig.JSON[i], sig.Prefix, cmp.Or(sig.Encoding, "hex"), c.alg))
			}
			sigs = append(sigs, one)
		}
	case c.pairs.sigKey != "":
		var err error
		var pts string
		pts, sigs, err = c.pairs.parse(get(sig.Header))
		if err != nil {
			return -1, c.s.fail(sigHeader, err, headerDetail(err, cmp.Or(c.malformed, c.pairs.format)))
		}
		if sig.TimestampKey != "" {
			ts = pts
		}
	default:
		one, err := parseMAC(get(sig.Header), sig.Prefix, c.decode, c.size)
		if err != nil {
			detail := c.malformed
			if detail == "" {
				detail = fmt.Sprintf("want \"%s<%s of a %s signature>\"", sig.Prefix, cmp.Or(sig.Encoding, "hex"), c.alg)
			}
			return -1, c.s.fail(sigHeader, err, headerDetail(err, detail))
		}
		sigs = [][]byte{one}
	}
	if c.checkAge {
		signed, _ := c.parseTS(ts)
		if err := c.s.checkAge(name(cmp.Or(c.tsHeader, sig.Header)), signed); err != nil {
			return -1, err
		}
	}
	ctx := &tctx{r: r, body: body, ts: ts, header: get, strict: true, doc: doc}
	if c.signed.uses("form_sorted") && len(body) > 0 && ctx.parsedForm() == nil {
		return -1, c.s.fail("", ErrMalformedBody, "want a form (application/x-www-form-urlencoded)")
	}
	urls := []string{""}
	if c.signed.uses("url") {
		urls = calledURLs(c.publicURL, r)
	}
	if c.checkAge {
		ctx.covers = c.coversTimestamp
	}
	for _, u := range urls {
		ctx.url = u
		msg, _ := c.signed.render(ctx, false)
		if c.checkAge && !ctx.covered {
			// Refused when the spec is compiled too; here on what this
			// request's signature actually covers.
			return -1, c.s.fail(name(cmp.Or(c.tsHeader, sig.Header)), ErrUnsignedTimestamp, "signature.signed left out the part that signs it")
		}
		if i := c.match(sigs, msg); i >= 0 {
			return i, nil
		}
	}
	return -1, c.s.fail(sigHeader, ErrNoMatchingSignature, "")
}

// coversTimestamp reports whether ph, rendered in full, signs the checked
// timestamp: {timestamp}; the header or body field it is read from; or,
// for a timestamp read from the body, {body}. A placeholder cut by
// |first:N signs only part of it, so it does not count.
func (c *compiled) coversTimestamp(ph *placeholder) bool {
	if slices.ContainsFunc(ph.filters, func(f filter) bool { return f.name == "first" }) {
		return false
	}
	switch ph.src {
	case "timestamp":
		return true
	case "header":
		return c.tsHeader != "" && strings.EqualFold(ph.arg, c.tsHeader)
	case "body":
		return c.tsJSON != nil
	case "json":
		return c.tsJSON != nil && slices.Equal(ph.path, c.tsJSON)
	}
	return false
}

// checkTimestampSigned refuses a signed template that does not always sign
// the checked timestamp: what the signature covers is what counts, so a
// placeholder in an optional part [...], left out when another of its
// placeholders is empty, does not.
func (c *compiled) checkTimestampSigned(fail failFunc) error {
	if slices.ContainsFunc(c.signed.parts, func(p tpart) bool { return p.ph != nil && c.coversTimestamp(p.ph) }) {
		return nil
	}
	how := "{timestamp}"
	if c.tsHeader != "" {
		how += " or {header:" + c.tsHeader + "}"
	}
	if c.tsJSON != nil {
		how += ", {body} or {json:" + c.spec.Signature.Timestamp.JSON + "}"
	}
	if c.signed.has(c.coversTimestamp) {
		return fail("signature.signed", "%q signs the timestamp only in an optional part [...], which is left out when another of its placeholders is empty: its age would prove nothing; sign %s outside [...]", c.signed.src, how)
	}
	return fail("signature.signed", "%q does not sign the timestamp (%s): its age would prove nothing", c.signed.src, how)
}

func (c *compiled) tsFormat() string {
	switch c.spec.Signature.Timestamp.Format {
	case "unix_ms":
		return "unix milliseconds"
	case "unix_s_or_ms":
		return "unix seconds or milliseconds"
	case "rfc3339":
		return "an RFC 3339 time"
	}
	return "unix seconds"
}

// match returns the index of the key that made one of sigs over msg, or
// -1.
func (c *compiled) match(sigs [][]byte, msg []byte) int {
	if c.newHash != nil {
		return matchMAC(c.keys, sigs, func(k []byte) []byte { return hmacSum(c.newHash, k, msg) })
	}
	for i, pub := range c.pubs {
		for _, sg := range sigs {
			switch pub := pub.(type) {
			case ed25519.PublicKey:
				if ed25519.Verify(pub, msg, sg) {
					return i
				}
			case *ecdsa.PublicKey:
				sum := sha256.Sum256(msg)
				if ecdsa.VerifyASN1(pub, sum[:], sg) || verifyRawECDSA(pub, sum[:], sg) {
					return i
				}
			}
		}
	}
	return -1
}

// verifyRawECDSA checks a signature written as r||s, each the curve's
// size (JWS's form), rather than ASN.1.
func verifyRawECDSA(pub *ecdsa.PublicKey, digest, sig []byte) bool {
	n := (pub.Curve.Params().BitSize + 7) / 8
	if len(sig) != 2*n {
		return false
	}
	der, err := asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(sig[:n]), new(big.Int).SetBytes(sig[n:])})
	return err == nil && ecdsa.VerifyASN1(pub, digest, der)
}

// key is the preset's Key.
func (c *compiled) key(r *http.Request, body []byte) (string, error) {
	get, _ := c.headerFunc(r)
	trimmed := func(h string) string { return strings.TrimSpace(get(h)) }
	doc := newJSONDoc(body)
	if len(c.single) > 0 {
		var items []json.RawMessage
		var which *template
		for _, it := range c.single {
			found := doc.selectPath(it.path)
			if len(found) > 0 {
				which = it.key
			}
			items = append(items, found...)
		}
		if len(items) == 1 {
			k, _ := which.render(&tctx{r: r, body: body, header: trimmed, item: items[0], doc: doc}, true)
			return string(k), nil
		}
	}
	for _, t := range c.keyTmpls {
		if k, ok := t.render(&tctx{r: r, body: body, header: trimmed, doc: doc}, true); ok {
			return string(k), nil
		}
	}
	return "", nil
}

// handshakeFor returns the handshake r is, or nil.
func (c *compiled) handshakeFor(r *http.Request, body []byte) *compiledHandshake {
	get, _ := c.headerFunc(r)
	doc := newJSONDoc(body)
	for i := range c.handshake {
		h := &c.handshake[i]
		m := h.h.Match
		if m.Method != "" && r.Method != m.Method {
			continue
		}
		ok := true
		for k, v := range m.Header {
			got := get(k)
			ok = ok && ((v == "*" && len(r.Header.Values(k)) > 0) || (v != "*" && got == v))
		}
		q := r.URL.Query()
		for k, v := range m.Query {
			ok = ok && ((v == "*" && q.Has(k)) || (v != "*" && q.Get(k) == v))
		}
		for p, v := range m.JSON {
			got := doc.lookup(h.match[p])
			ok = ok && got != nil && jsonScalar(got) == v
		}
		if ok {
			return h
		}
	}
	return nil
}

func (c *compiled) unsignedHandshake(r *http.Request, body []byte) bool {
	h := c.handshakeFor(r, body)
	return h != nil && h.h.Unsigned
}

// answerHandshake is the preset's Handshake.
func (c *compiled) answerHandshake(w http.ResponseWriter, r *http.Request, body []byte) bool {
	h := c.handshakeFor(r, body)
	if h == nil {
		return false
	}
	get, _ := c.headerFunc(r)
	ctx := &tctx{r: r, body: body, header: get}
	refuse := func() bool {
		msg, _ := h.refuse.render(ctx, false)
		http.Error(w, string(msg), cmp.Or(h.h.Refuse.Status, http.StatusBadRequest))
		return true
	}
	if h.tokenFrom != nil {
		got, _ := h.tokenFrom.render(ctx, false)
		if !anyToken([]string{h.h.VerifyToken}, string(got)) {
			return refuse()
		}
	}
	for i, t := range h.require {
		v, ok := t.render(ctx, true)
		if !ok || len(v) == 0 || (h.h.Require[i].Equals != "" && string(v) != h.h.Require[i].Equals) {
			return refuse()
		}
	}
	if h.usesHMAC {
		i, err := c.signer(r, body) // Verify passed: the secret the provider holds
		if err != nil {
			return refuse()
		}
		key := c.keys[i]
		ctx.hmac = func(msg []byte) []byte { return hmacSum(c.newHash, key, msg) }
	}
	var answer []byte
	ctype := cmp.Or(h.h.Answer.ContentType, "text/plain; charset=utf-8")
	if h.answerJSON != nil {
		answer, _ = json.Marshal(renderJSON(h.answerJSON, ctx))
		ctype = cmp.Or(h.h.Answer.ContentType, "application/json")
	} else {
		answer, _ = h.answer.render(ctx, false)
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(cmp.Or(h.h.Answer.Status, http.StatusOK))
	_, _ = w.Write(answer)
	return true
}
