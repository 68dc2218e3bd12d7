package gateway

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders are the headers of one connection (RFC 9110 section 7.6.1),
// never forwarded: httputil.ReverseProxy's list, which the proxy routes
// follow.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopHeaders deletes from h the hop-by-hop headers by
// httputil.ReverseProxy's rule, for what the queue forwards outside a
// ReverseProxy: the headers the Connection header names, then the fixed
// list (Connection among them).
func removeHopHeaders(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}
