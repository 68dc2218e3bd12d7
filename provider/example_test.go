package provider_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/idemhook/idemhook/provider"
)

// sign returns hex(HMAC-SHA256(secret, msg)).
func sign(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// A custom preset is a plain idemhook.Preset value: here for a provider
// "acme" that signs the body in X-Acme-Signature and names the event in
// X-Acme-Event-Id, and wants exactly 200 on a duplicate.
func Example_customPreset() {
	const secret = "acme-secret"
	acme := &idemhook.Preset{
		Name: "acme",
		Verify: func(r *http.Request, body []byte) error {
			got, err := hex.DecodeString(strings.TrimPrefix(r.Header.Get("X-Acme-Signature"), "sha256="))
			if err != nil || len(got) == 0 {
				return errors.New("acme: header X-Acme-Signature: missing or malformed")
			}
			m := hmac.New(sha256.New, []byte(secret))
			m.Write(body)
			if !hmac.Equal(got, m.Sum(nil)) {
				return errors.New("acme: header X-Acme-Signature: no matching signature")
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return r.Header.Get("X-Acme-Event-Id"), nil // "" would mean the body hash
		},
		DuplicateStatus: http.StatusOK,
	}

	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	route, _ := mw.Route(idemhook.Route{Source: "acme", Preset: acme})
	runs := 0
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusAccepted)
	}))

	deliver := func(event, body, sig string) {
		r := httptest.NewRequest(http.MethodPost, "/acme", strings.NewReader(body))
		r.Header.Set("X-Acme-Event-Id", event)
		r.Header.Set("X-Acme-Signature", "sha256="+sig)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(event, w.Code, "replayed:", w.Header().Get("Idempotent-Replayed") == "true", "runs:", runs)
	}
	body := `{"order":42}`
	deliver("ev-1", body, sign(secret, body))  // first delivery
	deliver("ev-1", body, sign(secret, body))  // the provider's retry
	deliver("ev-2", body, sign("guess", body)) // forged: 401, nothing claimed
	deliver("ev-2", body, sign(secret, body))  // the real ev-2
	// Output:
	// ev-1 202 replayed: false runs: 1
	// ev-1 200 replayed: true runs: 1
	// ev-2 401 replayed: false runs: 1
	// ev-2 202 replayed: false runs: 2
}

// New builds a preset by name, as the gateway does for `provider: NAME`.
func ExampleNew() {
	now := time.Unix(1_780_000_000, 0)
	p, err := provider.New("stripe", provider.Config{
		Secrets: []string{"whsec_old", "whsec_new"}, // both accepted during a rotation
		Now:     func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	body := []byte(`{"id":"evt_1NnfJm2eZvKYlo2C","object":"event","type":"invoice.paid"}`)
	r := httptest.NewRequest(http.MethodPost, "/stripe", nil)
	r.Header.Set("Stripe-Signature", "t=1780000000,v1="+sign("whsec_new", "1780000000."+string(body)))
	key, _ := p.Key(r, body)
	fmt.Println(p.Name, p.Verify(r, body), key)

	// A delivery signed 10 minutes ago.
	r.Header.Set("Stripe-Signature", "t=1779999400,v1="+sign("whsec_new", "1779999400."+string(body)))
	fmt.Println(p.Verify(r, body))
	// Output:
	// stripe <nil> evt_1NnfJm2eZvKYlo2C
	// stripe: header Stripe-Signature: timestamp outside tolerance (signed 10m0s ago, tolerance 5m0s)
}

// An unknown name, or a missing secret, is an error at start.
func ExampleNew_errors() {
	_, err := provider.New("paypal", provider.Config{Secrets: []string{"s"}})
	fmt.Println(err)
	_, err = provider.New("ifood", provider.Config{})
	fmt.Println(err)
	// Output:
	// provider: unknown provider "paypal" (known: adyen, asaas, evolution, github, hubspot, ifood, instagram, mailgun, mercadopago, messenger, paddle, sendgrid, shopify, slack, standardwebhooks, stone, stripe, svix, twilio, twitch, whatsapp-cloud, zoom)
	// provider ifood: no secret configured (Config.Secrets is empty); set the provider's signing secret or token
}

// The Stripe preset on a route: Stripe's retry is signed with a new
// timestamp, yet the handler runs once.
func ExampleStripe() {
	now := time.Unix(1_780_000_000, 0)
	preset, _ := provider.Stripe(provider.Config{Secrets: []string{"whsec_test"}, Now: func() time.Time { return now }})
	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{})
	route, _ := mw.Route(idemhook.Route{Source: "stripe", Preset: preset})
	runs := 0
	h := route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ }))

	body := `{"id":"evt_1","type":"invoice.paid"}`
	for _, t := range []string{"1779999900", "1780000000"} { // first attempt, retry
		r := httptest.NewRequest(http.MethodPost, "/stripe", strings.NewReader(body))
		r.Header.Set("Stripe-Signature", "t="+t+",v1="+sign("whsec_test", t+"."+body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), runs)
	}
	// Output:
	// 200  1
	// 200 true 1
}

