package bounds

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Listener is a net.Listener that caps the connections it holds open,
// in a way no client can hold: when the cap is reached, a new connection
// is accepted at once and an old one is closed to make room for it.
//
// A connection that is working is never closed to make room: one with a
// request in flight (Busy), or whose server said it worked (Worked) less
// than Working ago. Among the others, the one closed is the one that has
// gone longest without sending a byte, among the connections of the peer
// that holds the most. So a peer that opens connections and uses them
// for nothing (idle TCP, a half-sent TLS ClientHello, a gRPC stream that
// waits, an HTTP keep-alive connection between its requests) loses them
// to the next client, and a peer that opens many loses its own before
// anyone else's; a client that keeps working keeps its connection,
// whoever its peer. When every other connection is working, the new one
// is closed instead (Refused): the cap holds. Peers are IP addresses;
// IPv6 addresses in one /64 count as one peer.
//
// Closing is abrupt: the server sees its read fail and drops the
// connection. The clients of a real server reconnect.
//
// It is safe for concurrent use, as its connections are.
type Listener struct {
	net.Listener
	// Working is how long after its last work (Worked) a connection is
	// not closed to make room. Set it before the first Accept.
	Working time.Duration

	max   int
	start time.Time // read against for a monotonic clock
	// reclaimed counts the connections closed to make room, refused the
	// new ones closed for want of it.
	reclaimed, refused atomic.Uint64

	mu    sync.Mutex
	conns map[*capConn]struct{}
	peers map[netip.Prefix]int // open connections of each peer
}

// NewListener returns l capped at max open connections. max must be at
// least 1.
func NewListener(l net.Listener, max int) *Listener {
	return &Listener{
		Listener: l,
		max:      max,
		start:    time.Now(),
		conns:    make(map[*capConn]struct{}, max),
		peers:    map[netip.Prefix]int{},
	}
}

// Open returns how many connections are open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Reclaimed returns how many connections were closed to make room.
func (l *Listener) Reclaimed() uint64 { return l.reclaimed.Load() }

// Refused returns how many new connections were closed because every
// other was working.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Accept waits for a connection and returns it. It never waits for room:
// when Max connections are open, it closes one (see the package doc).
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &capConn{Conn: nc, l: l, peer: peerOf(nc.RemoteAddr())}
	c.touch()
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.peers[c.peer]++
	var victim *capConn
	if len(l.conns) > l.max {
		if victim = l.victimLocked(c); victim == nil {
			victim = c
		}
		l.removeLocked(victim)
	}
	l.mu.Unlock()
	switch victim {
	case nil:
	case c:
		// c is returned closed: the server's first read fails, and it
		// drops the connection as any other that closed.
		l.refused.Add(1)
		c.Conn.Close()
	default:
		l.reclaimed.Add(1)
		victim.Conn.Close()
	}
	return c, nil
}

// victimLocked returns the connection to close to make room for c: of
// those not working, the one that has sent nothing for longest among
// those of the peer with the most connections (among those of every such
// peer, on a tie); nil if every connection but c is working. It scans
// every connection, which it does only when the listener is full.
// requires l.mu held
func (l *Listener) victimLocked(c *capConn) *capConn {
	now := l.now()
	var v *capConn
	vn := 0
	for o := range l.conns {
		if o == c || o.working(now) {
			continue
		}
		n := l.peers[o.peer]
		if o.peer == c.peer {
			n-- // c itself cannot be closed
		}
		if v == nil || n > vn || n == vn && o.last.Load() < v.last.Load() {
			v, vn = o, n
		}
	}
	return v
}

// now is the time since l.start.
func (l *Listener) now() int64 { return int64(time.Since(l.start)) }

// removeLocked forgets c; it reports whether c was still open.
// requires l.mu held.
func (l *Listener) removeLocked(c *capConn) bool {
	if _, ok := l.conns[c]; !ok {
		return false
	}
	delete(l.conns, c)
	if l.peers[c.peer]--; l.peers[c.peer] == 0 {
		delete(l.peers, c.peer)
	}
	return true
}

// capConn is an accepted connection that records when it last sent a byte
// and when it last worked.
type capConn struct {
	net.Conn
	l      *Listener
	peer   netip.Prefix
	last   atomic.Int64 // when a Read last returned data: ns since l.start
	worked atomic.Int64 // when Worked was last called: ns since l.start; 0: never
	busy   atomic.Bool  // a request is in flight (Busy)
}

func (c *capConn) touch() { c.last.Store(c.l.now()) }

// Worked says the connection's client used it for work: it started a
// call, or a message of one arrived (the gRPC server's, through
// Messages).
func (c *capConn) Worked() { c.worked.Store(max(1, c.l.now())) }

// Busy says whether a request is in flight on the connection, for a
// server of one request at a time (HTTP/1, from net/http's ConnState).
func (c *capConn) Busy(b bool) { c.busy.Store(b) }

// working reports whether the connection is working at now (ns since
// l.start): a request in flight, or work less than l.Working ago.
func (c *capConn) working(now int64) bool {
	if c.busy.Load() {
		return true
	}
	w := c.worked.Load()
	return w != 0 && now-w < int64(c.l.Working)
}

func (c *capConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *capConn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// peerOf returns the peer of a connection from addr: its IP address, or
// its /64 for IPv6. Addresses that are not TCP share one peer.
func peerOf(addr net.Addr) netip.Prefix {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	a := ta.AddrPort().Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}
