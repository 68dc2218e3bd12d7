package provider_test

// Signed deliveries for every preset, computed here from each provider's
// documented algorithm (independently of the package's own code).

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
)

// baseTime is the tests' "now".
var baseTime = time.Unix(1_780_000_000, 0)

// fixture knows how one provider sends a delivery.
type fixture struct {
	name        string
	cfg         provider.Config // Secrets[0] is the secret that signs valid deliveries
	wrongSecret string          // a secret the preset does not know
	rotateWith  string          // another valid secret, listed before the signing one in rotation tests; default wrongSecret
	bodySigned  bool            // the signature covers the body (not for token headers, Mercado Pago)
	timestamped bool            // the scheme signs a timestamp (retries are re-signed)
	// sigHeader is the header "missing header" deletes and "malformed
	// header" replaces with malformed. It is "" when the scheme has none
	// (stone).
	sigHeader string
	malformed string
	// badReason is what a delivery signed with wrongSecret fails with.
	badReason error
	dupStatus int // the preset's DuplicateStatus
	// build returns event id's delivery sent at `at`, signed with secret.
	build func(t testing.TB, id string, at time.Time, secret string) *http.Request
	// key is the key Key must return for event id.
	key func(id string) string
}

func (f fixture) secret() string { return f.cfg.Secrets[0] }

// metaRequest is a POST of Meta's Graph webhooks (whatsapp-cloud,
// messenger, instagram): X-Hub-Signature-256, HMAC-SHA256 of the body with
// the App Secret.
func metaRequest(path, secret, body string) *http.Request {
	r := post(path, body)
	r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, body))
	return r
}

func hmacHex(secret string, parts ...string) string {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil))
}

