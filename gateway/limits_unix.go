//go:build unix

package gateway

import "syscall"

// openFileLimit returns the process's soft limit of open files, 0 when it
// can't be read. (Go raises the soft limit to the hard one at start.)
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	cur := uint64(rl.Cur) //nolint:unconvert // the field types differ between systems
	if cur > 1<<40 {      // RLIM_INFINITY
		return 0
	}
	return cur
}
