//go:build unix

package pgtest

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// procAttr runs a server program in a process group of its own (so that
// Kill reaches its backends too), as the user as when it is not nil, and,
// on Linux, killed by the kernel when the test binary dies (a test timeout,
// a crash), so that no postmaster outlives its test.
func procAttr(as *user.User) (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr)
	if as != nil {
		uid, err := strconv.ParseUint(as.Uid, 10, 32)
		if err != nil {
			return nil, err
		}
		gid, err := strconv.ParseUint(as.Gid, 10, 32)
		if err != nil {
			return nil, err
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return attr, nil
}

type signalKind int

const (
	sigQuit signalKind = iota // the postmaster: immediate shutdown
	sigKill                   // the postmaster's whole process group
)

func sendSignal(p *os.Process, sig signalKind) error {
	if sig == sigKill {
		return syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
	return p.Signal(syscall.SIGQUIT)
}