func hmacB64(key []byte, parts ...string) string {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func post(target, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// swKey decodes a whsec_ secret as the Standard Webhooks spec says.
func swKey(t testing.TB, secret string) []byte {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("bad test secret %q: %v", secret, err)
	}
	return k
}

const (
	stdWebhooksSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the spec's test-vector secret
	otherSWSecret     = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
)

// fixtures returns one fixture per preset, in Names order.
func fixtures(t testing.TB) []fixture {
	stone := stoneKeys(t)
	return []fixture{
		{
			// The signature is in the body and covers eight of its fields,
			// not the body (so no "tampered body" case, and no header
			// cases); adyen_test.go tampers with the signed fields.
			name: "adyen", cfg: provider.Config{Secrets: []string{adyenTestKey}}, wrongSecret: adyenOtherKey,
			badReason: provider.ErrNoMatchingSignature, dupStatus: 200,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				return post("/adyen", adyenBody(t, secret, "7914"+digits(id)+" AUTHORISATION true"))
			},
			key: func(id string) string { return "7914" + digits(id) + ":AUTHORISATION:true" },
		},
		{
			name: "asaas", cfg: provider.Config{Secrets: []string{"asaas-token-1"}}, wrongSecret: "asaas-token-x",
			sigHeader: "asaas-access-token", malformed: "", badReason: provider.ErrTokenMismatch, dupStatus: 200,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				r := post("/asaas", `{"id":"evt_`+id+`&368604920","event":"PAYMENT_RECEIVED","payment":{"id":"pay_1"}}`)
				r.Header.Set("asaas-access-token", secret)
				return r
			},
			key: func(id string) string { return "evt_" + id + "&368604920" },
		},
		{
			name: "evolution", cfg: provider.Config{Secrets: []string{"evo-key"}}, wrongSecret: "evo-wrong",
			sigHeader: "apikey", malformed: "", badReason: provider.ErrTokenMismatch,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				r := post("/whatsapp", `{"event":"messages.upsert","instance":"shop","data":{"key":{"remoteJid":"5511999999999@s.whatsapp.net","fromMe":false,"id":"3EB0`+id+`"},"message":{"conversation":"oi"}},"date_time":"2026-01-01T10:00:00.000Z"}`)
				r.Header.Set("apikey", secret)
				return r
			},
			key: func(id string) string { return "messages.upsert:3EB0" + id },
		},
		{
			name: "github", bodySigned: true, cfg: provider.Config{Secrets: []string{"It's a Secret to Everybody"}}, wrongSecret: "not the secret",
			sigHeader: "X-Hub-Signature-256", malformed: "sha1=757107ea", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"zen":"Keep it logically awesome.","hook_id":42,"event":"` + id + `"}`
				r := post("/github", body)
				r.Header.Set("X-GitHub-Event", "ping")
				r.Header.Set("X-GitHub-Delivery", "d-"+id)
				r.Header.Set("X-GitHub-Hook-ID", "42")
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, body))
				return r
			},
			key: func(id string) string { return "42:d-" + id },
		},
		{
			// Behind the test server (127.0.0.1:port), so the URL HubSpot
			// called is the public_url option's. A retry carries the next
			// attemptNumber, as HubSpot's do: the body differs, the key not.
			name: "hubspot", bodySigned: true, cfg: provider.Config{Secrets: []string{"hubspot-client-secret"}, HubSpot: provider.HubSpotOptions{PublicURL: "https://hooks.example.com"}},
			wrongSecret: "another-client-secret", timestamped: true, sigHeader: provider.HubSpotSignatureV3Header, malformed: "not base64!",
			badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				attempt := "0"
				if !at.Before(baseTime) {
					attempt = "1"
				}
				body := `[{"eventId":1` + digits(id) + `,"subscriptionId":234567,"portalId":62515,"appId":54321,"occurredAt":1779999990000,"subscriptionType":"contact.creation","attemptNumber":` + attempt + `,"objectId":123,"changeSource":"CRM","changeFlag":"NEW"}]`
				return hubSpotRequest("https://hooks.example.com", "/hubspot?portal=62515", at, secret, body)
			},
			key: func(id string) string { return "234567:1" + digits(id) },
		},
		{
			name: "ifood", bodySigned: true, cfg: provider.Config{Secrets: []string{"ifood-client-secret"}}, wrongSecret: "homologation-bad",
			sigHeader: "X-IFood-Signature", malformed: "zz", badReason: provider.ErrNoMatchingSignature, dupStatus: 202,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"id":"` + id + `","code":"PLC","fullCode":"PLACED","orderId":"o-1","merchantId":"m-1"}`
				r := post("/ifood", body)
				r.Header.Set("X-IFood-Signature", hmacHex(secret, body))
				return r
			},
			key: func(id string) string { return id },
		},
		{
			name: "instagram", bodySigned: true, cfg: provider.Config{Secrets: []string{"meta-app-secret"}, Instagram: provider.InstagramOptions{VerifyToken: "vt-ig"}},
			wrongSecret: "other-app-secret", sigHeader: "X-Hub-Signature-256", malformed: "sha256=xyz", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				return metaRequest("/ig", secret, `{"object":"instagram","entry":[{"id":"17841400000000000","time":1780000000000,"messaging":[{"sender":{"id":"IGSID"},"recipient":{"id":"17841400000000000"},"timestamp":1780000000000,"message":{"mid":"aWdfbWlk`+id+`","text":"oi"}}]}]}`)
			},
			key: func(id string) string { return "aWdfbWlk" + id },
		},
		{
			// The signature is in the body and covers its timestamp and
			// token only, not event-data (so no "tampered body" case, and no
			// header cases). Tolerance 5m, not the preset's 9h default, so
			// that the shared stale and future cases apply.
			name: "mailgun", cfg: provider.Config{Secrets: []string{"key-mailgun-signing"}, Tolerance: 5 * time.Minute}, wrongSecret: "key-not-mailgun",
			timestamped: true, badReason: provider.ErrNoMatchingSignature, dupStatus: 200,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				token := "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0" + id + unix(at) // random per request
				body := `{"signature":{"timestamp":"` + unix(at) + `","token":"` + token + `","signature":"` + hmacHex(secret, unix(at)+token) + `"},` +
					`"event-data":{"event":"opened","timestamp":1529006854.329574,"id":"DACSsAdVSeGpLid7TN03WA` + id + `","recipient":"alice@example.com"}}`
				return post("/mailgun", body)
			},
			key: func(id string) string { return "DACSsAdVSeGpLid7TN03WA" + id },
		},
		{
			name: "mercadopago", cfg: provider.Config{Secrets: []string{"mp-secret-signature"}}, wrongSecret: "mp-wrong",
			sigHeader: "x-signature", malformed: "ts=abc,v1=00", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"id":1` + digits(id) + `,"live_mode":true,"type":"payment","action":"payment.updated","data":{"id":"999999999"}}`
				r := post("/mp?data.id=999999999&type=payment", body)
				reqID := "req-" + id + "-" + unix(at) // per request, like Mercado Pago's
				ts := unix(at)
				r.Header.Set("x-request-id", reqID)
				r.Header.Set("x-signature", "ts="+ts+",v1="+hmacHex(secret, "id:999999999;request-id:"+reqID+";ts:"+ts+";"))
				return r
			},
			key: func(id string) string { return "1" + digits(id) },
		},
		{
			name: "messenger", bodySigned: true, cfg: provider.Config{Secrets: []string{"meta-app-secret"}, Messenger: provider.MessengerOptions{VerifyToken: "vt-page"}},
			wrongSecret: "other-app-secret", sigHeader: "X-Hub-Signature-256", malformed: "sha256=xyz", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				return metaRequest("/messenger", secret, `{"object":"page","entry":[{"id":"PAGE-ID","time":1780000000000,"messaging":[{"sender":{"id":"PSID"},"recipient":{"id":"PAGE-ID"},"timestamp":1780000000000,"message":{"mid":"m_`+id+`","text":"hello"}}]}]}`)
			},
			key: func(id string) string { return "m_" + id },
		},
		{
			name: "paddle", bodySigned: true, cfg: provider.Config{Secrets: []string{"pdl_ntfset_01_secret"}}, wrongSecret: "pdl_ntfset_wrong",
			timestamped: true, sigHeader: "Paddle-Signature", malformed: "h1=abcd", badReason: provider.ErrNoMatchingSignature, dupStatus: 200,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"event_id":"evt_` + id + `","notification_id":"ntf_1","event_type":"subscription.created","data":{}}`
				r := post("/paddle", body)
				r.Header.Set("Paddle-Signature", "ts="+unix(at)+";h1="+hmacHex(secret, unix(at)+":"+body))
				return r
			},
			key: func(id string) string { return "evt_" + id },
		},
		{
			// Tolerance 5m, not the preset's 25h default, so that the shared
			// stale and future cases apply; sendgrid_test.go checks the
			// default. The "secrets" are public keys: build signs with the
			// private key of the one it is given.
			name: "sendgrid", bodySigned: true, cfg: provider.Config{Secrets: []string{sendGridTestKeys(t).public(0)}, Tolerance: 5 * time.Minute},
			wrongSecret: sendGridTestKeys(t).public(1), rotateWith: sendGridTestKeys(t).public(2), timestamped: true,
			sigHeader: provider.SendGridSignatureHeader, malformed: "not base64!", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `[{"email":"alice@example.com","timestamp":1779999990,"smtp-id":"<14c5d75ce93.dfd.64b469@ismtpd-555>","event":"delivered","sg_event_id":"sg_` + id + `","sg_message_id":"14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0","response":"250 OK"}]`
				return sendGridRequest(t, "/sendgrid", at, sendGridTestKeys(t).private(t, secret), body)
			},
			key: func(id string) string { return "sg_" + id },
		},
		{
			name: "shopify", bodySigned: true, cfg: provider.Config{Secrets: []string{"shpss_client_secret"}}, wrongSecret: "shpss_wrong",
			sigHeader: "X-Shopify-Hmac-Sha256", malformed: "not base64!", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"id":820982911946154508,"name":"#` + id + `","financial_status":"paid"}`
				r := post("/shopify", body)
				r.Header.Set("X-Shopify-Topic", "orders/create")
				r.Header.Set("X-Shopify-Webhook-Id", "b54557e4-"+id)
				r.Header.Set("X-Shopify-Event-Id", "ev-"+id)
				r.Header.Set("X-Shopify-Hmac-Sha256", hmacB64([]byte(secret), body))
				return r
			},
			key: func(id string) string { return "b54557e4-" + id },
		},
		{
			name: "slack", bodySigned: true, cfg: provider.Config{Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"}}, wrongSecret: "wrong-signing-secret",
			timestamped: true, sigHeader: "X-Slack-Signature", malformed: "v1=abc", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"token":"XXYYZZ","team_id":"T1","api_app_id":"A0MDYCDME","event":{"type":"app_mention","text":"hi"},"type":"event_callback","event_id":"Ev` + id + `","event_time":1780000000}`
				r := post("/slack", body)
				r.Header.Set("X-Slack-Request-Timestamp", unix(at))
				r.Header.Set("X-Slack-Signature", "v0="+hmacHex(secret, "v0:"+unix(at)+":"+body))
				return r
			},
			key: func(id string) string { return "A0MDYCDME:Ev" + id },
		},
		{
			name: "standardwebhooks", bodySigned: true, cfg: provider.Config{Secrets: []string{stdWebhooksSecret}}, wrongSecret: otherSWSecret,
			timestamped: true, sigHeader: "webhook-signature", malformed: "v1", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"` + id + `"}}`
				r := post("/sw", body)
				r.Header.Set("webhook-id", "msg_"+id)
				r.Header.Set("webhook-timestamp", unix(at))
				r.Header.Set("webhook-signature", "v1,"+hmacB64(swKey(t, secret), "msg_"+id+"."+unix(at)+"."+body))
				return r
			},
			key: func(id string) string { return "msg_" + id },
		},
		{
			name: "stone", cfg: provider.Config{Secrets: []string{stone.ourPEM}, Stone: provider.StoneOptions{JWKS: stone.jwks}},
			wrongSecret: stoneForged, rotateWith: stone.otherPEM, bodySigned: true, sigHeader: "", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				claims := `{"env":"sandbox","event_type":"cash_in_internal_transfer","iat":` + unix(at) + `,"jti":"` + id + `-` + unix(at) + `","id":null,"target_data":{"id":"` + id + `","amount":1,"status":"FINISHED"},"target_type":"internal_transfer"}`
				signer, kid := stone.stonePriv, stone.kid
				if secret == stoneForged {
					signer, kid = stone.forger, stone.kid // claims Stone's kid, signed by someone else
				}
				jwe := stoneJWE(t, stoneJWS(t, signer, kid, claims), &stone.ourPriv.PublicKey)
				r := post("/stone", `{"encrypted_body":"`+jwe+`"}`)
				r.Header.Set("x-stone-webhook-event-id", "7b1f3c2e-"+id)
				r.Header.Set("x-stone-webhook-event-type", "cash_in_internal_transfer")
				return r
			},
			key: func(id string) string { return "7b1f3c2e-" + id },
		},
		{
			name: "stripe", bodySigned: true, cfg: provider.Config{Secrets: []string{"whsec_test_stripe"}}, wrongSecret: "whsec_wrong",
			timestamped: true, sigHeader: "Stripe-Signature", malformed: "v1=abc", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"id":"evt_` + id + `","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`
				r := post("/stripe", body)
				r.Header.Set("Stripe-Signature", "t="+unix(at)+",v1="+hmacHex(secret, unix(at)+"."+body)+",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39")
				return r
			},
			key: func(id string) string { return "evt_" + id },
		},
		{
			name: "svix", bodySigned: true, cfg: provider.Config{Secrets: []string{stdWebhooksSecret}}, wrongSecret: otherSWSecret,
			timestamped: true, sigHeader: "svix-signature", malformed: "v1,***", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"type":"email.sent","data":{"email_id":"` + id + `"}}`
				r := post("/svix", body)
				r.Header.Set("svix-id", "msg_"+id)
				r.Header.Set("svix-timestamp", unix(at))
				r.Header.Set("svix-signature", "v1,"+hmacB64(swKey(t, secret), "msg_"+id+"."+unix(at)+"."+body))
				return r
			},
			key: func(id string) string { return "msg_" + id },
		},
		{
			// Behind the test server (127.0.0.1:port), so the URL Twilio
			// called is the public_url option's.
			name: "twilio", bodySigned: true, cfg: provider.Config{Secrets: []string{"twilio-auth-token"}, Twilio: provider.TwilioOptions{PublicURL: "https://hooks.example.com"}},
			wrongSecret: "another-auth-token", sigHeader: "X-Twilio-Signature", malformed: "not base64!", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				return twilioRequest("https://hooks.example.com", "/twilio/status?tenant=acme", secret, map[string]string{
					"MessageSid": "SM" + id, "SmsSid": "SM" + id, "MessageStatus": "delivered", "SmsStatus": "delivered",
					"To": "+5511988887777", "From": "+5511999990000", "AccountSid": "AC0123", "ErrorCode": "",
				})
			},
			key: func(id string) string { return "SM" + id + ":delivered" },
		},
		{
			// Tolerance 5m, not Twitch's 10m default, so that the shared
			// stale and future cases (6 minutes off) apply; twitch_test.go
			// checks the default.
			name: "twitch", bodySigned: true, cfg: provider.Config{Secrets: []string{"twitch-eventsub-secret"}, Tolerance: 5 * time.Minute}, wrongSecret: "not-the-subscription-secret",
			timestamped: true, sigHeader: "Twitch-Eventsub-Message-Signature", malformed: "sha1=abcd", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","type":"channel.follow","version":"2","status":"enabled","cost":0},"event":{"user_id":"1234` + id + `","user_login":"cool_user","broadcaster_user_id":"1337","followed_at":"2026-11-30T10:00:00.000Z"}}`
				return twitchRequest("/twitch", "e76c6bd4-55c9-4987-8304-da1588d8988"+id, "notification", at, secret, body)
			},
			key: func(id string) string { return "e76c6bd4-55c9-4987-8304-da1588d8988" + id },
		},
		{
			name: "whatsapp-cloud", bodySigned: true, cfg: provider.Config{Secrets: []string{"meta-app-secret"}, WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "vt-123"}},
			wrongSecret: "other-app-secret", sigHeader: "X-Hub-Signature-256", malformed: "sha256=xyz", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"object":"whatsapp_business_account","entry":[{"id":"WABA","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"phone_number_id":"1"},"messages":[{"from":"5511","id":"wamid.` + id + `","timestamp":"1780000000","type":"text","text":{"body":"oi"}}]}}]}]}`
				r := post("/wa", body)
				r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, body))
				return r
			},
			key: func(id string) string { return "wamid." + id },
		},
		{
			// Tolerance 5m, not the preset's 2h default, so that the shared
			// stale and future cases (6 minutes off) apply; zoom_test.go
			// checks the default.
			name: "zoom", bodySigned: true, cfg: provider.Config{Secrets: []string{"zoom-secret-token"}, Tolerance: 5 * time.Minute}, wrongSecret: "zoom-other-token",
			timestamped: true, sigHeader: "x-zm-signature", malformed: "v0=zz", badReason: provider.ErrNoMatchingSignature,
			build: func(t testing.TB, id string, at time.Time, secret string) *http.Request {
				body := `{"event":"meeting.started","event_ts":1780000000` + digits(id)[:3] + `,"payload":{"account_id":"AAAAAABBBB","object":{"id":"1234567890","uuid":"4444AAAiAAAAAiAiAiiAii==","host_id":"x1yCzABCDEfg123HIJKLMN","topic":"My Meeting","type":2}}}`
				return zoomRequest("/zoom", at, secret, body)
			},
			key: func(id string) string {
				payload := `{"account_id":"AAAAAABBBB","object":{"id":"1234567890","uuid":"4444AAAiAAAAAiAiAiiAii==","host_id":"x1yCzABCDEfg123HIJKLMN","topic":"My Meeting","type":2}}`
				sum := sha256.Sum256([]byte(payload))
				return "meeting.started:1780000000" + digits(id)[:3] + ":" + hex.EncodeToString(sum[:16])
			},
		},
	}
}

