//go:build !linux

package scenario

import (
	"os"
	"syscall"
)

// childAttr sets nothing outside Linux; the scenarios stop their servers themselves.
func childAttr() *syscall.SysProcAttr { return nil }

// signalGroup sends sig to p.
func signalGroup(p *os.Process, sig syscall.Signal) { _ = p.Signal(sig) }
