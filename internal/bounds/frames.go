package bounds

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
)

// HTTP/2 frame types and flags the connection reads (RFC 9113, 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

const frameHeaderLen = 9

// clientPreface is what a client sends before its first frame.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// errStalled is why a connection's reads fail once it is closed for a
// stalled message.
var errStalled = errors.New("bounds: a message did not arrive whole in time")

// msgConn reads a connection's HTTP/2 frames as grpc-go reads them (see
// Messages). Read runs on grpc-go's reader goroutine and Write on its
// writer; mu guards what both, and the timer, touch.
type msgConn struct {
	net.Conn
	m      *Messages
	worker Worker // nil: not from a capped listener

	// Read's own state.
	preface int        // bytes of the client preface still to come
	in      frameState // the frame being read
	dec     *hpack.Decoder
	path    string // :path of the header block being decoded
	carry   [4]byte
	ncar    int // bytes of carry to give before reading more
	// Write's own state: the frame being written.
	out frameState

	mu       sync.Mutex
	streams  map[uint32]*msgStream
	last     uint32 // highest stream ID opened
	held     int64  // counted bytes of this connection
	timer    *time.Timer
	shut     bool         // closed
	inFlight int          // messages begun and not whole
	free     []*msgStream // forgotten streams' states, for new ones
}

// maxFree bounds msgConn.free: the streams a connection may have open
// (grpc-go's MaxConcurrentStreams) are about as many.
const maxFree = 128

// frameState is where a reader of frames is: in a frame's header (hn
// bytes of it read) or in its payload (left bytes to go).
type frameState struct {
	hdr    [frameHeaderLen]byte
	hn     int
	left   int // payload bytes of the current frame still to come
	typ    byte
	flags  byte
	stream uint32
	// In a DATA or HEADERS payload: the pad length still to read (-1:
	// none or read), the priority bytes to skip, and the padding at the
	// end.
	padPending bool
	skip       int
	pad        int
	// In a WINDOW_UPDATE payload: its bytes read.
	wu [4]byte
	wn int
}

// msgStream is a stream's state: its method and the message on its way.
type msgStream struct {
	cap     int
	work    bool
	pfx     [5]byte
	pn      int       // prefix bytes read
	rest    int       // bytes of the message still to come; 0: none begun
	counted int64     // bytes counted for it against the bounds
	began   time.Time // when the message began, or its stream was last granted window
	win     int64     // the stream's window: bytes the client may send
	gone    bool      // a message was refused: grpc-go ends the call
}

// begin starts the frame whose header f.hdr holds.
func (f *frameState) begin() {
	h := f.hdr[:]
	f.left = int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	f.typ, f.flags = h[3], h[4]
	f.stream = binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1)
	f.hn = 0
	f.padPending = (f.typ == frameData || f.typ == frameHeaders) && f.flags&flagPadded != 0
	f.skip, f.pad, f.wn = 0, 0, 0
	if f.typ == frameHeaders && f.flags&flagPriority != 0 {
		f.skip = 5
	}
}

// payload follows p, the next bytes of the current frame's payload. last
// says whether p ends the read. It returns how many bytes at p's end to
// hold back (a message prefix p ends in, begun in p).
func (c *msgConn) payload(p []byte, last bool) (int, error) {
	f := &c.in
	rem := f.left // payload bytes to come, p's included
	if f.padPending && len(p) > 0 {
		f.pad = int(p[0])
		f.padPending = false
		p, rem = p[1:], rem-1
	}
	if s := min(f.skip, len(p)); s > 0 {
		f.skip -= s
		p, rem = p[s:], rem-s
	}
	// The padding is the payload's last f.pad bytes.
	body := max(0, min(len(p), rem-f.pad))
	last = last && body == len(p)
	p = p[:body]
	switch f.typ {
	case frameHeaders, frameContinuation:
		if _, err := c.dec.Write(p); err != nil {
			return 0, err
		}
	case frameData:
		if s := c.streams[f.stream]; s != nil && !s.gone {
			return c.data(s, p, last)
		}
	}
	return 0, nil
}

// frameDone handles what a frame means once all of it is read.
func (c *msgConn) frameDone() error {
	f := &c.in
	switch f.typ {
	case frameHeaders, frameContinuation:
		if f.flags&flagEndHeaders != 0 {
			if err := c.dec.Close(); err != nil {
				return err
			}
			c.headers(f.stream, c.path)
			c.path = ""
			c.dec.SetEmitEnabled(true)
		}
		if f.typ == frameHeaders && f.flags&flagEndStream != 0 {
			c.clientEnded(f.stream)
		}
	case frameData:
		if f.flags&flagEndStream != 0 {
			c.clientEnded(f.stream)
		}
	case frameRSTStream:
		c.drop(f.stream)
	}
	return nil
}