// twilioRequest is a Twilio webhook to target (a path and query) of the
// server whose public URL is public, its form signed as Twilio's docs say:
// base64 HMAC-SHA1(Auth Token, URL + each parameter's name and value,
// sorted by name).
func twilioRequest(public, target, secret string, form map[string]string) *http.Request {
	values := url.Values{}
	var names []string
	for k, v := range form {
		values.Set(k, v)
		names = append(names, k)
	}
	sort.Strings(names)
	signed := public + target
	for _, k := range names {
		signed += k + form[k]
	}
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(signed))
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(values.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("X-Twilio-Signature", base64.StdEncoding.EncodeToString(m.Sum(nil)))
	return r
}

// hubSpotRequest is a HubSpot webhook to target (a path and query) of the
// server whose public URL is public, sent at `at` and signed as HubSpot's
// docs say for v3: base64 HMAC-SHA256(client secret, method + URL + body +
// timestamp in milliseconds).
func hubSpotRequest(public, target string, at time.Time, secret, body string) *http.Request {
	ts := strconv.FormatInt(at.UnixMilli(), 10)
	r := post(target, body)
	r.Header.Set("X-HubSpot-Request-Timestamp", ts)
	r.Header.Set("X-HubSpot-Signature-v3", hmacB64([]byte(secret), http.MethodPost+public+target+body+ts))
	r.Header.Set("X-HubSpot-Signature-Version", "v3")
	return r
}

