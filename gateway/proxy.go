package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/config"
	"github.com/idemhook/idemhook/internal/httpstatus"
)

// newTransport returns the transport of one route: its own connection pool,
// sized for a gateway, with the route's upstream timeout as the bound on
// waiting for the response headers.
func newTransport(timeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy: nil, // never route webhooks through HTTP_PROXY
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: timeout,
	}
}

// newProxy returns the reverse proxy of one route. The request goes to the
// upstream URL's path (plus, for a route path ending in /, the rest of the
// request path after it) with the request's query; the body and the headers
// are forwarded as received, X-Forwarded-For, -Host and -Proto are set,
// Idempotent-Fence is the fence of the delivery's claim (the sender's is
// dropped), and Host becomes the upstream's.
//
// An upstream that can't be reached answers 502, one that doesn't send its
// headers within the route's upstream_timeout 504, both with a problem+json
// body; either way the middleware releases the claim, so the provider's
// retry is forwarded again.
func newProxy(rc config.Route, rt http.RoundTripper, bufs httputil.BufferPool, logger *slog.Logger, trusted []netip.Prefix) *httputil.ReverseProxy {
	target := rc.Upstream
	prefix := forwardPrefix(rc.Path)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			in := pr.In.URL
			out := pr.Out.URL
			out.Scheme, out.Host = target.Scheme, target.Host
			out.Path, out.RawPath = upstreamPath(target, prefix, in), upstreamRawPath(target, prefix, in)
			out.RawQuery = joinQuery(target.RawQuery, in.RawQuery)
			pr.Out.Host = ""
			setForwarded(pr, trusted)
			d, _ := idemhook.DeliveryFromContext(pr.In.Context()) // nil without a claim
			setFence(pr.Out.Header, d.Fence())
			if rc.ForwardKey != nil {
				body, id, err := forwardedBody(pr.In, d)
				if err != nil {
					logger.Warn("idemhook forward signature: the body could not be read; sent unsigned", "route", rc.Path, "err", err)
					return
				}
				signForward(pr.Out.Header, rc.ForwardKey, id, body, time.Now())
			}
		},
		Transport:      rt,
		BufferPool:     bufs,
		ModifyResponse: successStatus(rc),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeUpstreamError(w, logger, rc, err, r.Context().Err() != nil)
		},
	}
}