// emit takes in a decoded header field. Only :path is needed, and the
// pseudo-headers come first, so the rest of the block is decoded
// without building its strings (hpack keeps its table all the same).
func (c *msgConn) emit(h hpack.HeaderField) {
	switch {
	case h.Name == ":path":
		c.path = h.Value
	case !h.IsPseudo():
		c.dec.SetEmitEnabled(false)
	}
}

// headers takes in a header block of stream id: a new stream's opens it.
// (A block of a stream already open is its trailers.)
func (c *msgConn) headers(id uint32, path string) {
	if id <= c.last {
		return
	}
	c.last = id
	var s *msgStream
	if n := len(c.free); n > 0 {
		s, c.free = c.free[n-1], c.free[:n-1]
	} else {
		s = new(msgStream)
	}
	*s = msgStream{cap: c.m.Default, work: c.m.Work[path], win: Window}
	if n, ok := c.m.Methods[path]; ok {
		s.cap = n
	}
	c.streams[id] = s
	if s.work && c.worker != nil {
		c.worker.Worked()
	}
}

// data follows p, DATA bytes of stream s, and returns how many bytes at
// its end to hold back (see payload).
func (c *msgConn) data(s *msgStream, p []byte, last bool) (int, error) {
	for len(p) > 0 {
		if s.rest > 0 {
			k := min(s.rest, len(p))
			s.rest -= k
			p = p[k:]
			if s.rest == 0 {
				c.whole(s)
			}
			continue
		}
		start := s.pn
		k := copy(s.pfx[s.pn:], p)
		s.pn += k
		if s.pn < len(s.pfx) {
			if last && start == 0 {
				// Give the prefix to grpc-go only once it is whole.
				s.pn = 0
				return k, nil
			}
			return 0, nil
		}
		s.pn = 0
		n := int(binary.BigEndian.Uint32(s.pfx[1:]))
		if n > 0 && !c.admit(s, n) {
			if start > 0 {
				// Part of the prefix has gone to grpc-go already:
				// nothing to rewrite, so the connection goes.
				return 0, errRefusedSplit
			}
			binary.BigEndian.PutUint32(p[1:5], 1<<32-1)
			c.m.refused.Add(1)
			// grpc-go ends the call; anything more on it is discarded.
			s.gone = true
			return 0, nil
		}
		p = p[k:]
		if n == 0 {
			c.whole(s)
			continue
		}
		s.rest = n
		s.began = time.Now()
		c.inFlight++
	}
	return 0, nil
}

// errRefusedSplit is why a connection is closed whose message must be
// refused when its prefix came in two frames: grpc-go has begun to read
// it. Real clients write a prefix and its message together.
var errRefusedSplit = errors.New("bounds: a message over its bounds, its prefix split across frames")

// admit decides whether stream s may receive a message of n bytes, and
// counts it if it is longer than Window.
// requires c.mu held
func (c *msgConn) admit(s *msgStream, n int) bool {
	if n > s.cap {
		return false
	}
	if n <= Window {
		return true
	}
	if c.held+int64(n) > c.m.ConnBytes || !c.m.take(c.held, int64(n)) {
		return false
	}
	c.held += int64(n)
	s.counted = int64(n)
	return true
}

// whole ends s's message.
// requires c.mu held
func (c *msgConn) whole(s *msgStream) {
	if !s.began.IsZero() {
		c.inFlight--
		s.began = time.Time{}
	}
	c.uncount(s)
	if s.work && c.worker != nil {
		c.worker.Worked()
	}
}

// uncount gives back what s's message counted.
// requires c.mu held
func (c *msgConn) uncount(s *msgStream) {
	if s.counted > 0 {
		c.held -= s.counted
		c.m.give(s.counted, c.held)
		s.counted = 0
	}
}

// clientEnded: the client ended its side of stream id; a message not
// whole is cut short, and grpc-go fails it. The stream is forgotten when
// the server ends it (Write).
// requires c.mu held
func (c *msgConn) clientEnded(id uint32) {
	if s := c.streams[id]; s != nil {
		c.stopMessage(s)
	}
}

// stopMessage forgets s's message in progress.
// requires c.mu held
func (c *msgConn) stopMessage(s *msgStream) {
	if !s.began.IsZero() {
		c.inFlight--
		s.began = time.Time{}
	}
	s.rest, s.pn = 0, 0
	c.uncount(s)
}

// drop forgets stream id: reset by either side, or ended by the server.
// requires c.mu held
func (c *msgConn) drop(id uint32) {
	if s := c.streams[id]; s != nil {
		c.stopMessage(s)
		delete(c.streams, id)
		if len(c.free) < maxFree {
			c.free = append(c.free, s)
		}
	}
}