// sendGridKeySet holds the ECDSA P-256 keys of the SendGrid fixtures.
type sendGridKeySet struct{ keys [3]*ecdsa.PrivateKey }

var sendGridKeysOnce = sync.OnceValues(func() (*sendGridKeySet, error) {
	var s sendGridKeySet
	for i := range s.keys {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		s.keys[i] = k
	}
	return &s, nil
})

func sendGridTestKeys(t testing.TB) *sendGridKeySet {
	s, err := sendGridKeysOnce()
	if err != nil {
		t.Fatalf("generate SendGrid test keys: %v", err)
	}
	return s
}

// public is key i's verification key as SendGrid's settings show it: the
// base64 of its SubjectPublicKeyInfo DER.
func (s *sendGridKeySet) public(i int) string {
	der, err := x509.MarshalPKIXPublicKey(&s.keys[i].PublicKey)
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}

// private returns the private key of the verification key pub.
func (s *sendGridKeySet) private(t testing.TB, pub string) *ecdsa.PrivateKey {
	for i := range s.keys {
		if s.public(i) == pub {
			return s.keys[i]
		}
	}
	t.Fatalf("no SendGrid test key for %q", pub)
	return nil
}

// sendGridRequest is a SendGrid Event Webhook POST sent at `at`, signed as
// SendGrid's docs say: base64 DER ECDSA over SHA-256(timestamp + body).
func sendGridRequest(t testing.TB, target string, at time.Time, key *ecdsa.PrivateKey, body string) *http.Request {
	sum := sha256.Sum256([]byte(unix(at) + body))
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	r := post(target, body)
	r.Header.Set("X-Twilio-Email-Event-Webhook-Timestamp", unix(at))
	r.Header.Set("X-Twilio-Email-Event-Webhook-Signature", base64.StdEncoding.EncodeToString(sig))
	return r
}