// successStatus returns the proxy's ModifyResponse for rc: a 2xx of the
// backend becomes the status the route's provider counts as success
// (idemhook.Preset.SuccessStatus) and, when the preset has a SuccessBody,
// its body replaces the backend's; nil when the preset has no
// SuccessStatus.
func successStatus(rc config.Route) func(*http.Response) error {
	want := successOf(rc)
	if want == 0 {
		return nil
	}
	body := rc.Route.Preset.SuccessBody
	return func(resp *http.Response) error {
		if body != "" && httpstatus.IsSuccess(resp.StatusCode) {
			// The backend's body is not what the provider reads: drain a
			// little of it so the connection can be reused, then drop it.
			_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
			resp.Body.Close()
			resp.Body = io.NopCloser(strings.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.TransferEncoding = nil
			setSuccessBodyHeader(resp.Header, body)
		}
		resp.StatusCode = providerStatus(want, resp.StatusCode)
		return nil
	}
}

// setSuccessBodyHeader makes h describe body, a preset's SuccessBody, in
// place of the backend's body it replaces: its type and length, and none
// of the headers that described the backend's body (its encoding, range
// and validators), which the middleware would otherwise store and replay.
func setSuccessBodyHeader(h http.Header, body string) {
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	for _, name := range []string{"Content-Encoding", "Content-Range", "Content-Language", "Content-Md5", "Digest", "Content-Digest", "Etag", "Last-Modified"} {
		h.Del(name)
	}
}

// successOf is the status rc's provider counts as success, 0 for none.
func successOf(rc config.Route) int {
	if p := rc.Route.Preset; p != nil {
		return p.SuccessStatus
	}
	return 0
}

// providerStatus is the status the provider gets for the backend's status:
// want (its success) in place of any 2xx, when want is not 0.
func providerStatus(want, status int) int {
	if want != 0 && httpstatus.IsSuccess(status) {
		return want
	}
	return status
}

// writeUpstreamError answers a delivery whose upstream call got no answer:
// 504 for a timeout, else 502, with a problem+json body, and logs a WARN
// naming the upstream. cutShort says the delivery's own context ended (the
// shutdown's cut), which is then no upstream timeout.
func writeUpstreamError(w http.ResponseWriter, logger *slog.Logger, rc config.Route, err error, cutShort bool) {
	status, title := http.StatusBadGateway, "upstream unreachable"
	switch {
	case cutShort:
		title = "delivery cut short"
	case isTimeout(err):
		status, title = http.StatusGatewayTimeout, "upstream timeout"
	}
	logger.Warn("idemhook upstream error", "route", rc.Path, "upstream", rc.Upstream.Redacted(), "status", status, "err", err)
	writeProblem(w, status, title, title+": "+errText(err))
}

// setFence sets HeaderFence to fence, or removes it (whoever set it) when
// fence is 0: a delivery with no claim has no fence.
func setFence(h http.Header, fence uint64) {
	if fence == 0 {
		delete(h, HeaderFence)
		return
	}
	h[HeaderFence] = []string{strconv.FormatUint(fence, 10)}
}

// forwardPrefix is the part of a route's path that upstreamPath drops
// from the request's path before it joins the rest to the upstream's: ""
// for an exact route (nothing is joined), the path of a prefix route, and
// the path up to {tenant} for a route for many tenants, whose backend thus
// gets the tenant as the last segment of its path.
func forwardPrefix(path string) string {
	switch {
	case strings.HasSuffix(path, "/"):
		return path
	case config.IsTenantPath(path):
		return strings.TrimSuffix(path, "{tenant}")
	}
	return ""
}

// upstreamPath maps an incoming path onto the upstream: the upstream's path
// for an exact route, the upstream's path joined with the rest for a prefix
// route.
func upstreamPath(target *url.URL, prefix string, in *url.URL) string {
	if prefix == "" {
		return target.Path
	}
	rest := strings.TrimPrefix(in.Path, prefix)
	if rest == "" {
		return target.Path
	}
	return strings.TrimSuffix(target.Path, "/") + "/" + rest
}

// upstreamRawPath is upstreamPath as escaped by the configuration and the
// sender, so that an escaped "/" (%2F) in the upstream URL or in the rest of
// a prefix route's path stays escaped. net/url ignores a RawPath that does
// not decode to Path, so a mismatch falls back to Path's own escaping.
func upstreamRawPath(target *url.URL, prefix string, in *url.URL) string {
	if prefix == "" {
		return target.RawPath
	}
	escPrefix := (&url.URL{Path: prefix}).EscapedPath()
	rest, ok := strings.CutPrefix(in.EscapedPath(), escPrefix)
	switch {
	case !ok:
		return ""
	case rest == "":
		return target.RawPath
	}
	return strings.TrimSuffix(target.EscapedPath(), "/") + "/" + rest
}

func joinQuery(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "&" + b
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// timedTransport observes the time each upstream call takes to answer with
// its headers.
type timedTransport struct {
	next    http.RoundTripper
	observe func(time.Duration)
}

func (t timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	t.observe(time.Since(start))
	return resp, err
}

// probeUpstreams dials every distinct upstream once and logs a WARN for
// those that don't answer: backends restart, so a down upstream is not a
// reason to refuse to start (its deliveries get 502 until it is back).
func probeUpstreams(ctx context.Context, routes []config.Route, logger *slog.Logger) {
	type upstream struct {
		route, destination string
		url                *url.URL
	}
	var ups []upstream
	for _, rc := range routes {
		if len(rc.Destinations) == 0 {
			ups = append(ups, upstream{rc.Path, "", rc.Upstream})
		}
		for _, d := range rc.Destinations {
			ups = append(ups, upstream{rc.Path, d.Name, d.Upstream})
		}
	}
	seen := map[string]bool{}
	done := make(chan struct{})
	n := 0
	for _, up := range ups {
		host := up.url.Host
		if up.url.Port() == "" {
			if up.url.Scheme == "https" {
				host += ":443"
			} else {
				host += ":80"
			}
		}
		if seen[host] {
			continue
		}
		seen[host] = true
		n++
		go func() {
			defer func() { done <- struct{}{} }()
			d := net.Dialer{Timeout: 2 * time.Second}
			conn, err := d.DialContext(ctx, "tcp", host)
			if err != nil {
				attrs := []any{"route", up.route, "upstream", up.url.Redacted(), "err", err}
				if up.destination != "" {
					attrs = append(attrs, "destination", up.destination)
				}
				logger.Warn("idemhook upstream unreachable at start; its deliveries get 502 until it is back", attrs...)
				return
			}
			conn.Close()
		}()
	}
	for range n {
		<-done
	}
}

// bufferPool lends the proxies the buffers they copy response bodies
// through, instead of allocating 32 KiB per request.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (bp *bufferPool) Get() []byte  { return *bp.p.Get().(*[]byte) }
func (bp *bufferPool) Put(b []byte) { bp.p.Put(&b) }

// setForwarded sets X-Forwarded-For, -Host and -Proto. From a peer in
// trusted (trusted_proxies: a load balancer in front of the gateway), the
// incoming X-Forwarded-For is kept and the peer appended to it, and the
// incoming -Host and -Proto are kept (the balancer terminated TLS); from
// any other peer they are replaced, since anyone can send them.
func setForwarded(pr *httputil.ProxyRequest, trusted []netip.Prefix) {
	if !peerTrusted(pr.In.RemoteAddr, trusted) {
		pr.SetXForwarded()
		return
	}
	if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
		pr.Out.Header["X-Forwarded-For"] = []string{strings.Join(prior, ", ")}
	}
	pr.SetXForwarded()
	for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v := pr.In.Header.Get(h); v != "" {
			pr.Out.Header.Set(h, v)
		}
	}
}

// peerTrusted reports whether the address remoteAddr (host:port) is in one
// of the prefixes.
func peerTrusted(remoteAddr string, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
