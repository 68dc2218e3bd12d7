package gateway

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/idemhook/idemhook/internal/problem"
)

// The helpers the files of the gateway share: the answers both listeners
// write, and the error text a sender may see.

// writeProblem answers an RFC 9457 problem (adminapi.Problem).
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	problem.Write(w, status, problem.JSON(status, title, detail))
}

// errText is err's message for the sender: without the URL net/http wraps
// it in, nor the address a dial or a name lookup names, since the sender is
// on the internet and the upstream's address is internal (the WARN logged
// with the full error names it).
func errText(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "name lookup: " + dnsErr.Err
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Op + ": " + opErr.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// writeJSON answers v as indented JSON, not to be cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// trimmed is used for a query parameter.
func trimmed(r *http.Request, name string) string {
	return strings.TrimSpace(r.URL.Query().Get(name))
}

// waitDone returns a channel closed once wg's count is zero, so that a wait
// can be bounded by a context.
func waitDone(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}
