package bounds

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// ListenUnix listens on a Unix socket at path. A socket file already
// there that nobody accepts on is left from a process that died, and is
// removed; one that is served, or a file that is not a socket, is an
// error. The listener removes the file when it closes.
func ListenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("%s is in use by another process", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	return net.Listen("unix", path)
}
