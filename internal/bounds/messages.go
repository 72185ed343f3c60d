package bounds

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/credentials"
)

// Window is the gRPC server's stream and connection window, set static
// (grpc.StaticStreamWindowSize): HTTP/2's initial 65,535 bytes. grpc-go
// grants a stream more only when its handler reads a message larger than
// that, so a client can put at most Window bytes on a stream the handler
// is not reading. (Its default window grows with the measured bandwidth,
// up to 16 MiB a stream, and a client controls the measure.)
const Window = 65_535

// Messages bounds the bytes of gRPC request messages on their way in,
// where grpc-go bounds only a server's largest message and holds what a
// client sends of one until its last byte arrives or its stream ends.
// Its Creds wrap a connection after its handshakes; the wrapper reads the
// HTTP/2 frames grpc-go reads, as they pass, and for each message's
// five-byte prefix decides before any more of the message is let in:
//   - A message longer than its method's bound is refused: its length,
//     as grpc-go reads it, is made larger than any, so grpc-go ends the
//     call with RESOURCE_EXHAUSTED without reading it or granting the
//     window it would need.
//   - A message longer than Window is counted, from its prefix to its
//     last byte, against ConnBytes and TotalBytes; past either, it is
//     refused the same way, except that a connection within its share
//     of TotalBytes (a 1/k of it, k connections holding counted bytes)
//     may go past TotalBytes, up to twice it: no client can keep the
//     others' messages out. (Shorter ones fit the window a stream has
//     without asking, so flow control bounds them: Window a stream.)
//   - A message must arrive whole within Timeout of its prefix, or of
//     the last window the server granted its stream: if any has not,
//     the connection is closed, since its client stopped mid-message (or
//     sends slower than any real client). A message whose client has no
//     window left waits on the server's handler, and gets BlockedTimeout
//     instead: a handler that does not read for that long is not serving
//     the stream (a second message on a health Watch, say).
//
// The fields are set before the server serves and only read after; the
// counters are safe for concurrent use.
type Messages struct {
	Default    int            // longest message of a method not in Methods
	Methods    map[string]int // longest message of these full method names
	ConnBytes  int64          // counted bytes one connection may hold
	TotalBytes int64          // counted bytes all connections may hold
	Timeout    time.Duration  // for a message to arrive whole (see deadline)
	// BlockedTimeout is for a message to arrive whole whose client has
	// no window left: it waits on the server's handler, which may be
	// busy with the stream's previous message. Zero means Timeout.
	BlockedTimeout time.Duration
	HeaderBytes    int // the server's SETTINGS_MAX_HEADER_LIST_SIZE
	// Work names the methods whose calls make their connection working
	// (see internal/listen): a call started, or a message in progress
	// or arrived.
	Work map[string]bool

	held    atomic.Int64  // counted bytes of all connections; written with mu held
	refused atomic.Uint64 // messages refused
	mu      sync.Mutex
	holders int64         // connections holding counted bytes
	closed  atomic.Uint64 // connections closed for a stalled message
}

// Held returns the counted bytes all connections hold.
func (m *Messages) Held() int64 { return m.held.Load() }

// Refused returns how many messages were refused, over their method's
// bound or ConnBytes or TotalBytes.
func (m *Messages) Refused() uint64 { return m.refused.Load() }

// Stalled returns how many connections were closed because a message did
// not arrive whole within Timeout.
func (m *Messages) Stalled() uint64 { return m.closed.Load() }

// Worker is what a connection from a capped listener (internal/listen)
// is told when it works; the connection Messages wraps is told through
// the one its handshake started from, if that has the method.
type Worker interface{ Worked() }

// Creds returns c, whose server handshake returns connections that m
// bounds.
func (m *Messages) Creds(c credentials.TransportCredentials) credentials.TransportCredentials {
	return msgCreds{TransportCredentials: c, m: m}
}

type msgCreds struct {
	credentials.TransportCredentials
	m *Messages
}

func (c msgCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	w, _ := raw.(Worker)
	return c.m.wrap(conn, w), info, nil
}

func (c msgCreds) Clone() credentials.TransportCredentials {
	return msgCreds{TransportCredentials: c.TransportCredentials.Clone(), m: c.m}
}

func (m *Messages) wrap(c net.Conn, w Worker) *msgConn {
	mc := &msgConn{Conn: c, m: m, worker: w, streams: map[uint32]*msgStream{}, preface: len(clientPreface)}
	mc.dec = hpack.NewDecoder(4096, mc.emit)
	if m.HeaderBytes > 0 {
		mc.dec.SetMaxStringLength(m.HeaderBytes)
	}
	return mc
}

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

// take counts n more bytes of a connection that holds had, if the
// process has room for them: within TotalBytes, or past it within the
// connection's share of it (a 1/k of it, k connections holding counted
// bytes), so that no client can keep another's messages out; never past
// twice TotalBytes.
func (m *Messages) take(had, n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := m.held.Load() + n
	if total > m.TotalBytes {
		k := m.holders
		if had == 0 {
			k++
		}
		if had+n > m.TotalBytes/k || total > 2*m.TotalBytes {
			return false
		}
	}
	if had == 0 {
		m.holders++
	}
	m.held.Store(total)
	return true
}

// give gives back n of a connection's counted bytes, which leaves it
// holding left.
func (m *Messages) give(n, left int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if left == 0 {
		m.holders--
	}
	m.held.Add(-n)
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
