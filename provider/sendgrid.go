package provider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// The headers of SendGrid's signed Event Webhook.
const (
	SendGridSignatureHeader = "X-Twilio-Email-Event-Webhook-Signature"
	SendGridTimestampHeader = "X-Twilio-Email-Event-Webhook-Timestamp"
)

// sendGridTolerance is the sendgrid preset's default tolerance: SendGrid's
// retry window (events are retried for up to 24 hours) and an hour, because
// SendGrid does not say whether a retry is signed again with a new
// timestamp, and its own library (@sendgrid/eventwebhook) checks no age. A
// replay inside it is stopped by the key store (the default TTL is 2 days),
// one after it by the tolerance.
const sendGridTolerance = sendGridRetryWindow + time.Hour

// SendGridOptions are the settings of the sendgrid preset.
type SendGridOptions struct {
	// PublicKey is one verification key (option public_key), as
	// SendGrid's Mail Settings show it: the base64 of the DER of an ECDSA
	// P-256 public key, or the same in a PEM block. It is accepted beside
	// the keys of Config.Secrets, and stands in for them: a sendgrid
	// preset needs a key in one of the two. Default: "", the keys are
	// Config.Secrets.
	PublicKey string
}

// Go, not a spec: its keys are ECDSA P-256 only, refused in its own words, and
// may come from the public_key option; it takes ASN.1 signatures only, where
// a spec's ecdsa-sha256 also takes r||s; and it has Items.

// SendGrid returns the preset for SendGrid's signed Event Webhook (the
// JSON array of delivery and engagement events: processed, delivered,
// open, click, bounce...).
//
// Secrets: the webhook's verification keys, as SendGrid's settings show
// them (the base64 of an ECDSA P-256 public key in DER; a PEM block is
// taken too), several during a rotation: a request passes if it verifies
// with any. They are public keys, not secrets, but they are configured
// where the secrets are, so that a rotation is the same edit and reload;
// SendGridOptions.PublicKey (option public_key) gives one more, or the
// only one. A key that is not an ECDSA P-256 public key is a
// [*SecretError] (an *OptionError for public_key).
//
// Verify: X-Twilio-Email-Event-Webhook-Signature is the base64 of an
// ASN.1 DER ECDSA signature over SHA-256(X-Twilio-Email-Event-Webhook-
// Timestamp + raw body), as @sendgrid/eventwebhook's verifySignature
// checks it. The timestamp (unix seconds) must be within cfg.Tolerance of
// now, in either direction; default 25 hours (see sendGridTolerance).
//
// Key: the sg_event_id of a body holding one event (without one, the
// SHA-256 of the event's canonical JSON, as Items keys it:
// [idemhook.Items.OneItemKey]). A batch of several
// events is keyed by its body hash: SendGrid retries the whole POST and
// does not promise the same grouping on a retry, so Items (a "[*]" path
// keyed by sg_event_id) has each event claimed on its own when the route
// runs items.
//
// Duplicates: the stored status (SendGrid counts any 2xx). Options:
// SendGridOptions.
func SendGrid(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("sendgrid")
	if err != nil {
		return nil, err
	}
	if cfg.Tolerance == 0 {
		s.tolerance = sendGridTolerance
	}
	var keys []*ecdsa.PublicKey
	for i, sec := range cfg.Secrets {
		if sec == "" {
			continue
		}
		k, err := parseSendGridKey(sec)
		if err != nil {
			return nil, &SecretError{Preset: "sendgrid", Index: i, Reason: err.Error()}
		}
		keys = append(keys, k)
	}
	if cfg.SendGrid.PublicKey != "" {
		k, err := parseSendGridKey(cfg.SendGrid.PublicKey)
		if err != nil {
			return nil, &OptionError{Preset: "sendgrid", Option: "public_key", Reason: err.Error()}
		}
		keys = append(keys, k)
	}
	items := &idemhook.Items{Paths: []idemhook.ItemPath{{Path: "[*]", Key: "sg_event_id"}}}
	return &idemhook.Preset{
		Name:        "sendgrid",
		RetryWindow: sendGridRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			return s.verifySendGrid(keys, r, body)
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return items.OneItemKey(body), nil
		},
		Items: items,
	}, nil
}

// parseSendGridKey reads a verification key: base64 DER (SubjectPublicKeyInfo),
// or PEM, of an ECDSA P-256 public key.
func parseSendGridKey(v string) (*ecdsa.PublicKey, error) {
	v = strings.TrimSpace(v)
	var der []byte
	if block, _ := pem.Decode([]byte(v)); block != nil {
		der = block.Bytes
	} else {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("is not a verification key: want the base64 public key SendGrid's Mail Settings show (signed event webhook)")
		}
		der = b
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("is not a public key: want the base64 public key SendGrid's Mail Settings show (signed event webhook)")
	}
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("is not an ECDSA P-256 public key, which SendGrid's signed event webhook uses")
	}
	return k, nil
}

// verifySendGrid checks the timestamp and the ECDSA signature.
func (s settings) verifySendGrid(keys []*ecdsa.PublicKey, r *http.Request, body []byte) error {
	ts := strings.TrimSpace(r.Header.Get(SendGridTimestampHeader))
	if ts == "" {
		return s.fail(SendGridTimestampHeader, ErrMissingHeader, "")
	}
	signed, ok := parseUnix(ts)
	if !ok {
		return s.fail(SendGridTimestampHeader, ErrMalformedHeader, "want unix seconds")
	}
	v := strings.TrimSpace(r.Header.Get(SendGridSignatureHeader))
	if v == "" {
		return s.fail(SendGridSignatureHeader, ErrMissingHeader, "")
	}
	// Only what is not base64 is malformed: bytes that are no DER
	// signature fail to verify, as they do for a provider described by a
	// provider.Spec, which does not know the shape of its signatures.
	sig, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(sig) == 0 {
		return s.fail(SendGridSignatureHeader, ErrMalformedHeader, "want the base64 of a DER ECDSA signature")
	}
	if err := s.checkAge(SendGridTimestampHeader, signed); err != nil {
		return err
	}
	h := sha256.New()
	h.Write([]byte(ts))
	h.Write(body)
	digest := h.Sum(nil)
	for _, k := range keys {
		if ecdsa.VerifyASN1(k, digest, sig) {
			return nil
		}
	}
	return s.fail(SendGridSignatureHeader, ErrNoMatchingSignature, "")
}