// zoomRequest is a Zoom webhook sent at `at`, signed as Zoom's docs say:
// "v0=" + hex HMAC-SHA256(secret token, "v0:<timestamp>:<body>").
func zoomRequest(target string, at time.Time, secret, body string) *http.Request {
	r := post(target, body)
	r.Header.Set("x-zm-request-timestamp", unix(at))
	r.Header.Set("x-zm-signature", "v0="+hmacHex(secret, "v0:"+unix(at)+":"+body))
	r.Header.Set("x-zm-trackingid", "v=2.0;clid=us06;rid=WEB_"+unix(at))
	return r
}

// twitchRequest is a Twitch EventSub message of type typ, signed as Twitch's
// docs say: "sha256=" + hex HMAC-SHA256(secret, id + timestamp + body).
func twitchRequest(target, id, typ string, at time.Time, secret, body string) *http.Request {
	ts := at.UTC().Format(time.RFC3339Nano)
	r := post(target, body)
	r.Header.Set("Twitch-Eventsub-Message-Id", id)
	r.Header.Set("Twitch-Eventsub-Message-Retry", "0")
	r.Header.Set("Twitch-Eventsub-Message-Type", typ)
	r.Header.Set("Twitch-Eventsub-Message-Timestamp", ts)
	r.Header.Set("Twitch-Eventsub-Subscription-Type", "channel.follow")
	r.Header.Set("Twitch-Eventsub-Message-Signature", "sha256="+hmacHex(secret, id+ts+body))
	return r
}

