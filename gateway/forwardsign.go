package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/provider"
)

// signForward signs a request the gateway sends its backend by the Standard
// Webhooks scheme: webhook-id is id, webhook-timestamp now in Unix seconds,
// and webhook-signature "v1,<base64 HMAC-SHA256(key, id.timestamp.body)>".
// The backend checks it with any Standard Webhooks library (the Node.js
// standardwebhooks package, provider.StandardWebhooks in Go) and the same
// secret: a request that passes came through the gateway, which checked the
// provider's own signature first. Headers of those names the provider sent
// are replaced.
func signForward(h http.Header, key []byte, id string, body []byte, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	io.WriteString(mac, id)  //nolint:errcheck // a hash never fails
	io.WriteString(mac, ".") //nolint:errcheck
	io.WriteString(mac, ts)  //nolint:errcheck
	io.WriteString(mac, ".") //nolint:errcheck
	mac.Write(body)          //nolint:errcheck
	h.Set(provider.WebhookIDHeader, id)
	h.Set(provider.WebhookTimestampHeader, ts)
	h.Set(provider.WebhookSignatureHeader, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// forwardedBody returns the body and the webhook-id of a request r the
// proxy forwards: the body and store key of d, its delivery, when it holds
// a claim (no copy); otherwise (d nil) (a delivery forwarded unprotected: fail-open, in-flight
// proceed) a copy of the body the middleware read, and a random id, since
// no key was claimed.
func forwardedBody(r *http.Request, d *idemhook.Delivery) ([]byte, string, error) {
	if d != nil {
		return d.Body(), d.StoreKey(), nil
	}
	var body []byte
	if r.GetBody != nil {
		rc, err := r.GetBody()
		if err != nil {
			return nil, "", err
		}
		defer rc.Close()
		if body, err = io.ReadAll(rc); err != nil {
			return nil, "", err
		}
	}
	var b [12]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand never fails (Go 1.24+)
	return body, "unclaimed:" + hex.EncodeToString(b[:]), nil
}
