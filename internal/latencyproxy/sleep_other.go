//go:build !linux

package latencyproxy

import "time"

// sleeper waits with time.Sleep.
type sleeper struct{}

func newSleeper() *sleeper { return &sleeper{} }

// sleep waits d > 0.
func (s *sleeper) sleep(d time.Duration) { time.Sleep(d) }

func (s *sleeper) close() {}
