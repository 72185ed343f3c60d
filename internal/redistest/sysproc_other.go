//go:build !unix

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr returns no special attributes.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killGroup kills p.
func killGroup(p *os.Process) { _ = p.Kill() }

// terminate kills p; there is no portable graceful stop.
func terminate(p *os.Process) { _ = p.Kill() }
