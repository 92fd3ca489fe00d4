package scenario

import (
	"os"
	"syscall"
)

// childAttr makes a started server die with the scenario (if h3bench or a test binary
// is killed, the kernel sends its children SIGKILL instead of leaving them listening)
// and lead its own process group, so that stop reaches the server's own children.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// signalGroup sends sig to the process group p leads.
func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}