// digits maps an id to decimal digits (three per byte, so distinct ids stay
// distinct), for Mercado Pago's numeric notification ids.
func digits(id string) string {
	var b strings.Builder
	for _, c := range []byte(id) {
		fmt.Fprintf(&b, "%03d", c)
	}
	return b.String()
}

// stoneForged marks a Stone delivery whose JWS is signed by a key that is
// not Stone's.
const stoneForged = "forged"

// stoneKeySet holds the RSA keys of the Stone fixtures.
type stoneKeySet struct {
	ourPriv   *rsa.PrivateKey // the application's key: Stone encrypts to it
	ourPEM    string
	otherPEM  string // another application key, for rotation
	stonePriv *rsa.PrivateKey
	kid       string
	jwks      string
	stonePEM  string // Stone's public key as PEM
	forger    *rsa.PrivateKey
}

var stoneKeysOnce = sync.OnceValues(func() (*stoneKeySet, error) {
	var keys [4]*rsa.PrivateKey
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	s := &stoneKeySet{ourPriv: keys[0], stonePriv: keys[1], forger: keys[2], kid: "stone-sig-2026"}
	s.ourPEM = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(keys[0])}))
	p8, err := x509.MarshalPKCS8PrivateKey(keys[3])
	if err != nil {
		return nil, err
	}
	s.otherPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}))
	pub := &keys[1].PublicKey
	s.jwks = fmt.Sprintf(`{"keys":[{"kty":"RSA","use":"enc","kid":"enc-1","n":"AQAB","e":"AQAB"},{"kty":"RSA","use":"sig","alg":"RS256","kid":%q,"n":%q,"e":%q}]}`,
		s.kid, base64.RawURLEncoding.EncodeToString(pub.N.Bytes()), base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()))
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	s.stonePEM = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	return s, nil
})

