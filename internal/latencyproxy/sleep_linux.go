package latencyproxy

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sleeper waits on a timerfd, which the Go runtime polls as it does a
// socket: its timers wake on whole milliseconds on some kernels (a 300 µs
// time.Sleep takes 1.08 ms on a Firecracker VM), which would add up to a
// millisecond to most delayed chunks, while a timerfd wakes within about
// 50 µs. It falls back to time.Sleep if it has no timerfd.
type sleeper struct {
	f   *os.File // nil: time.Sleep
	buf [8]byte
}

func newSleeper() *sleeper {
	const clockMonotonic = 1
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return &sleeper{}
	}
	return &sleeper{f: os.NewFile(fd, "timerfd")}
}

// sleep waits d > 0.
func (s *sleeper) sleep(d time.Duration) {
	if s.f == nil {
		time.Sleep(d)
		return
	}
	type timespec struct{ sec, nsec int64 }
	spec := struct{ interval, value timespec }{value: timespec{int64(d / time.Second), int64(d % time.Second)}}
	if _, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, s.f.Fd(), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		time.Sleep(d)
		return
	}
	if _, err := s.f.Read(s.buf[:]); err != nil {
		time.Sleep(d)
	}
}

func (s *sleeper) close() {
	if s.f != nil {
		_ = s.f.Close()
	}
}