// GitHub's published test vector.
func ExampleGitHub() {
	p, _ := provider.GitHub(provider.Config{Secrets: []string{"It's a Secret to Everybody"}})
	r := httptest.NewRequest(http.MethodPost, "/github", nil)
	r.Header.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	r.Header.Set("X-GitHub-Hook-ID", "42")
	r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	key, _ := p.Key(r, nil)
	fmt.Println(p.Verify(r, []byte("Hello, World!")), key)
	// Output: <nil> 42:72d3162e-cc78-11e3-81ab-4c9367dc0958
}

// The Standard Webhooks reference libraries' test vector.
func ExampleStandardWebhooks() {
	p, _ := provider.StandardWebhooks(provider.Config{
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		Now:     func() time.Time { return time.Unix(1614265330, 0) },
	})
	r := httptest.NewRequest(http.MethodPost, "/hooks", nil)
	r.Header.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	r.Header.Set("webhook-timestamp", "1614265330")
	r.Header.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key)
	// Output: <nil> msg_p5jXN8AQM9LWM0D4loKWxJek
}

// Svix sends the Standard Webhooks scheme under svix-* headers.
func ExampleSvix() {
	p, _ := provider.Svix(provider.Config{
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		Now:     func() time.Time { return time.Unix(1614265330, 0) },
	})
	r := httptest.NewRequest(http.MethodPost, "/svix", nil)
	r.Header.Set("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	r.Header.Set("svix-timestamp", "1614265330")
	r.Header.Set("svix-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	fmt.Println(p.Verify(r, []byte(`{"test": 2432232314}`)))
	r.Header.Del("svix-timestamp")
	fmt.Println(p.Verify(r, []byte(`{"test": 2432232314}`)))
	// Output:
	// <nil>
	// svix: header svix-timestamp: missing header
}

// Slack: the url_verification challenge is answered by the preset.
func ExampleSlack() {
	now := time.Unix(1_780_000_000, 0)
	p, _ := provider.Slack(provider.Config{Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"}, Now: func() time.Time { return now }})
	body := []byte(`{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	r := httptest.NewRequest(http.MethodPost, "/slack/events", nil)
	r.Header.Set("X-Slack-Request-Timestamp", "1780000000")
	r.Header.Set("X-Slack-Signature", "v0="+sign("8f742231b10e8888abcd99yyyzzz85a5", "v0:1780000000:"+string(body)))
	w := httptest.NewRecorder()
	fmt.Println(p.Verify(r, body), p.Handshake(w, r, body), w.Code, w.Body)
	// Output: <nil> true 200 3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P
}

// WhatsApp Cloud: Meta's GET subscription challenge.
func ExampleWhatsAppCloud() {
	p, _ := provider.WhatsAppCloud(provider.Config{
		Secrets:       []string{"app-secret"},
		WhatsAppCloud: provider.WhatsAppCloudOptions{VerifyToken: "my-verify-token"},
	})
	for _, token := range []string{"my-verify-token", "guess"} {
		r := httptest.NewRequest(http.MethodGet, "/whatsapp?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token="+token, nil)
		w := httptest.NewRecorder()
		fmt.Println(p.Verify(r, nil), p.Handshake(w, r, nil), w.Code)
	}
	body := []byte(`{"entry":[{"changes":[{"value":{"statuses":[{"id":"wamid.HBgM","status":"read"}]}}]}]}`)
	key, _ := p.Key(httptest.NewRequest(http.MethodPost, "/whatsapp", nil), body)
	fmt.Println(key)
	// Output:
	// <nil> true 200
	// <nil> true 403
	// wamid.HBgM:read
}

// Messenger: signed and subscribed as WhatsApp Cloud. A body of one event
// is keyed as the per-item flow keys that event: a message by its mid, a
// reaction (whose mid is the reacted-to message's) by its content's hash.
func ExampleMessenger() {
	p, _ := provider.Messenger(provider.Config{
		Secrets:   []string{"app-secret"},
		Messenger: provider.MessengerOptions{VerifyToken: "my-verify-token"},
	})
	r := httptest.NewRequest(http.MethodGet, "/messenger?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=my-verify-token", nil)
	w := httptest.NewRecorder()
	fmt.Println(p.Verify(r, nil), p.Handshake(w, r, nil), w.Code, w.Body)
	message := []byte(`{"object":"page","entry":[{"id":"PAGE-ID","time":1458692752478,"messaging":[{"sender":{"id":"PSID"},"recipient":{"id":"PAGE-ID"},"timestamp":1458692752478,"message":{"mid":"m_1457764197618:41d102a3e1ae206a38","text":"hello, world!"}}]}]}`)
	r = httptest.NewRequest(http.MethodPost, "/messenger", nil)
	r.Header.Set("X-Hub-Signature-256", "sha256="+sign("app-secret", string(message)))
	key, _ := p.Key(r, message)
	fmt.Println(p.Verify(r, message), key)
	reaction := []byte(`{"object":"page","entry":[{"id":"PAGE-ID","time":1458668856463,"messaging":[{"sender":{"id":"PSID"},"recipient":{"id":"PAGE-ID"},"timestamp":1458668856463,"reaction":{"reaction":"love","emoji":"\u2764\uFE0F","action":"react","mid":"m_1457764197618:41d102a3e1ae206a38"}}]}]}`)
	key, _ = p.Key(r, reaction)
	fmt.Println(key[:7], provider.ResponseTimeout("messenger"), p.RetryWindow)
	// Output:
	// <nil> true 200 1158201444
	// <nil> m_1457764197618:41d102a3e1ae206a38
	// sha256: 20s 36h0m0s
}

// Instagram: a comment change is keyed "<field>:<value.id>", an unsent
// message apart from the message it unsends.
func ExampleInstagram() {
	p, _ := provider.Instagram(provider.Config{Secrets: []string{"app-secret"}})
	for _, body := range []string{
		`{"object":"instagram","entry":[{"id":"IGID","time":1569262486134,"changes":[{"field":"comments","value":{"id":"17865799348089039","text":"This is an example.","from":{"id":"232323232","username":"test"},"media":{"id":"123123123","media_product_type":"FEED"}}}]}]}`,
		`{"object":"instagram","entry":[{"id":"IGID","time":1569262486134,"messaging":[{"sender":{"id":"IGSID"},"recipient":{"id":"IGID"},"timestamp":1569262485349,"message":{"mid":"aWdfZAG1faXRlbToxOklH","text":"hi"}}]}]}`,
		`{"object":"instagram","entry":[{"id":"IGID","time":1569262500000,"messaging":[{"sender":{"id":"IGSID"},"recipient":{"id":"IGID"},"timestamp":1569262499000,"message":{"mid":"aWdfZAG1faXRlbToxOklH","is_deleted":true}}]}]}`,
	} {
		key, _ := p.Key(httptest.NewRequest(http.MethodPost, "/instagram", nil), []byte(body))
		fmt.Println(key)
	}
	// Output:
	// comments:17865799348089039
	// aWdfZAG1faXRlbToxOklH
	// aWdfZAG1faXRlbToxOklH:deleted=true
}

// iFood: duplicates are answered 202.
func ExampleIFood() {
	p, _ := provider.IFood(provider.Config{Secrets: []string{"client-secret"}})
	body := []byte(`{"id":"a38ba215-f949-4b2c-982a-6e53f8c2fb8a","code":"PLC","orderId":"2c97e104"}`)
	r := httptest.NewRequest(http.MethodPost, "/ifood", nil)
	r.Header.Set("X-IFood-Signature", sign("client-secret", string(body)))
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key, p.DuplicateStatus)
	r.Header.Set("X-IFood-Signature", sign("homologation", string(body)))
	fmt.Println(p.Verify(r, body))
	// Output:
	// <nil> a38ba215-f949-4b2c-982a-6e53f8c2fb8a 202
	// ifood: header X-IFood-Signature: no matching signature
}

// Asaas checks a static token header. Duplicates are answered exactly 200.
func ExampleAsaas() {
	p, _ := provider.Asaas(provider.Config{Secrets: []string{"asaas-token"}})
	body := []byte(`{"id":"evt_05b708f961d739ea7eba7e4db318f621&368604920","event":"PAYMENT_RECEIVED"}`)
	r := httptest.NewRequest(http.MethodPost, "/asaas", nil)
	r.Header.Set("asaas-access-token", "asaas-token")
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key, p.DuplicateStatus)
	r.Header.Set("asaas-access-token", "other")
	fmt.Println(p.Verify(r, body))
	// Output:
	// <nil> evt_05b708f961d739ea7eba7e4db318f621&368604920 200
	// asaas: header asaas-access-token: token does not match
}

// Evolution API: the API key header configured on the instance's webhook.
func ExampleEvolution() {
	p, _ := provider.Evolution(provider.Config{Secrets: []string{"evo-key"}, Evolution: provider.EvolutionOptions{Header: "apikey"}})
	body := []byte(`{"event":"messages.update","data":{"keyId":"3EB0C431C26A1916E07E","status":"READ"}}`)
	r := httptest.NewRequest(http.MethodPost, "/whatsapp", nil)
	r.Header.Set("apikey", "evo-key")
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key)
	// Output: <nil> messages.update:3EB0C431C26A1916E07E:READ
}

// Shopify signs with a base64 HMAC. The key is the per-delivery webhook id.
func ExampleShopify() {
	p, _ := provider.Shopify(provider.Config{Secrets: []string{"shpss_secret"}})
	body := []byte(`{"id":820982911946154508,"name":"#1001"}`)
	m := hmac.New(sha256.New, []byte("shpss_secret"))
	m.Write(body)
	r := httptest.NewRequest(http.MethodPost, "/shopify", nil)
	r.Header.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(m.Sum(nil)))
	r.Header.Set("X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key)
	// Output: <nil> b54557e4-bdd9-4b37-8a5f-bf7d70bcd043
}

// Paddle sends several h1 signatures during a rotation. Duplicates are
// answered 200.
func ExamplePaddle() {
	now := time.Unix(1_780_000_000, 0)
	p, _ := provider.Paddle(provider.Config{Secrets: []string{"pdl_ntfset_new"}, Now: func() time.Time { return now }})
	body := []byte(`{"event_id":"evt_01h8bzakzx3hm2fmen703n5q45","notification_id":"ntf_01","event_type":"transaction.paid"}`)
	r := httptest.NewRequest(http.MethodPost, "/paddle", nil)
	r.Header.Set("Paddle-Signature", "ts=1780000000;h1="+sign("pdl_ntfset_old", "1780000000:"+string(body))+";h1="+sign("pdl_ntfset_new", "1780000000:"+string(body)))
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key, p.DuplicateStatus)
	// Output: <nil> evt_01h8bzakzx3hm2fmen703n5q45 200
}

// Mercado Pago's manifest signs data.id from the query string, the request
// id and ts. The key is the notification id.
func ExampleMercadoPago() {
	p, _ := provider.MercadoPago(provider.Config{Secrets: []string{"mp-secret"}})
	body := []byte(`{"id":12345,"type":"payment","action":"payment.updated","data":{"id":"999999999"}}`)
	r := httptest.NewRequest(http.MethodPost, "/mp?data.id=999999999&type=payment", nil)
	r.Header.Set("x-request-id", "bb56a2f1-6aae-46ac-982e-9dcd3581d08e")
	r.Header.Set("x-signature", "ts=1704908010,v1="+sign("mp-secret", "id:999999999;request-id:bb56a2f1-6aae-46ac-982e-9dcd3581d08e;ts:1704908010;"))
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key)
	// Output: <nil> 12345
}

// Stone needs your application's private key (to open the JWE) and Stone's
// public signing keys (to check the JWS inside). Without the latter the
// route is refused at start.
func ExampleStone() {
	_, err := provider.Stone(provider.Config{Secrets: []string{"-----BEGIN PRIVATE KEY-----\n..."}})
	fmt.Println(err)
	// Output: provider stone: secret #1: not a PEM private key (want your application's RSA private key)
}

// Twilio signs the URL it called, so behind a proxy the preset is told the
// public one. The key of a status callback is the message and its status.
func ExampleTwilio() {
	p, _ := provider.Twilio(provider.Config{
		Secrets: []string{"auth-token"},
		Twilio:  provider.TwilioOptions{PublicURL: "https://hooks.example.com"},
	})
	body := "MessageSid=SM5ef8732a3c49700934481addd5ce1659&MessageStatus=delivered"
	m := hmac.New(sha1.New, []byte("auth-token"))
	m.Write([]byte("https://hooks.example.com/twilio/status" + "MessageSidSM5ef8732a3c49700934481addd5ce1659MessageStatusdelivered"))
	// The request as the gateway behind the balancer receives it.
	r := httptest.NewRequest(http.MethodPost, "http://10.0.0.7:8080/twilio/status", strings.NewReader(body))
	r.Header.Set("X-Twilio-Signature", base64.StdEncoding.EncodeToString(m.Sum(nil)))
	key, _ := p.Key(r, []byte(body))
	fmt.Println(p.Verify(r, []byte(body)), key)
	// Output: <nil> SM5ef8732a3c49700934481addd5ce1659:delivered
}

// Twitch: the webhook_callback_verification challenge is answered by the
// preset, after the signature.
func ExampleTwitch() {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	p, _ := provider.Twitch(provider.Config{Secrets: []string{"s3cRe7"}, Now: func() time.Time { return now }})
	body := []byte(`{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"type":"channel.follow"}}`)
	r := httptest.NewRequest(http.MethodPost, "/twitch", nil)
	r.Header.Set("Twitch-Eventsub-Message-Id", "e76c6bd4-55c9-4987-8304-da1588d8988b")
	r.Header.Set("Twitch-Eventsub-Message-Timestamp", "2026-11-30T09:59:58.634234626Z")
	r.Header.Set("Twitch-Eventsub-Message-Type", "webhook_callback_verification")
	r.Header.Set("Twitch-Eventsub-Message-Signature", "sha256="+sign("s3cRe7", "e76c6bd4-55c9-4987-8304-da1588d8988b"+"2026-11-30T09:59:58.634234626Z"+string(body)))
	w := httptest.NewRecorder()
	fmt.Println(p.Verify(r, body), p.Handshake(w, r, body), w.Code, w.Body)
	// Output: <nil> true 200 pogchamp-kappa-360noscope-vohiyo
}

// Zoom: endpoint.url_validation is answered with the plainToken and its
// HMAC, after the signature.
func ExampleZoom() {
	now := time.Unix(1_780_000_000, 0)
	p, _ := provider.Zoom(provider.Config{Secrets: []string{"secret-token"}, Now: func() time.Time { return now }})
	body := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1780000000000,"event":"endpoint.url_validation"}`)
	r := httptest.NewRequest(http.MethodPost, "/zoom", nil)
	r.Header.Set("x-zm-request-timestamp", "1780000000")
	r.Header.Set("x-zm-signature", "v0="+sign("secret-token", "v0:1780000000:"+string(body)))
	w := httptest.NewRecorder()
	fmt.Println(p.Verify(r, body), p.Handshake(w, r, body), w.Code)
	fmt.Println(w.Body.String() == `{"encryptedToken":"`+sign("secret-token", "qgg8vlvZRS6UYooatFL8Aw")+`","plainToken":"qgg8vlvZRS6UYooatFL8Aw"}`)
	// Output:
	// <nil> true 200
	// true
}

// Mailgun signs inside the body. The key is event-data.id; duplicates are
// answered exactly 200.
func ExampleMailgun() {
	now := time.Unix(1_780_000_000, 0)
	p, _ := provider.Mailgun(provider.Config{Secrets: []string{"key-signing"}, Now: func() time.Time { return now }})
	body := []byte(`{"signature":{"timestamp":"1780000000","token":"a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0","signature":"` +
		sign("key-signing", "1780000000a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0") + `"},"event-data":{"event":"opened","id":"DACSsAdVSeGpLid7TN03WA"}}`)
	r := httptest.NewRequest(http.MethodPost, "/mailgun", nil)
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key, p.DuplicateStatus)
	// Output: <nil> DACSsAdVSeGpLid7TN03WA 200
}

// Adyen signs each item of its Standard webhook body with the HMAC key
// (hex), over eight of the item's fields. The key is the item's
// pspReference, eventCode and success; the gateway answers 200
// "[accepted]" for any 2xx of the backend.
func ExampleAdyen() {
	const hmacKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	p, _ := provider.Adyen(provider.Config{Secrets: []string{hmacKey}})
	key, _ := hex.DecodeString(hmacKey)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"))
	body := []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{` +
		`"additionalData":{"hmacSignature":"` + base64.StdEncoding.EncodeToString(m.Sum(nil)) + `"},` +
		`"amount":{"currency":"EUR","value":1130},"eventCode":"AUTHORISATION","merchantAccountCode":"TestMerchant",` +
		`"merchantReference":"TestPayment-1407325143704","pspReference":"7914073381342284","success":"true"}}]}`)
	r := httptest.NewRequest(http.MethodPost, "/adyen", nil)
	k, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), k)
	fmt.Println(p.SuccessStatus, p.SuccessBody)
	_, err := provider.Adyen(provider.Config{Secrets: []string{"not-hex"}})
	fmt.Println(err)
	// Output:
	// <nil> 7914073381342284:AUTHORISATION:true
	// 200 [accepted]
	// provider adyen: secret #1 is not a hex HMAC key (Adyen's Customer Area shows it as hex digits, e.g. 64 of them)
}

// SendGrid signs its Event Webhook with ECDSA; the preset checks it with
// the verification key SendGrid's settings show (here made up). A POST of
// one event is keyed by its sg_event_id, a batch by its body hash, and
// Items has each event of a batch keyed by its own.
func ExampleSendGrid() {
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader) // SendGrid's
	der, _ := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	verificationKey := base64.StdEncoding.EncodeToString(der)
	now := time.Unix(1_780_000_000, 0)
	p, _ := provider.SendGrid(provider.Config{Secrets: []string{verificationKey}, Now: func() time.Time { return now }})

	body := []byte(`[{"email":"a@example.com","event":"delivered","sg_event_id":"rWVYmVk90MjZJ9iohOBa3w=="}]`)
	sum := sha256.Sum256(append([]byte("1780000000"), body...))
	sig, _ := ecdsa.SignASN1(rand.Reader, priv, sum[:])
	r := httptest.NewRequest(http.MethodPost, "/sendgrid", nil)
	r.Header.Set("X-Twilio-Email-Event-Webhook-Timestamp", "1780000000")
	r.Header.Set("X-Twilio-Email-Event-Webhook-Signature", base64.StdEncoding.EncodeToString(sig))
	key, _ := p.Key(r, body)
	batch, _ := p.Key(r, []byte(`[{"sg_event_id":"a"},{"sg_event_id":"b"}]`))
	fmt.Printf("%v %s %q %+v\n", p.Verify(r, body), key, batch, p.Items.Paths)
	// Output: <nil> rWVYmVk90MjZJ9iohOBa3w== "" [{Path:[*] Key:sg_event_id}]
}

// HubSpot signs the method, the URL it called, the body and a timestamp in
// milliseconds; behind a proxy the preset is told the public URL.
func ExampleHubSpot() {
	now := time.UnixMilli(1_780_000_000_000)
	p, _ := provider.HubSpot(provider.Config{
		Secrets: []string{"client-secret"},
		HubSpot: provider.HubSpotOptions{PublicURL: "https://hooks.example.com"},
		Now:     func() time.Time { return now },
	})
	body := []byte(`[{"eventId":100,"subscriptionId":234567,"portalId":62515,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123}]`)
	m := hmac.New(sha256.New, []byte("client-secret"))
	m.Write([]byte("POST" + "https://hooks.example.com/hubspot" + string(body) + "1779999999000"))
	r := httptest.NewRequest(http.MethodPost, "http://10.0.0.7:8080/hubspot", nil)
	r.Header.Set("X-HubSpot-Request-Timestamp", "1779999999000")
	r.Header.Set("X-HubSpot-Signature-v3", base64.StdEncoding.EncodeToString(m.Sum(nil)))
	key, _ := p.Key(r, body)
	fmt.Println(p.Verify(r, body), key, provider.ResponseTimeout("hubspot"))
	// Output: <nil> 234567:100 5s
}

// A Spec describes a provider instead of programming it: the acme provider
// of Example_customPreset, with a signed timestamp, keyed by a header.
func ExampleSpec() {
	now := time.Unix(1_780_000_000, 0)
	spec := provider.Spec{
		Name: "acme",
		Signature: provider.Signature{
			Algorithm: "hmac-sha256",
			Header:    "X-Acme-Signature",
			Prefix:    "sha256=",
			Signed:    "{timestamp}.{body}",
			Timestamp: provider.Timestamp{Header: "X-Acme-Timestamp"},
		},
		Key:     provider.KeySpec{Templates: []string{"{header:X-Acme-Event-Id}"}},
		Success: provider.Success{Status: http.StatusOK},
	}
	p, err := spec.Preset(provider.Config{Secrets: []string{"acme-secret"}, Now: func() time.Time { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	body := []byte(`{"order":42}`)
	send := func(ts, secret string) {
		r := httptest.NewRequest(http.MethodPost, "/acme", nil)
		r.Header.Set("X-Acme-Event-Id", "ev-1")
		r.Header.Set("X-Acme-Timestamp", ts)
		r.Header.Set("X-Acme-Signature", "sha256="+sign(secret, ts+"."+string(body)))
		key, _ := p.Key(r, body)
		fmt.Println(key, p.Verify(r, body))
	}
	send("1780000000", "acme-secret")
	send("1780000000", "guess")
	send("1779999000", "acme-secret")
	// Output:
	// ev-1 <nil>
	// ev-1 acme: header X-Acme-Signature: no matching signature
	// ev-1 acme: header X-Acme-Timestamp: timestamp outside tolerance (signed 16m40s ago, tolerance 5m0s)
}

// One route for many tenants: a platform receives Stripe for its merchants
// on POST /webhooks/stripe/{tenant}, each merchant's endpoint with a secret
// of its own. The tenant's secret checks each delivery, and the keys are
// scoped by the tenant: idem:stripe@<tenant>:<event id>.
func ExampleNewTenants() {
	presets := map[string]*idemhook.Preset{}
	for tenant, secret := range map[string]string{"acme": "whsec_acme", "globex": "whsec_globex"} {
		p, err := provider.New("stripe", provider.Config{Secrets: []string{secret}})
		if err != nil {
			fmt.Println(err)
			return
		}
		presets[tenant] = p
	}
	tenants, err := provider.NewTenants("tenant", presets)
	if err != nil {
		fmt.Println(err)
		return
	}

	store, _ := memstore.New(memstore.Config{})
	mw, _ := idemhook.New(store, idemhook.Options{OnDelivery: func(d idemhook.DeliveryInfo) {
		fmt.Println(strings.TrimSpace("delivery: " + string(d.Outcome) + " " + d.StoreKey))
	}})
	route, _ := mw.Route(tenants.Route(idemhook.Route{Source: "stripe"}))
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe/{tenant}", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "handled for %s", r.PathValue("tenant"))
	})))

	deliver := func(tenant, secret string) {
		body := `{"id":"evt_1NnfJm2eZvKYlo2C","object":"event"}`
		stamp := strconv.FormatInt(time.Now().Unix(), 10)
		r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe/"+tenant, strings.NewReader(body))
		r.Header.Set("Stripe-Signature", "t="+stamp+",v1="+sign(secret, stamp+"."+body))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(tenant, w.Code, strings.TrimSpace(w.Body.String()))
	}
	deliver("acme", "whsec_acme")     // first delivery
	deliver("acme", "whsec_acme")     // Stripe's retry: replayed
	deliver("globex", "whsec_acme")   // acme's secret on globex's path: 401
	deliver("globex", "whsec_globex") // globex's own event
	deliver("initech", "whsec_acme")  // no such tenant: 401
	// Output:
	// delivery: processed idem:stripe@acme:evt_1NnfJm2eZvKYlo2C
	// acme 200 handled for acme
	// delivery: replayed idem:stripe@acme:evt_1NnfJm2eZvKYlo2C
	// acme 200 handled for acme
	// delivery: signature_invalid
	// globex 401 {"type":"about:blank","title":"Signature verification failed","status":401,"detail":"stripe: header Stripe-Signature: no matching signature"}
	// delivery: processed idem:stripe@globex:evt_1NnfJm2eZvKYlo2C
	// globex 200 handled for globex
	// delivery: signature_invalid
	// initech 401 {"type":"about:blank","title":"Signature verification failed","status":401,"detail":"stripe: unknown tenant (the path's {tenant} is \"initech\")"}
}
