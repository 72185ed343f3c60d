//go:build linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr puts the server in its own process group, so forked children
// can be killed with it, and has the kernel kill it if the test binary dies
// without running its cleanups (for example on a -timeout panic).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group led by p.
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

// terminate asks p to shut down.
func terminate(p *os.Process) {
	_ = p.Signal(syscall.SIGTERM)
}