func stoneKeys(t testing.TB) *stoneKeySet {
	s, err := stoneKeysOnce()
	if err != nil {
		t.Fatalf("generate Stone test keys: %v", err)
	}
	return s
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// stoneJWS signs claims as a compact RS256 JWS (RFC 7515).
func stoneJWS(t testing.TB, key *rsa.PrivateKey, kid, claims string) string {
	input := b64u([]byte(`{"alg":"RS256","typ":"JWT","kid":"`+kid+`"}`)) + "." + b64u([]byte(claims))
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatalf("sign JWS: %v", err)
	}
	return input + "." + b64u(sig)
}

// stoneJWE encrypts plaintext to pub as a compact RSA-OAEP-256 / A256GCM
// JWE (RFC 7516), with a fresh content key and IV each time, as a JWE
// encryptor does.
func stoneJWE(t testing.TB, jws string, pub *rsa.PublicKey) string {
	cek := make([]byte, 32)
	iv := make([]byte, 12)
	rand.Read(cek)
	rand.Read(iv)
	encKey, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, pub, cek, nil)
	if err != nil {
		t.Fatalf("encrypt CEK: %v", err)
	}
	header := b64u([]byte(`{"alg":"RSA-OAEP-256","enc":"A256GCM","cty":"JWT"}`))
	block, _ := aes.NewCipher(cek)
	gcm, _ := cipher.NewGCM(block)
	sealed := gcm.Seal(nil, iv, []byte(jws), []byte(header))
	ct, tag := sealed[:len(sealed)-16], sealed[len(sealed)-16:]
	return strings.Join([]string{header, b64u(encKey), b64u(iv), b64u(ct), b64u(tag)}, ".")
}

