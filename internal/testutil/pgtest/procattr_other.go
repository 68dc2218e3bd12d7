//go:build !unix

package pgtest

import (
	"errors"
	"os"
	"os/user"
	"syscall"
)

// procAttr fails: StartServer runs a PostgreSQL server only on Unix.
func procAttr(*user.User) (*syscall.SysProcAttr, error) {
	return nil, errors.New("a private PostgreSQL server is started only on Unix")
}

type signalKind int

const (
	sigQuit signalKind = iota
	sigKill
)

func sendSignal(p *os.Process, _ signalKind) error { return p.Kill() }
