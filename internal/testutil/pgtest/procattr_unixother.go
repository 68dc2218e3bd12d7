//go:build unix && !linux

package pgtest

import "syscall"

// setPdeathsig does nothing: only Linux can tie a child's life to its
// parent's. Elsewhere t.Cleanup alone stops the server.
func setPdeathsig(*syscall.SysProcAttr) {}
