package provider

import (
	"net/http"
)

// What Meta's Graph webhooks (whatsapp-cloud, messenger, instagram) share:
// the X-Hub-Signature-256 check and the GET subscription challenge.

// metaVerify returns the Verify of a Meta preset. A GET or HEAD carrying
// hub.mode (the subscription challenge, unsigned) passes, so that it
// reaches metaHandshake, which checks its token. Any other request, GET
// and HEAD included, needs X-Hub-Signature-256 "sha256=<hex>" =
// HMAC-SHA256(App Secret, raw body), so nothing unsigned reaches the
// handler.
func metaVerify(s settings) func(r *http.Request, body []byte) error {
	return func(r *http.Request, body []byte) error {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Query().Has("hub.mode") {
			return nil // the subscription challenge: Handshake checks its token
		}
		return s.verifyHubSignature(r, body)
	}
}

// metaHandshake returns the Handshake of a Meta preset: a GET with
// hub.mode=subscribe and a hub.verify_token equal (constant time) to
// verifyToken is answered 200 text/plain with hub.challenge; any other GET
// carrying hub.mode is answered 403, every one of them when verifyToken is
// "". A GET without hub.mode is not a handshake (and fails metaVerify).
func metaHandshake(s settings, verifyToken string) func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
	refused := s.name + ": subscription refused: hub.verify_token does not match the configured verify_token"
	return func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != http.MethodGet {
			return false
		}
		q := r.URL.Query()
		if !q.Has("hub.mode") {
			return false
		}
		challenge := q.Get("hub.challenge")
		if q.Get("hub.mode") != "subscribe" || verifyToken == "" || challenge == "" ||
			!anyToken([]string{verifyToken}, q.Get("hub.verify_token")) {
			http.Error(w, refused, http.StatusForbidden)
			return true
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(challenge))
		return true
	}
}
