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

// tlsFile is the tls: section as decoded: each field a leaf that the
// checker below reads.
type tlsFile struct {
	Cert leaf `yaml:"cert"`
	Key  leaf `yaml:"key"`
}

// tls checks the tls: section, n.
func (c *checker) tls(t *tlsFile, n *yaml.Node) TLS {
	cert, hasCert := c.str(t.Cert, "tls.cert")
	key, hasKey := c.str(t.Key, "tls.key")
	switch {
	case t.Cert.Node == nil:
		c.errorf(n, "tls.cert", "missing: the certificate file (PEM), with key: the private key file")
	case t.Key.Node == nil:
		c.errorf(n, "tls.key", "missing: the private key file (PEM), with cert: the certificate file")
	case hasCert && hasKey:
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			c.errorf(t.Cert.Node, "tls.cert", "cannot load the certificate and key: %v", err)
		}
		return TLS{Cert: cert, Key: key}
	}
	return TLS{}
}
