package config

import (
	"crypto/tls"

	"go.yaml.in/yaml/v3"
)

// TLS is the tls: section. The listener serves HTTPS with this
// certificate and key, and reads them again on SIGHUP.
type TLS struct {
	Cert, Key string // PEM files; both or neither
}

// tlsSchema is the tls: section.
var tlsSchema = table[TLS]{fields: []field[TLS]{
	{name: "cert", to: func(t *TLS) any { return &t.Cert }},
	{name: "key", to: func(t *TLS) any { return &t.Key }},
}}

// tls checks the tls: section, n.
func (c *checker) tls(n *yaml.Node) TLS {
	var t TLS
	vals := valuesOf(n)
	got := tlsSchema.read(c, vals, n, "tls", &t)
	_, hasCert := got["cert"]
	_, hasKey := got["key"]
	switch {
	case vals["cert"].Node == nil:
		c.errorf(n, "tls.cert", "missing: the certificate file (PEM), with key: the private key file")
	case vals["key"].Node == nil:
		c.errorf(n, "tls.key", "missing: the private key file (PEM), with cert: the certificate file")
	case hasCert && hasKey:
		if _, err := tls.LoadX509KeyPair(t.Cert, t.Key); err != nil {
			c.errorf(vals["cert"].Node, "tls.cert", "cannot load the certificate and key: %v", err)
		}
		return t
	}
	return TLS{}
}
