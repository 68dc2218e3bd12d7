#!/usr/bin/env node
// Generates provider/testdata/provider-vectors.json: signed requests of the
// providers that send one event per request, made by Node.js rather than by
// the Go code that checks them.
//
//   - twilio: signed by Twilio's own SDK (npm "twilio",
//     twilio.getExpectedTwilioSignature and getExpectedBodyHash), and each
//     vector is checked with the SDK's validateRequest /
//     validateRequestWithBody before it is written.
//   - zoom: signed with node:crypto as Zoom documents, then checked by
//     Zoom's own library, @zoom/rivet (its AwsLambdaReceiver, which verifies
//     x-zm-signature and answers endpoint.url_validation): a vector Rivet
//     refuses is not written, and a url_validation vector records Rivet's
//     answer as the one the preset must give. Rivet signs nothing itself.
//   - adyen: each NotificationRequestItem is signed by Adyen's own SDK
//     (npm "@adyen/api-library", HmacValidator.calculateHmac) and checked
//     with its validateHMAC before it is written: a forged vector is one
//     the SDK refuses. The SDK joins the signed values unescaped, so the
//     vectors with ':' and '\\' in them pin that down.
//   - sendgrid: signed with ECDSA P-256 / SHA-256 over timestamp + body
//     and checked by SendGrid's own library, @sendgrid/eventwebhook (its
//     EventWebhook.verifySignature, with the key as SendGrid's settings
//     show it: base64 DER), and by node:crypto's verify: a vector either
//     refuses is not written. The signature is computed here with
//     node:crypto's HMAC (the RFC 6979 nonce) and ECDH (the nonce's point),
//     not node:crypto.sign, whose nonce is random: the file would differ
//     on every run. The keys are fixed test keys.
//   - hubspot: signed by HubSpot's own SDK (npm "@hubspot/api-client",
//     Signature.getSignature with signatureVersion "v3") and checked with
//     its Signature.isValid, its clock set to the vector's time (isValid
//     refuses a timestamp older than 5 minutes by the real clock).
//   - linear, discord, razorpay, sanity: providers without a preset, for
//     the YAML examples of docs/providers.md (TestDocsProvidersWithoutPreset
//     runs each example on its vectors). Linear's SDK (npm "@linear/sdk",
//     LinearWebhookClient.verify, its clock set to the vector's time)
//     checks each one, and signs nothing: it is signed with node:crypto as
//     Linear documents. Discord's interactions are signed with tweetnacl
//     (nacl.sign.detached, fixed test seeds) and checked by
//     "discord-interactions" (verifyKey); the PING records the answer
//     Discord requires. Razorpay's are checked by its SDK
//     (Razorpay.validateWebhookSignature) and Sanity's signed by its own
//     library (npm "@sanity/webhook", encodeSignatureHeader) and checked by
//     its isValidSignature. A vector the SDK refuses (or, forged, accepts)
//     is not written.
//   - twitch, mailgun: neither publishes an SDK on npm that signs or
//     verifies webhooks (Mailgun's own mailgun.js has no webhook check), so
//     their vectors follow the documented sample code with node:crypto (the
//     page is named beside each).
//
// Each vector is a request (method, url, headers, body), the secret that
// signed it, the time it was signed at, and the key the preset must give.
// A "forged" vector is the same request signed with another secret.
//
// Usage, from the repository root (npm ci installs the SDKs at the
// versions of package-lock.json):
//
//   (cd provider/testdata/node && npm ci)
//   node provider/testdata/node/vectors.js > provider/testdata/provider-vectors.json
//
// .ci/run regenerates the file this way when node is installed and fails
// when the result differs from the committed one. Never edit the JSON by
// hand.
"use strict";

const crypto = require("node:crypto");
const { AwsLambdaReceiver } = require("@zoom/rivet/meetings");
const twilioSDK = require("twilio");
const { hmacValidator: AdyenHmacValidator } = require("@adyen/api-library");
const { EventWebhook: SendGridEventWebhook } = require("@sendgrid/eventwebhook");
const { Signature: HubSpotSignature } = require("@hubspot/api-client");
const nacl = require("tweetnacl");
const { verifyKey: discordVerifyKey } = require("discord-interactions");
const Razorpay = require("razorpay");
const sanityWebhook = require("@sanity/webhook");

const hmacHex = (key, data) => crypto.createHmac("sha256", key).update(data, "utf8").digest("hex");

const vectors = {};

