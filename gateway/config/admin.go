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

// adminSchema is the admin: section.
var adminSchema = table[Admin]{fields: []field[Admin]{
	{name: "listen", to: func(a *Admin) any { return &a.Listen }, def: defaultAdminListen, check: checkAdminListen},
	{name: "token", to: func(a *Admin) any { return &a.Token }, check: nonEmpty("empty token")},
}}

// checkAdminListen checks admin.listen: an address, or off.
func checkAdminListen(v string) error {
	if v == "off" {
		return nil
	}
	return checkListen(v)
}

// admin checks the admin: section, n, against the main listener's address.
func (c *checker) admin(n *yaml.Node, listen string) Admin {
	var ac Admin
	vals := valuesOf(n)
	got := adminSchema.read(c, vals, n, "admin", &ac)
	if n == nil {
		return ac
	}
	_, hasTok := got["token"]
	switch v, ok := got["listen"]; {
	case v == "off":
		ac.Listen = ""
	case ok && checkListen(v) == nil && v == listen && !strings.HasSuffix(v, ":0"):
		c.errorf(vals["listen"].Node, "admin.listen", "same address as listen (%s): give the admin listener its own port", v)
	}
	if ac.Listen != "" && !hasTok && !isLoopback(ac.Listen) {
		at := n
		if l := vals["listen"]; l.Node != nil {
			at = l.Node
		}
		c.errorf(at, "admin.token", "required when admin.listen (%s) is not a loopback address: the admin API can delete keys (use token: ${IDEMHOOK_ADMIN_TOKEN})", ac.Listen)
	}
	return ac
}
