// Package conntest is test support: it tells whether a server closed the
// client connections a test holds, for tests of connection caps and of
// the times a connection is given to handshake and send its request.
package conntest

import (
	"errors"
	"net"
	"time"
)

// ClosedWithin reports whether the peer of c closes it within wait: a
// read ends in EOF or a reset, not a timeout. Bytes read are skipped.
func ClosedWithin(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// ClosedOf returns how many of conns their peer closes, waiting up to
// wait for want of them; which ones is not told, since a server under a
// cap may close any.
func ClosedOf(conns []net.Conn, want int, wait time.Duration) int {
	closed := make(chan bool, len(conns))
	for _, c := range conns {
		go func() { closed <- ClosedWithin(c, wait) }()
	}
	n := 0
	for range conns {
		if <-closed {
			if n++; n == want {
				break
			}
		}
	}
	return n
}