// readBody returns r's body and puts it back.
func readBody(t testing.TB, r *http.Request) []byte {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// nodeVector is a request of testdata/provider-vectors.json, made by
// testdata/node/vectors.js with the provider's SDK or its documented sample
// code (see the script).
type nodeVector struct {
	Name    string            `json:"name"`
	Secret  string            `json:"secret"`
	Now     int64             `json:"now"` // when it was signed, unix seconds
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Key     string            `json:"key"`    // what the preset's Key must give
	Forged  bool              `json:"forged"` // signed with another secret than Secret
	Answer  string            `json:"answer"` // a handshake's answer, by the provider's SDK
}

// nodeVectors returns the vectors of one provider, failing when there are
// none (a test over no vectors could not fail).
func nodeVectors(t *testing.T, name string) []nodeVector {
	t.Helper()
	data, err := os.ReadFile("testdata/provider-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var all map[string][]nodeVector
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatalf("testdata/provider-vectors.json: %v", err)
	}
	if len(all[name]) == 0 {
		t.Fatalf("testdata/provider-vectors.json has no vector for %s", name)
	}
	return all[name]
}

// request is the vector as the receiving server sees it. httptest.NewRequest
// takes the URL's host as Host and sets TLS for https, as a server that
// terminates TLS itself does.
func (v nodeVector) request(body string) *http.Request {
	r := httptest.NewRequest(v.Method, v.URL, strings.NewReader(body))
	for k, val := range v.Headers {
		r.Header.Set(k, val)
	}
	return r
}

// checkNodeVector builds the preset name with v's secret and clock and
// verifies v's request: a forged vector must fail with no matching
// signature (and checkNodeVector then reports false: nothing more to
// check), any other must pass and, where the vector names one, give its
// key. It returns the preset for the caller's further checks.
func checkNodeVector(t *testing.T, name string, v nodeVector) (*idemhook.Preset, bool) {
	t.Helper()
	p := newPreset(t, name, provider.Config{Secrets: []string{v.Secret}}, time.Unix(v.Now, 0))
	err := verify(t, p, v.request(v.Body))
	if v.Forged {
		if !errors.Is(err, provider.ErrNoMatchingSignature) {
			t.Fatalf("forged vector: Verify = %v", err)
		}
		return p, false
	}
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if k, _ := p.Key(v.request(v.Body), []byte(v.Body)); v.Key != "" && k != v.Key {
		t.Fatalf("key %q, want %q", k, v.Key)
	}
	return p, true
}
