package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
	"go.yaml.in/yaml/v3"
)

// maxBodyWarn is the max_body above which check and serve warn: bodies are
// buffered whole, so a few concurrent deliveries of this size take that
// much memory each.
const maxBodyWarn = 64 << 20

// tlsSettings is the tls: section: the listener serves HTTPS with this
// certificate and key, read again on SIGHUP.
type tlsSettings struct {
	Cert, Key string // PEM files; both or neither
}

// routeLimits reads lease, max_stored_body and retry_after, warns about
// settings that do nothing, and runs the library's own checks of the route
// (Middleware.Route), reporting their refusals at the field's line: check
// refuses exactly what serve would.
func (p *parser) routeLimits(rf map[string]field, at string, n *yaml.Node, rc *routeSettings) {
	r := &rc.Route
	r.Lease = p.duration(rf, at, "lease", 0)
	if v, vn, ok := p.str(rf, at, "max_stored_body"); ok {
		size, err := parseSize(v)
		if err != nil {
			p.errorf(vn, join(at, "max_stored_body"), "%v", err)
		} else if size > 1<<30 {
			p.errorf(vn, join(at, "max_stored_body"), "%s is over 1GiB: a stored answer that large would be replayed from the store on every duplicate", v)
		} else {
			r.MaxStoredBodyBytes = int(size)
		}
	}
	r.RetryAfter = p.duration(rf, at, "retry_after", 0)

	if f, ok := rf["wait_timeout"]; ok && r.InFlight != idemhook.InFlightWait {
		p.warnf(f.key, join(at, "wait_timeout"), "does nothing with in_flight: %s (only in_flight: wait waits)", r.InFlight)
	}
	if f, ok := rf["retry_after"]; ok && r.InFlight != idemhook.InFlightReject && r.OnStoreError != idemhook.StoreErrorClosed {
		p.warnf(f.key, join(at, "retry_after"), "does nothing here: it is the Retry-After of in_flight: reject and of on_store_error: closed")
	}
	if r.MaxBodyBytes > maxBodyWarn {
		p.warnf(p.lineOf(n, "max_body"), join(at, "max_body"), "%d bytes: each delivery buffers its whole body, so 10 concurrent deliveries of that size take %d MiB",
			r.MaxBodyBytes, 10*r.MaxBodyBytes>>20)
	}

	if _, err := validator.Route(*r); err != nil {
		p.routeError(rf, at, n, err)
	}
}

// validator is a Middleware used only to run Middleware.Route's checks at
// parse time; its store is never called.
var validator = func() *idemhook.Middleware {
	m, err := idemhook.New(unusedStore{}, idemhook.Options{})
	if err != nil {
		panic(err) // a zero Options is valid
	}
	return m
}()

// routeError reports an error of Middleware.Route at the field it is
// about.
func (p *parser) routeError(rf map[string]field, at string, n *yaml.Node, err error) {
	msg := err.Error() // idemhook: Route "stone": ReplayHeaders: ...
	if rest, ok := strings.CutPrefix(msg, "idemhook: Route"); ok {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			msg = after
		}
	}
	fields := []struct{ prefix, field string }{
		{"Source", "source"}, {"TTL", "ttl"}, {"WaitTimeout", "wait_timeout"}, {"RetryAfter", "retry_after"},
		{"Lease", "lease"}, {"MaxBodyBytes", "max_body"}, {"InFlight", "in_flight"}, {"OnStoreError", "on_store_error"},
		{"StoreStatuses", "store_statuses"}, {"Preset", "provider"},
	}
	if name, ok := strings.CutPrefix(msg, "ReplayHeaders: "); ok {
		header, _, _ := strings.Cut(name, " ")
		if f, ok := rf["replay_headers"]; ok {
			list := resolve(f.value)
			for i, e := range list.Content {
				if http.CanonicalHeaderKey(resolve(e).Value) == header {
					p.errorf(e, fmt.Sprintf("%s[%d]", join(at, "replay_headers"), i),
						"%s is never stored or replayed (Set-Cookie, Authorization, hop-by-hop headers and Content-Length never are): remove it", header)
					return
				}
			}
		}
	}
	for _, fl := range fields {
		if strings.HasPrefix(msg, fl.prefix) {
			p.errorf(p.lineOf(n, fl.field), join(at, fl.field), "%s", msg)
			return
		}
	}
	p.errorf(n, at, "%s", msg)
}

// listener reads tls and trusted_proxies.
func (p *parser) listener(fs map[string]field, cfg *gatewayConfig) {
	if f, ok := fs["tls"]; ok && !isNull(f.value) {
		tf := p.mapping(f.value, "tls", "cert", "key")
		if tf != nil {
			cert, cn, hasCert := p.str(tf, "tls", "cert")
			key, kn, hasKey := p.str(tf, "tls", "key")
			switch {
			case !hasCert && cn == nil:
				p.errorf(f.value, "tls.cert", "missing: the certificate file (PEM), with key: the private key file")
			case !hasKey && kn == nil:
				p.errorf(f.value, "tls.key", "missing: the private key file (PEM), with cert: the certificate file")
			case hasCert && hasKey:
				if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
					p.errorf(cn, "tls.cert", "cannot load the certificate and key: %v", err)
				}
				cfg.TLS = tlsSettings{Cert: cert, Key: key}
			}
		}
	}
	list, ln, ok := p.strList(fs, "", "trusted_proxies")
	if !ok {
		return
	}
	for i, v := range list {
		pf, err := netip.ParsePrefix(v)
		if err != nil {
			addr, aerr := netip.ParseAddr(v)
			if aerr != nil {
				p.errorf(ln.Content[i], fmt.Sprintf("trusted_proxies[%d]", i), "invalid address or CIDR %q (e.g. 10.0.0.0/8, 192.168.1.10, fd00::/8)", v)
				continue
			}
			pf = netip.PrefixFrom(addr, addr.BitLen())
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, pf.Masked())
	}
}

// yamlErrorAt is yamlError, made clear about tabs: YAML indents with spaces
// only, and for a tab in the indentation the YAML parser says "found a tab
// character that violates indentation" or "found character that cannot
// start any token", sometimes at the line before. When the file has a tab
// in a line's indentation, that line is named, and the message says "tab".
func yamlErrorAt(file string, data []byte, err error) configError {
	ce := yamlError(file, err)
	if !strings.Contains(ce.Msg, "tab") && !strings.Contains(ce.Msg, "cannot start any token") {
		return ce
	}
	for i, line := range strings.Split(string(data), "\n") {
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t-"))]
		if col := strings.IndexByte(indent, '\t'); col >= 0 {
			return configError{File: file, Line: i + 1,
				Msg: fmt.Sprintf("invalid YAML: a tab in the indentation (column %d): YAML indents with spaces only", col+1)}
		}
	}
	return ce
}

// unusedStore is the store of validator: Route's checks never call it.
type unusedStore struct{}

var errUnused = errors.New("idemhook: the configuration checker's store is not a store")

func (unusedStore) Claim(context.Context, string, *idemhook.Record, time.Duration) (*idemhook.Record, error) {
	return nil, errUnused
}
func (unusedStore) Complete(context.Context, string, *idemhook.Record, *idemhook.Record, time.Duration) error {
	return errUnused
}
func (unusedStore) Release(context.Context, string, *idemhook.Record) error { return errUnused }
func (unusedStore) Extend(context.Context, string, *idemhook.Record, time.Duration) error {
	return errUnused
}
func (unusedStore) Get(context.Context, string) (*idemhook.Record, error) { return nil, errUnused }
func (unusedStore) Delete(context.Context, string) (bool, error)          { return false, errUnused }
