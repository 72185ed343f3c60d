package bounds

import (
	"encoding/binary"
	"io"
	"time"
)

// Read reads from the connection and follows its frames; it holds back
// the start of a message prefix the read did not complete, so that the
// prefix can still be rewritten once it is whole.
func (c *msgConn) Read(b []byte) (int, error) {
	if len(b) <= len(c.carry) {
		// grpc-go reads through a buffer of 32 KiB.
		return 0, io.ErrShortBuffer
	}
	for {
		k := copy(b, c.carry[:c.ncar])
		c.ncar = 0
		n, err := c.Conn.Read(b[k:])
		n += k
		keep, perr := c.follow(b[:n])
		if perr != nil {
			c.Close()
			return 0, perr
		}
		c.ncar = copy(c.carry[:], b[keep:n])
		if keep > 0 || err != nil {
			return keep, err
		}
	}
}

// follow reads the frames in b, which continue those of earlier reads,
// and returns how many of its bytes may go to grpc-go: all but the start
// of a message prefix that b ends in (at most 4 bytes).
func (c *msgConn) follow(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shut {
		return 0, errStalled
	}
	f := &c.in
	i := min(c.preface, len(b))
	c.preface -= i
	for i < len(b) {
		if f.left == 0 && f.hn < frameHeaderLen {
			k := copy(f.hdr[f.hn:], b[i:])
			f.hn += k
			i += k
			if f.hn < frameHeaderLen {
				break
			}
			f.begin()
			if s := c.streams[f.stream]; s != nil && f.typ == frameData {
				s.win -= int64(f.left)
			}
			if f.left == 0 {
				if err := c.frameDone(); err != nil {
					return 0, err
				}
			}
			continue
		}
		k := min(f.left, len(b)-i)
		held, err := c.payload(b[i:i+k], i+k == len(b))
		if err != nil {
			return 0, err
		}
		if held > 0 {
			// The read ends within a prefix: hold it back.
			f.left -= k - held
			return i + k - held, nil
		}
		f.left -= k
		i += k
		if f.left == 0 {
			if err := c.frameDone(); err != nil {
				return 0, err
			}
		}
	}
	c.armLocked()
	return len(b), nil
}

// armLocked starts the timer for the messages in progress, if it is not
// running.
// requires c.mu held
func (c *msgConn) armLocked() {
	if c.inFlight > 0 && c.timer == nil && !c.shut {
		d := c.m.Timeout
		if b := c.m.BlockedTimeout; b > 0 {
			d = min(d, b)
		}
		c.timer = time.AfterFunc(d, c.expire)
	}
}

// expire closes the connection if a message has gone too long without
// arriving whole (see deadline), or waits for the next that could.
func (c *msgConn) expire() {
	c.mu.Lock()
	c.timer = nil
	if c.shut || c.inFlight == 0 {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	var next time.Time
	for _, s := range c.streams {
		if s.began.IsZero() {
			continue
		}
		if d := c.deadline(s); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	if wait := next.Sub(now); wait > 0 {
		c.timer = time.AfterFunc(wait, c.expire)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.m.closed.Add(1)
	c.Close()
}

// deadline returns when s's message in progress has taken too long:
// Timeout after it began or its stream was last granted window, or
// BlockedTimeout if the client has no window left, waiting on the
// server's handler to read.
// requires c.mu held
func (c *msgConn) deadline(s *msgStream) time.Time {
	if s.win <= 0 && c.m.BlockedTimeout > 0 {
		return s.began.Add(c.m.BlockedTimeout)
	}
	return s.began.Add(c.m.Timeout)
}

// Write follows the frames grpc-go writes, for the ends of streams
// (trailers, HEADERS with END_STREAM, or RST_STREAM) and the window it
// grants them (WINDOW_UPDATE).
func (c *msgConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	f := &c.out
	for i := 0; i < len(b); {
		if f.left == 0 && f.hn < frameHeaderLen {
			k := copy(f.hdr[f.hn:], b[i:])
			f.hn += k
			i += k
			if f.hn < frameHeaderLen {
				break
			}
			f.begin()
			if f.typ == frameRSTStream || (f.typ == frameHeaders && f.flags&flagEndStream != 0) {
				c.drop(f.stream)
			}
			continue
		}
		k := min(f.left, len(b)-i)
		if f.typ == frameWindowUpdate && f.stream != 0 {
			f.wn += copy(f.wu[f.wn:], b[i:i+k])
			if f.wn == len(f.wu) {
				c.granted(f.stream, binary.BigEndian.Uint32(f.wu[:])&(1<<31-1))
			}
		}
		f.left -= k
		i += k
	}
	c.armLocked()
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// granted takes in a window update of n bytes the server sent for
// stream id: a message that waited for it is timed from now.
// requires c.mu held
func (c *msgConn) granted(id uint32, n uint32) {
	if s := c.streams[id]; s != nil {
		s.win += int64(n)
		if !s.began.IsZero() {
			s.began = time.Now()
		}
	}
}

// Close closes the connection and gives back what its messages counted.
func (c *msgConn) Close() error {
	c.mu.Lock()
	if !c.shut {
		c.shut = true
		if c.timer != nil {
			c.timer.Stop()
			c.timer = nil
		}
		for id := range c.streams {
			c.drop(id)
		}
	}
	c.mu.Unlock()
	return c.Conn.Close()
}