// Twitch EventSub, dev.twitch.tv/docs/eventsub/handling-webhook-events,
// "Verifying the event message": HMAC-SHA256 of message id + timestamp +
// raw body, hex, prefixed "sha256=".
function twitch(name, secret, id, type, timestamp, body, signWith) {
  const sig = "sha256=" + hmacHex(signWith || secret, id + timestamp + body);
  return {
    name,
    secret,
    now: Math.floor(Date.parse(timestamp) / 1000),
    method: "POST",
    url: "https://hooks.example.com/twitch",
    headers: {
      "Content-Type": "application/json",
      "Twitch-Eventsub-Message-Id": id,
      "Twitch-Eventsub-Message-Retry": "0",
      "Twitch-Eventsub-Message-Type": type,
      "Twitch-Eventsub-Message-Signature": sig,
      "Twitch-Eventsub-Message-Timestamp": timestamp,
      "Twitch-Eventsub-Subscription-Type": "channel.follow",
      "Twitch-Eventsub-Subscription-Version": "2",
    },
    body,
    key: id,
    forged: Boolean(signWith),
  };
}
const twitchFollow = JSON.stringify({
  subscription: { id: "f1c2a387-161a-49f9-a165-0f21d7a4e1c4", status: "enabled", type: "channel.follow", version: "2", cost: 0,
    condition: { broadcaster_user_id: "1337", moderator_user_id: "1337" },
    transport: { method: "webhook", callback: "https://hooks.example.com/twitch" }, created_at: "2026-11-30T10:00:00.000000000Z" },
  event: { user_id: "1234", user_login: "cool_user", user_name: "Cool_User", broadcaster_user_id: "1337",
    broadcaster_user_login: "cooler_user", broadcaster_user_name: "Cooler_User", followed_at: "2026-11-30T10:00:01.1234567Z" },
});
vectors.twitch = [
  twitch("notification", "s3cRe7", "e76c6bd4-55c9-4987-8304-da1588d8988b", "notification", "2026-11-30T10:00:02.634234626Z", twitchFollow),
  twitch("unicode body", "s3cRe7", "befa7b53-d79d-478f-86b9-120f112b044e", "notification", "2026-11-30T10:00:03Z",
    JSON.stringify({ subscription: { type: "channel.chat.message" }, event: { message: { text: "olá 👋 \u2028" } } })),
  twitch("signed with another secret", "s3cRe7", "e76c6bd4-55c9-4987-8304-da1588d8988c", "notification", "2026-11-30T10:00:02.634234626Z", twitchFollow, "other-secret"),
];

// Zoom, developers.zoom.us/docs/api/webhooks, "Verify webhook events":
// "v0=" + hex HMAC-SHA256(secret token, "v0:" + x-zm-request-timestamp +
// ":" + raw body). Rivet re-serializes the parsed body before checking, so
// the bodies are JSON.stringify's (the compact form Zoom sends).
async function zoom(name, secret, timestamp, event, key, signWith) {
  const body = JSON.stringify(event);
  const headers = {
    "Content-Type": "application/json",
    "x-zm-request-timestamp": String(timestamp),
    "x-zm-signature": "v0=" + hmacHex(signWith || secret, "v0:" + timestamp + ":" + body),
    "x-zm-trackingid": "v=2.0;clid=us06;rid=WEB_" + timestamp,
  };
  const receiver = new AwsLambdaReceiver({ webhooksSecretToken: secret });
  const res = await receiver.start()({ body, headers, isBase64Encoded: false }, {});
  const accepted = res.statusCode === 200;
  if (accepted === Boolean(signWith)) {
    throw new Error(`zoom vector ${name}: Rivet answered ${res.statusCode} ${res.body}`);
  }
  const v = { name, secret, now: timestamp, method: "POST", url: "https://hooks.example.com/zoom", headers, body, key, forged: Boolean(signWith) };
  if (event.event === "endpoint.url_validation") {
    v.answer = res.body; // Rivet's {"plainToken", "encryptedToken"}
  }
  return v;
}

// Twilio, twilio.com/docs/usage/webhooks/webhooks-security: the SDK signs
// the URL Twilio calls (signedUrl; the request goes to url) and the form's
// parameters, or, for a JSON body, the URL carrying bodySHA256.
function twilio(name, { secret, signWith, method = "POST", url, signedUrl, pairs, json, headers = {}, algorithm, key }) {
  const token = signWith || secret;
  let body = "";
  let params = {};
  if (json !== undefined) {
    body = JSON.stringify(json);
    const sep = url.includes("?") ? "&" : "?";
    url += sep + "bodySHA256=" + twilioSDK.getExpectedBodyHash(body);
    if (signedUrl) signedUrl += sep + "bodySHA256=" + twilioSDK.getExpectedBodyHash(body);
  } else if (pairs) {
    body = new URLSearchParams(pairs).toString();
    for (const [k, v] of pairs) {
      params[k] = k in params ? [].concat(params[k], v) : v;
    }
  }
  signedUrl = signedUrl || url;
  const signature = twilioSDK.getExpectedTwilioSignature(token, signedUrl, json !== undefined ? {} : params, algorithm);
  const all = { ...headers, "X-Twilio-Signature": signature };
  if (pairs) all["Content-Type"] = "application/x-www-form-urlencoded";
  if (json !== undefined) all["Content-Type"] = "application/json";
  if (algorithm) all["X-Twilio-Webhooks-Signature-Settings"] = "key=webhooks_sharedkey_1,algorithm=" + algorithm;
  // The SDK's own check, at the URL the request went to.
  const valid = json !== undefined
    ? twilioSDK.validateRequestWithBody(secret, signature, url, body, algorithm)
    : twilioSDK.validateRequest(secret, signature, url, params, algorithm);
  if (valid === Boolean(signWith)) {
    throw new Error(`twilio vector ${name}: the SDK's validation says ${valid}`);
  }
  return { name, secret, now: 1796032800, method, url, headers: all, body, key, forged: Boolean(signWith) };
}

