// verify.js: checks a request the idemhook gateway forwarded, as a Node.js
// backend would, with the Standard Webhooks reference library.
//
//   node verify.js request.json
//
// request.json: {"secret": "whsec_...", "headers": {name: value}, "body": "..."}.
// Exits 0 and prints "verified" when the signature is good, 1 otherwise.
const fs = require("fs");
const { Webhook } = require("standardwebhooks");

const req = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
try {
  // The backend's code is these two lines.
  const wh = new Webhook(req.secret);
  wh.verify(req.body, req.headers); // throws on a bad or stale signature
  console.log("verified");
} catch (err) {
  console.log("refused: " + err.message);
  process.exit(1);
}
