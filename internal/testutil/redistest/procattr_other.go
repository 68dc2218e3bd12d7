//go:build !linux

package redistest

import "syscall"

// procAttr returns nil, because only Linux can tie a child's life to its
// parent's. Elsewhere t.Cleanup alone stops the servers.
func procAttr() *syscall.SysProcAttr { return nil }