// Mailgun, documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks:
// hex HMAC-SHA256(webhook signing key, timestamp + token), in the body's
// "signature" object; parent-signature is the same with the primary
// account's key, for a subaccount's domain.
function mailgun(name, { secret, timestamp, token, eventData, signWith, parentKey }) {
  const signature = { token, timestamp: String(timestamp), signature: hmacHex(signWith || secret, String(timestamp) + token) };
  if (parentKey) signature["parent-signature"] = hmacHex(parentKey, String(timestamp) + token);
  const body = JSON.stringify({ signature, "event-data": eventData });
  return { name, secret, now: timestamp, method: "POST", url: "https://hooks.example.com/mailgun",
    headers: { "Content-Type": "application/json", "User-Agent": "mailgun/treq-16.12.0" }, body, key: eventData.id,
    forged: Boolean(signWith) && !parentKey };
}

// Adyen Standard webhooks, docs.adyen.com/development-resources/webhooks/
// verify-hmac-signatures: additionalData.hmacSignature of each item. items
// are [item, signWith] pairs; signWith (another HMAC key) forges that item.
function adyen(name, { secret, items, key }) {
  const validator = new AdyenHmacValidator();
  let forged = false;
  const notificationItems = items.map(([item, signWith]) => {
    const signed = { ...item, additionalData: { ...(item.additionalData || {}) } };
    signed.additionalData.hmacSignature = validator.calculateHmac(item, signWith || secret);
    const valid = validator.validateHMAC(signed, secret);
    if (valid === Boolean(signWith)) {
      throw new Error(`adyen vector ${name}: the SDK's validateHMAC says ${valid}`);
    }
    forged = forged || !valid;
    return { NotificationRequestItem: signed };
  });
  const body = JSON.stringify({ live: "false", notificationItems });
  return { name, secret, now: 1796032800, method: "POST", url: "https://hooks.example.com/adyen",
    headers: { "Content-Type": "application/json", "User-Agent": "Adyen HttpClient 1.0" }, body, key, forged };
}

// ECDSA P-256 with SHA-256, the nonce k of RFC 6979 (deterministic), the
// signature in ASN.1 DER.
const p256n = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;
const big = (buf) => BigInt("0x" + buf.toString("hex"));
const octets = (n) => Buffer.from(n.toString(16).padStart(64, "0"), "hex");
const modPow = (b, e, m) => {
  let r = 1n;
  for (b %= m; e > 0n; e >>= 1n, b = (b * b) % m) if (e & 1n) r = (r * b) % m;
  return r;
};
function rfc6979k(d, h) {
  const mac = (k, ...parts) => { const m = crypto.createHmac("sha256", k); parts.forEach((p) => m.update(p)); return m.digest(); };
  const x = octets(d), z = octets(big(h) % p256n);
  let V = Buffer.alloc(32, 1), K = Buffer.alloc(32, 0);
  K = mac(K, V, Buffer.from([0]), x, z); V = mac(K, V);
  K = mac(K, V, Buffer.from([1]), x, z); V = mac(K, V);
  for (;;) {
    V = mac(K, V);
    const k = big(V);
    if (k >= 1n && k < p256n) return k;
    K = mac(K, V, Buffer.from([0])); V = mac(K, V);
  }
}
function derInt(n) {
  let b = octets(n);
  while (b.length > 1 && b[0] === 0 && b[1] < 0x80) b = b.subarray(1);
  if (b[0] >= 0x80) b = Buffer.concat([Buffer.from([0]), b]);
  return Buffer.concat([Buffer.from([0x02, b.length]), b]);
}
function ecdsaSign(dHex, message) {
  const d = BigInt("0x" + dHex);
  const h = crypto.createHash("sha256").update(message, "utf8").digest();
  const k = rfc6979k(d, h);
  const R = crypto.createECDH("prime256v1");
  R.setPrivateKey(octets(k));
  const r = big(R.getPublicKey().subarray(1, 33)) % p256n;
  const s = (modPow(k, p256n - 2n, p256n) * ((big(h) + r * d) % p256n)) % p256n;
  const seq = Buffer.concat([derInt(r), derInt(s)]);
  return Buffer.concat([Buffer.from([0x30, seq.length]), seq]).toString("base64");
}
// The verification key of private key dHex as SendGrid's settings show it:
// the base64 of its SubjectPublicKeyInfo DER.
function sendGridKey(dHex) {
  const e = crypto.createECDH("prime256v1");
  e.setPrivateKey(Buffer.from(dHex, "hex"));
  return Buffer.concat([Buffer.from("3059301306072a8648ce3d020106082a8648ce3d030107034200", "hex"), e.getPublicKey()]).toString("base64");
}

