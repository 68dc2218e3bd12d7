#!/usr/bin/env node
// Generates provider/testdata/provider-vectors.json: signed requests of the
// providers that send one event per request, made by Node.js rather than by
// the Go code that checks them.
//
//   - twitch: Twitch publishes no SDK on npm that signs or verifies
//     webhooks, so its vectors follow the documented sample code with
//     node:crypto (the page is named beside it).
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

process.stdout.write(JSON.stringify(vectors, null, 2) + "\n");
