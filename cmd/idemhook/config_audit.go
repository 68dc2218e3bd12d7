package main

import (
	"os"
	"strconv"

	"github.com/idemhook/idemhook/audit"
)

// defaultAuditBuffer is audit.buffer by default: how many entries wait for
// a slow or unreachable sink before new ones are dropped (about 3 MB), the
// recorder's own default.
const defaultAuditBuffer = audit.DefaultQueueSize

// defaultInstance is audit.instance by default: the host name (a pod's name
// under Kubernetes), or "idemhook" when it can't be read.
func defaultInstance() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "idemhook"
}

// count returns the value of f, a positive whole number, or def when
// absent.
func (p *parser) count(fs map[string]field, at, name string, def int) int {
	v, n, ok := p.str(fs, at, name)
	if !ok {
		return def
	}
	c, err := strconv.Atoi(v)
	if err != nil || c <= 0 || c > 100_000_000 {
		p.errorf(n, join(at, name), "want a whole number from 1 to 100000000, got %q", v)
		return def
	}
	return c
}