// SendGrid's signed Event Webhook, www.twilio.com/docs/sendgrid/for-developers/
// tracking-events/getting-started-event-webhook-security-features: ECDSA over
// X-Twilio-Email-Event-Webhook-Timestamp + body.
function sendgrid(name, { privateKey, signWith, timestamp, events, key }) {
  const body = JSON.stringify(events);
  const secret = sendGridKey(privateKey);
  const signature = ecdsaSign(signWith || privateKey, String(timestamp) + body);
  const ew = new SendGridEventWebhook();
  const valid = ew.verifySignature(ew.convertPublicKeyToECDSA(secret), body, signature, String(timestamp));
  const nodeValid = crypto.verify("sha256", Buffer.from(String(timestamp) + body),
    { key: Buffer.from(secret, "base64"), format: "der", type: "spki", dsaEncoding: "der" }, Buffer.from(signature, "base64"));
  if (valid === Boolean(signWith) || nodeValid !== valid) {
    throw new Error(`sendgrid vector ${name}: the SDK says ${valid}, node:crypto ${nodeValid}`);
  }
  return { name, secret, now: timestamp, method: "POST", url: "https://hooks.example.com/sendgrid/events",
    headers: { "Content-Type": "application/json", "User-Agent": "SendGrid Event API",
      "X-Twilio-Email-Event-Webhook-Signature": signature, "X-Twilio-Email-Event-Webhook-Timestamp": String(timestamp) },
    body, key, forged: Boolean(signWith) };
}

// HubSpot, developers.hubspot.com/docs/api/webhooks/validating-requests, v3:
// base64 HMAC-SHA256(client secret, method + URI + body + timestamp in ms).
// signedUrl is the URI signed, when it is not the one called (the guide's
// decoded escapes).
function hubspot(name, { secret, signWith, timestampMs, url, signedUrl, events, key }) {
  const body = JSON.stringify(events);
  const signed = { method: "POST", url: signedUrl || url, requestBody: body, timestamp: timestampMs };
  const signature = HubSpotSignature.getSignature("POST", "v3", { ...signed, clientSecret: signWith || secret });
  const realNow = Date.now;
  Date.now = () => timestampMs + 1000;
  let valid;
  try {
    valid = HubSpotSignature.isValid({ ...signed, signature, clientSecret: secret, signatureVersion: "v3" });
  } finally {
    Date.now = realNow;
  }
  if (valid === Boolean(signWith)) {
    throw new Error(`hubspot vector ${name}: the SDK's isValid says ${valid}`);
  }
  return { name, secret, now: Math.floor(timestampMs / 1000), method: "POST", url,
    headers: { "Content-Type": "application/json", "User-Agent": "HubSpot Connect 2.0 (http://dev.hubspot.com/) - WebhooksExecutorDaemon-executor",
      "X-HubSpot-Signature-v3": signature, "X-HubSpot-Request-Timestamp": String(timestampMs), "X-HubSpot-Signature-Version": "v3" },
    body, key, forged: Boolean(signWith) };
}

