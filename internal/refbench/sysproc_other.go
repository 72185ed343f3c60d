//go:build !linux

package refbench

import (
	"errors"
	"os/exec"
	"time"
)

// setDeathSignal does nothing: only Linux kills a child with its parent.
func setDeathSignal(*exec.Cmd) {}

// SelfCPU is Linux's only.
func SelfCPU() (time.Duration, error) { return 0, errors.ErrUnsupported }
