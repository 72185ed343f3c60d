//go:build linux

package refbench_test

import (
	"os"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refbench"
)

// TestProcCPU checks ProcessCPU against getrusage (SelfCPU) on this
// process, after burning some CPU.
func TestProcCPU(t *testing.T) {
	self := func() time.Duration {
		d, err := refbench.SelfCPU()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	before, err := refbench.ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ruBefore := self()
	// Burn at least 200ms of CPU, bounded in wall time on a busy machine.
	deadline := time.Now().Add(10 * time.Second)
	x := uint64(1)
	for self()-ruBefore < 200*time.Millisecond && time.Now().Before(deadline) {
		for range 100000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	after, err := refbench.ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	got, want := after-before, self()-ruBefore
	// /proc counts in 10ms ticks; allow two and some scheduling slack.
	if diff := got - want; diff < -30*time.Millisecond || diff > 30*time.Millisecond {
		t.Errorf("ProcessCPU grew by %v while getrusage grew by %v (x=%d)", got, want, x)
	}
	if _, err := refbench.ProcessCPU(0); err == nil {
		t.Error("ProcessCPU(0) succeeded, want an error")
	}
}