async function main() {
  const opened = { event: "opened", timestamp: 1796032799.329574, id: "DACSsAdVSeGpLid7TN03WA", "log-level": "info",
    recipient: "alice@example.com", "recipient-domain": "example.com", tags: ["my_tag_1"],
    message: { headers: { "message-id": "20261130100000.1.1@sandbox.mailgun.org" } }, "user-variables": { "my-var-1": "Mailgun Variable #1" } };
  const failed = { event: "failed", severity: "permanent", timestamp: 1796032801.1, id: "G9Bn5sl1TC6nu79C8C0bwg",
    recipient: "bob@example.com", reason: "bounce", "delivery-status": { code: 550, message: "5.1.1 The email account does not exist" } };
  vectors.mailgun = [
    mailgun("opened", { secret: "key-3ax6xnjp29jd6fds4gc373sgvjxteol0", timestamp: 1796032800,
      token: "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0", eventData: opened }),
    mailgun("failed, from a subaccount: parent-signature", { secret: "key-3ax6xnjp29jd6fds4gc373sgvjxteol0", timestamp: 1796032802,
      token: "c1d2e3f4a5b60718293a4b5c6d7e8f9012345678901234567ab", eventData: failed,
      signWith: "key-subaccount-unknown-here", parentKey: "key-3ax6xnjp29jd6fds4gc373sgvjxteol0" }),
    mailgun("signed with another key", { secret: "key-3ax6xnjp29jd6fds4gc373sgvjxteol0", timestamp: 1796032800,
      token: "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0", eventData: opened, signWith: "key-another" }),
  ];

  const adyenKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
  const adyenOtherKey = "0F1E2D3C4B5A69788796A5B4C3D2E1F00F1E2D3C4B5A69788796A5B4C3D2E1F0";
  const authorisation = { eventCode: "AUTHORISATION", success: "true", pspReference: "7914073381342284",
    merchantAccountCode: "TestMerchant", merchantReference: "TestPayment-1407325143704", amount: { value: 1130, currency: "EUR" },
    eventDate: "2026-11-30T10:00:00+01:00", paymentMethod: "visa", reason: "033899:1111:03/2030",
    additionalData: { authCode: "033899", cardSummary: "1111", expiryDate: "03/2030" }, operations: ["CANCEL", "CAPTURE", "REFUND"] };
  const capture = { eventCode: "CAPTURE", success: "true", pspReference: "8825408195409505", originalReference: "7914073381342284",
    merchantAccountCode: "TestMerchant", merchantReference: "TestPayment-1407325143704", amount: { value: 1130, currency: "EUR" },
    eventDate: "2026-11-30T10:05:00+01:00", paymentMethod: "visa" };
  vectors.adyen = [
    adyen("authorisation", { secret: adyenKey, items: [[authorisation]], key: "7914073381342284:AUTHORISATION:true" }),
    adyen("refused authorisation", { secret: adyenKey,
      items: [[{ ...authorisation, success: "false", pspReference: "7914073381342285", reason: "Refused" }]],
      key: "7914073381342285:AUTHORISATION:false" }),
    adyen("capture: a modification with its originalReference", { secret: adyenKey, items: [[capture]],
      key: "8825408195409505:CAPTURE:true" }),
    adyen("values with ':' and '\\', signed unescaped", { secret: adyenKey,
      items: [[{ ...authorisation, pspReference: "7914073381342286", merchantAccountCode: "Acme:EU\\Shop",
        merchantReference: "order:42\\a\\:b", amount: { value: 0, currency: "BRL" } }]],
      key: "7914073381342286:AUTHORISATION:true" }),
    adyen("unicode reference, no originalReference", { secret: adyenKey,
      items: [[{ ...authorisation, pspReference: "7914073381342287", merchantReference: "Pedido nº 7 – São Paulo 😀" }]],
      key: "7914073381342287:AUTHORISATION:true" }),
    adyen("several items: the body hash", { secret: adyenKey, items: [[authorisation], [capture]], key: "" }),
    adyen("several items, one signed with another key", { secret: adyenKey, items: [[authorisation], [capture, adyenOtherKey]], key: "" }),
    adyen("signed with another key", { secret: adyenKey, items: [[authorisation, adyenOtherKey]], key: "7914073381342284:AUTHORISATION:true" }),
  ];

  const token = "12345abcdefTwilioAuthToken6789a";
  const inbound = [
    ["ToCountry", "BR"], ["ToState", "SP"], ["SmsMessageSid", "SM1f0e8ae6ade43cb3c0ce4525424e404f"], ["NumMedia", "0"],
    ["ToCity", ""], ["FromZip", ""], ["SmsSid", "SM1f0e8ae6ade43cb3c0ce4525424e404f"], ["FromState", "SP"],
    ["SmsStatus", "received"], ["FromCity", "SAO PAULO"], ["Body", "Olá! Quero pedir 2 pizzas + 1 refri & o troco p/ R$100 = 😀"],
    ["FromCountry", "BR"], ["To", "+5511999990000"], ["ToZip", ""], ["NumSegments", "1"],
    ["MessageSid", "SM1f0e8ae6ade43cb3c0ce4525424e404f"], ["AccountSid", "AC0123456789abcdef0123456789abcdef"],
    ["From", "+5511988887777"], ["ApiVersion", "2010-04-01"],
  ];
  const status = [
    ["SmsSid", "SM5ef8732a3c49700934481addd5ce1659"], ["SmsStatus", "delivered"], ["MessageStatus", "delivered"],
    ["To", "+5511988887777"], ["MessageSid", "SM5ef8732a3c49700934481addd5ce1659"],
    ["AccountSid", "AC0123456789abcdef0123456789abcdef"], ["From", "+5511999990000"], ["ApiVersion", "2010-04-01"], ["ErrorCode", ""],
  ];
  vectors.twilio = [
    twilio("inbound message, idempotency token", { secret: token, url: "https://hooks.example.com/twilio/sms", pairs: inbound,
      headers: { "I-Twilio-Idempotency-Token": "4b4d5a7e-6d5f-4a53-9c67-2f3f0e5c1a77", "User-Agent": "TwilioProxy/1.1" },
      key: "4b4d5a7e-6d5f-4a53-9c67-2f3f0e5c1a77" }),
    twilio("inbound message, no token", { secret: token, url: "https://hooks.example.com/twilio/sms", pairs: inbound,
      key: "SM1f0e8ae6ade43cb3c0ce4525424e404f:received" }),
    twilio("status callback with a query string", { secret: token, url: "https://hooks.example.com/twilio/status?tenant=acme&route=a%2Fb", pairs: status,
      key: "SM5ef8732a3c49700934481addd5ce1659:delivered" }),
    twilio("signed with the default port", { secret: token, url: "https://hooks.example.com/twilio/status",
      signedUrl: "https://hooks.example.com:443/twilio/status", pairs: status, key: "SM5ef8732a3c49700934481addd5ce1659:delivered" }),
    twilio("a parameter given several times", { secret: token, url: "https://hooks.example.com/twilio/sms",
      pairs: [["MessageSid", "SM00000000000000000000000000000001"], ["SmsStatus", "received"], ["Tag", "b"], ["Tag", "a"], ["Tag", "b"]],
      key: "SM00000000000000000000000000000001:received" }),
    twilio("voice callback by GET", { secret: token, method: "GET",
      url: "https://hooks.example.com/twilio/voice?CallSid=CA1234&CallStatus=ringing&From=%2B5511988887777&To=%2B5511999990000", key: "" }),
    twilio("Event Streams, JSON with bodySHA256", { secret: token, url: "https://hooks.example.com/twilio/events",
      json: [{ specversion: "1.0", type: "com.twilio.messaging.message.delivered", source: "/2010-04-01/Accounts/AC0123/Messages/SM5e.json",
        id: "EZ0123456789abcdef0123456789abcdef", dataschema: "https://events-schemas.twilio.com/Messaging.MessageStatus/2",
        datacontenttype: "application/json", time: "2026-11-30T10:00:00.000Z", data: { messageSid: "SM5e", messageStatus: "DELIVERED" } }],
      key: "EZ0123456789abcdef0123456789abcdef" }),
    twilio("SharedKey, HMAC-SHA256", { secret: "webhooks-shared-key-secret", algorithm: "HMAC_SHA256",
      url: "https://hooks.example.com/twilio/status", pairs: status, key: "SM5ef8732a3c49700934481addd5ce1659:delivered" }),
    twilio("signed with another Auth Token", { secret: token, signWith: "another-auth-token", url: "https://hooks.example.com/twilio/sms",
      pairs: inbound, key: "SM1f0e8ae6ade43cb3c0ce4525424e404f:received" }),
  ];

  const zoomPayloadKey = (event) =>
    event.event + ":" + event.event_ts + ":" + crypto.createHash("sha256").update(JSON.stringify(event.payload)).digest("hex").slice(0, 32);
  const started = { event: "meeting.started", event_ts: 1796032800123,
    payload: { account_id: "AAAAAABBBB", object: { id: "1234567890", uuid: "4444AAAiAAAAAiAiAiiAii==", host_id: "x1yCzABCDEfg123HIJKLMN",
      topic: "Reunião semanal", type: 2, start_time: "2026-11-30T10:00:00Z", timezone: "America/Sao_Paulo", duration: 60 } } };
  const joined = { event: "meeting.participant_joined", event_ts: 1796032860456,
    payload: { account_id: "AAAAAABBBB", object: { id: "1234567890", uuid: "4444AAAiAAAAAiAiAiiAii==", host_id: "x1yCzABCDEfg123HIJKLMN",
      participant: { user_id: "16778240", user_name: "Ana", id: "iFxeBPYun6SAiWUzBcEkX", join_time: "2026-11-30T10:01:00Z" } } } };
  const validation = { payload: { plainToken: "qgg8vlvZRS6UYooatFL8Aw" }, event_ts: 1796032800000, event: "endpoint.url_validation" };
  vectors.zoom = [
    await zoom("meeting.started", "zoom-s3cret-token", 1796032800, started, zoomPayloadKey(started)),
    await zoom("meeting.participant_joined", "zoom-s3cret-token", 1796032861, joined, zoomPayloadKey(joined)),
    await zoom("endpoint.url_validation", "zoom-s3cret-token", 1796032801, validation, zoomPayloadKey(validation)),
    await zoom("signed with another secret token", "zoom-s3cret-token", 1796032800, started, zoomPayloadKey(started), "other-token"),
  ];

  // Fixed test keys (never SendGrid's): private scalars in hex.
  const sgKey = "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721";
  const sgOther = "0f56db78ca460b055c500064824bed999a25aaf48ebb519ac201537b85479813";
  const processed = { email: "alice@example.com", timestamp: 1796032790, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
    event: "processed", category: ["cat facts"], sg_event_id: "rbtnWrG1DVDGGGFHFyun0A==", sg_message_id: "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0" };
  const delivered = { email: "alice@example.com", timestamp: 1796032795, "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
    event: "delivered", category: ["cat facts"], sg_event_id: "rWVYmVk90MjZJ9iohOBa3w==", sg_message_id: "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0",
    response: "250 OK", ip: "168.1.1.1", tls: 1 };
  const click = { email: "bob@example.com", timestamp: 1796032799, event: "click", ip: "255.255.255.255",
    useragent: "Mozilla/5.0 (Windows NT 5.1) AppleWebKit/537.36", url: "https://example.com/pão?x=1&y=2",
    sg_event_id: "kCAi1KttyQdEKHhdC-nuEA", sg_message_id: "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0", url_offset: { index: 0, type: "html" } };
  vectors.sendgrid = [
    sendgrid("one event: its sg_event_id", { privateKey: sgKey, timestamp: 1796032800, events: [processed], key: "rbtnWrG1DVDGGGFHFyun0A==" }),
    sendgrid("unicode url in a click", { privateKey: sgKey, timestamp: 1796032801, events: [click], key: "kCAi1KttyQdEKHhdC-nuEA" }),
    sendgrid("a batch of three: the body hash", { privateKey: sgKey, timestamp: 1796032802, events: [processed, delivered, click], key: "" }),
    sendgrid("signed with another key", { privateKey: sgKey, signWith: sgOther, timestamp: 1796032800, events: [processed], key: "rbtnWrG1DVDGGGFHFyun0A==" }),
  ];

  const hsSecret = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy";
  const created = { eventId: 1796032800, subscriptionId: 234567, portalId: 62515, appId: 54321, occurredAt: 1796032799000,
    subscriptionType: "contact.creation", attemptNumber: 0, objectId: 123, changeSource: "CRM", changeFlag: "NEW" };
  const changed = { eventId: 1796032801, subscriptionId: 234568, portalId: 62515, appId: 54321, occurredAt: 1796032799500,
    subscriptionType: "contact.propertyChange", attemptNumber: 0, objectId: 123, propertyName: "firstname", propertyValue: "João", changeSource: "CRM_UI", sourceId: "userId:45678" };
  vectors.hubspot = [
    hubspot("one event: its subscriptionId and eventId", { secret: hsSecret, timestampMs: 1796032800123, url: "https://hooks.example.com/hubspot/webhooks",
      events: [created], key: "234567:1796032800" }),
    hubspot("a retry: attemptNumber 1, signed again", { secret: hsSecret, timestampMs: 1796033100456, url: "https://hooks.example.com/hubspot/webhooks",
      events: [{ ...created, attemptNumber: 1 }], key: "234567:1796032800" }),
    hubspot("a batch of two: the body hash", { secret: hsSecret, timestampMs: 1796032802000, url: "https://hooks.example.com/hubspot/webhooks?portal=62515",
      events: [created, changed], key: "" }),
    hubspot("escaped query, signed with the guide's escapes decoded", { secret: hsSecret, timestampMs: 1796032803000,
      url: "https://hooks.example.com/hubspot/webhooks?cb=https%3A%2F%2Fexample.com%2Fa%3Bb&who=a%40b",
      signedUrl: "https://hooks.example.com/hubspot/webhooks?cb=https://example.com/a;b&who=a@b", events: [changed], key: "234568:1796032801" }),
    hubspot("signed with another client secret", { secret: hsSecret, signWith: "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", timestampMs: 1796032800123,
      url: "https://hooks.example.com/hubspot/webhooks", events: [created], key: "234567:1796032800" }),
  ];
  await withoutPreset();
  process.stdout.write(JSON.stringify(vectors, null, 2) + "\n");
}

