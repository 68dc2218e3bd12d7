package redistest

import "syscall"

// procAttr makes the kernel kill a server when the test binary dies (a test
// timeout, a crash), so that no redis-server outlives its test.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
