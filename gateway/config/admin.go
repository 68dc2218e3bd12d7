package config

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// Admin is the admin: section.
type Admin struct {
	Listen string // "" when disabled (listen: off)
	Token  string
}

const defaultAdminListen = "127.0.0.1:9090"

// adminFile is the admin: section as decoded: each field a leaf that the
// checker below reads.
type adminFile struct {
	Listen leaf `yaml:"listen"`
	Token  leaf `yaml:"token"`
}

// admin checks the admin: section, n, against the main listener's address.
func (c *checker) admin(a *adminFile, n *yaml.Node, listen string) Admin {
	ac := Admin{Listen: defaultAdminListen}
	if n == nil {
		return ac
	}
	if v, ok := c.str(a.Listen, "admin.listen"); ok {
		ac.Listen = v
		switch {
		case v == "off":
			ac.Listen = ""
		case checkListen(v) != nil:
			c.errorf(a.Listen.Node, "admin.listen", "%v", checkListen(v))
		case v == listen && !strings.HasSuffix(v, ":0"):
			c.errorf(a.Listen.Node, "admin.listen", "same address as listen (%s): give the admin listener its own port", v)
		}
	}
	tok, hasTok := c.str(a.Token, "admin.token")
	if hasTok && tok == "" {
		c.errorf(a.Token.Node, "admin.token", "empty token")
	}
	ac.Token = tok
	if ac.Listen != "" && !hasTok && !isLoopback(ac.Listen) {
		at := n
		if a.Listen.Node != nil {
			at = a.Listen.Node
		}
		c.errorf(at, "admin.token", "required when admin.listen (%s) is not a loopback address: the admin API can delete keys (use token: ${IDEMHOOK_ADMIN_TOKEN})", ac.Listen)
	}
	return ac
}