// expectSDK throws unless the SDK's verdict is the vector's: accepted when
// it is not forged.
function expectSDK(provider, v, accepted) {
  if (accepted === v.forged) {
    throw new Error(`${provider} vector ${v.name}: the SDK ${accepted ? "accepted" : "refused"} it`);
  }
  return v;
}

// The providers of docs/providers.md's examples without a preset.
async function withoutPreset() {
  // Linear, linear.app/developers/webhooks, "Securing webhooks": hex
  // HMAC-SHA256 of the raw body in Linear-Signature; the signed body's
  // webhookTimestamp (unix milliseconds) must be within a minute.
  const { LinearWebhookClient } = await import("@linear/sdk/webhooks");
  const linearSecret = "lin_wh_5a7e2b9c0d1f4e3a8b6c";
  const linear = (name, { ms, delivery, body, signWith }) => {
    const raw = JSON.stringify({ ...body, webhookTimestamp: ms });
    const sig = hmacHex(signWith || linearSecret, raw);
    const v = { name, secret: linearSecret, now: Math.floor(ms / 1000), method: "POST", url: "https://hooks.example.com/linear",
      headers: { "Content-Type": "application/json; charset=utf-8", "Linear-Delivery": delivery, "Linear-Event": body.type, "Linear-Signature": sig },
      body: raw, key: delivery, forged: Boolean(signWith) };
    const realNow = Date.now;
    Date.now = () => ms + 250;
    let ok = false;
    try {
      ok = new LinearWebhookClient(linearSecret).verify(Buffer.from(raw), sig);
    } catch (_) {
      ok = false;
    } finally {
      Date.now = realNow;
    }
    return expectSDK("linear", v, ok);
  };
  const issue = { action: "create", type: "Issue", createdAt: "2026-11-30T10:00:00.000Z", organizationId: "8f0c1a2b-org",
    url: "https://linear.app/acme/issue/ENG-42", webhookId: "0f4a2c6e-wh",
    data: { id: "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9", identifier: "ENG-42", title: "Crash on sign-in — olá", priority: 2 } };
  vectors.linear = [
    linear("issue created", { ms: 1796032800123, delivery: "234d1a4e-b617-4388-90fe-adc3633d6b72", body: issue }),
    linear("comment created", { ms: 1796032861000, delivery: "6c4d1f58-7a8c-4b9e-9d3f-1e2a3b4c5d6e",
      body: { action: "create", type: "Comment", webhookId: "0f4a2c6e-wh", data: { id: "c-9", body: "LGTM 👍", issueId: issue.data.id } } }),
    linear("signed with another secret", { ms: 1796032800123, delivery: "234d1a4e-b617-4388-90fe-adc3633d6b72", body: issue, signWith: "lin_wh_other" }),
  ];

  // Discord interactions, discord.com/developers/docs/interactions/overview,
  // "Setting Up an Endpoint": ed25519 over X-Signature-Timestamp + raw body,
  // hex in X-Signature-Ed25519; the public key is shown in hex; a PING
  // (type 1) is answered {"type": 1}.
  const seed = (b) => new Uint8Array(32).fill(b);
  const app = nacl.sign.keyPair.fromSeed(seed(7));
  const other = nacl.sign.keyPair.fromSeed(seed(9));
  const hex = (u8) => Buffer.from(u8).toString("hex");
  const discord = async (name, { ts, body, key, signWith, answer }) => {
    const raw = JSON.stringify(body);
    const sig = hex(nacl.sign.detached(Buffer.from(ts + raw), (signWith || app).secretKey));
    const v = { name, secret: hex(app.publicKey), now: Number(ts), method: "POST", url: "https://hooks.example.com/discord",
      headers: { "Content-Type": "application/json", "X-Signature-Ed25519": sig, "X-Signature-Timestamp": ts }, body: raw, key, forged: Boolean(signWith) };
    if (answer) v.answer = answer;
    return expectSDK("discord", v, await discordVerifyKey(raw, sig, ts, hex(app.publicKey)));
  };
  const command = { id: "1311111111111111111", application_id: "1300000000000000000", type: 2, token: "aW50ZXJhY3Rpb24", version: 1,
    data: { id: "1322222222222222222", name: "ping", type: 1 }, guild_id: "1333333333333333333",
    member: { user: { id: "1344444444444444444", username: "ana" } } };
  vectors.discord = [
    await discord("PING: answered with a PONG", { ts: "1796032800", body: { id: "1310000000000000000", application_id: "1300000000000000000", type: 1, token: "cGluZw", version: 1 },
      key: "1310000000000000000", answer: JSON.stringify({ type: 1 }) }),
    await discord("an application command: its interaction id", { ts: "1796032801", body: command, key: command.id }),
    await discord("signed with another key", { ts: "1796032801", body: command, key: command.id, signWith: other }),
  ];

  // Razorpay, razorpay.com/docs/webhooks/validate-test: hex HMAC-SHA256 of
  // the raw body in X-Razorpay-Signature; x-razorpay-event-id names the
  // event, the same on every retry.
  const rzpSecret = "rzp_wh_s3cret";
  const razorpay = (name, { event, body, signWith }) => {
    const raw = JSON.stringify(body);
    const sig = hmacHex(signWith || rzpSecret, raw);
    const v = { name, secret: rzpSecret, now: body.created_at, method: "POST", url: "https://hooks.example.com/razorpay",
      headers: { "Content-Type": "application/json", "X-Razorpay-Signature": sig, "X-Razorpay-Event-Id": event }, body: raw, key: event, forged: Boolean(signWith) };
    return expectSDK("razorpay", v, Razorpay.validateWebhookSignature(raw, sig, rzpSecret));
  };
  const captured = { entity: "event", account_id: "acc_BFQ7uQEaa7j2z7", event: "payment.captured", contains: ["payment"], created_at: 1796032800,
    payload: { payment: { entity: { id: "pay_DESlfW9H8K9uqM", entity: "payment", amount: 100, currency: "INR", status: "captured", method: "upi", description: "Chá ☕" } } } };
  vectors.razorpay = [
    razorpay("payment.captured", { event: "KhFoyDEBLtwbSs", body: captured }),
    razorpay("order.paid", { event: "KhFpCqy0wkN1AE", body: { ...captured, event: "order.paid", contains: ["payment", "order"], created_at: 1796032805 } }),
    razorpay("signed with another secret", { event: "KhFoyDEBLtwbSs", body: captured, signWith: "rzp_other" }),
  ];

  // Sanity, www.sanity.io/docs/webhooks, "Security": the library's
  // header "t=<unix ms>,v1=<base64url HMAC-SHA256 of t.body>"; the
  // idempotency-key header names the event, the same on every retry.
  const sanitySecret = "sanity-webhook-s3cret";
  const sanity = async (name, { ms, idem, body, signWith }) => {
    const raw = JSON.stringify(body);
    const sig = await sanityWebhook.encodeSignatureHeader(raw, ms, signWith || sanitySecret);
    const v = { name, secret: sanitySecret, now: Math.floor(ms / 1000), method: "POST", url: "https://hooks.example.com/sanity",
      headers: { "Content-Type": "application/json", "sanity-webhook-signature": sig, "idempotency-key": idem,
        "sanity-project-id": "abc123de", "sanity-dataset": "production", "sanity-document-id": body._id, "sanity-operation": "update" },
      body: raw, key: idem, forged: Boolean(signWith) };
    return expectSDK("sanity", v, await sanityWebhook.isValidSignature(raw, sig, sanitySecret));
  };
  const post = { _id: "post-1", _type: "post", _rev: "x8e0Qw", title: "Hello, wörld", slug: { current: "hello-world" } };
  vectors.sanity = [
    await sanity("document updated", { ms: 1796032800456, idem: "idem_01JDAB6Q2M0G8Y7W0S4XK7K3V4", body: post }),
    await sanity("another document", { ms: 1796032802000, idem: "idem_01JDAB6Q2M0G8Y7W0S4XK7K3V5", body: { ...post, _id: "post-2", title: "Two" } }),
    await sanity("signed with another secret", { ms: 1796032800456, idem: "idem_01JDAB6Q2M0G8Y7W0S4XK7K3V4", body: post, signWith: "other" }),
  ];
}

// Rivet logs every event it processes with console.debug, on stdout.
console.debug = () => {};
main().catch((err) => {
  console.error(err);
  process.exit(1);
});
