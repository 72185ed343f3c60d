// Package listen caps the connections a listener holds open, in a way no
// client can hold: when the cap is reached, a new connection is accepted
// at once and an old one is closed to make room for it.
//
// The connection closed is the one that has gone longest without sending
// a byte, among the connections of the peer that holds the most. So a
// peer that opens connections and sends nothing on them (idle TCP, a
// half-sent TLS ClientHello, a gRPC stream that waits, an HTTP keep-alive
// connection used once a minute) loses them to the next client, and a
// peer that opens many loses its own before anyone else's. A client that
// keeps sending keeps its connection. Peers are IP addresses; IPv6
// addresses in one /64 count as one peer.
//
// Closing is abrupt: the server sees its read fail and drops the
// connection. The clients of a real server reconnect.
package listen

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Listener is a net.Listener holding at most Max connections open. It is
// safe for concurrent use, as its connections are.
type Listener struct {
	net.Listener
	max   int
	start time.Time // read against for a monotonic clock
	// reclaimed counts the connections closed to make room.
	reclaimed atomic.Uint64

	mu    sync.Mutex
	conns map[*conn]struct{}
	peers map[netip.Prefix]int // open connections of each peer
}

// New returns l capped at max open connections. max must be at least 1.
func New(l net.Listener, max int) *Listener {
	return &Listener{
		Listener: l,
		max:      max,
		start:    time.Now(),
		conns:    make(map[*conn]struct{}, max),
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

// Accept waits for a connection and returns it. It never waits for room:
// when Max connections are open, it closes one (see the package doc).
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, l: l, peer: peerOf(nc.RemoteAddr())}
	c.touch()
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.peers[c.peer]++
	var victim *conn
	if len(l.conns) > l.max {
		victim = l.victimLocked(c)
		l.removeLocked(victim)
	}
	l.mu.Unlock()
	if victim != nil {
		l.reclaimed.Add(1)
		victim.Conn.Close()
	}
	return c, nil
}

// victimLocked returns the connection to close to make room for c: the
// one that has sent nothing for longest among those of the peer with the
// most connections (among those of every such peer, on a tie). It scans
// every connection, which it does only when the listener is full.
// requires l.mu held, and a connection other than c.
func (l *Listener) victimLocked(c *conn) *conn {
	most := 0
	for p, n := range l.peers {
		if p == c.peer {
			n-- // c itself cannot be closed
		}
		most = max(most, n)
	}
	var v *conn
	for o := range l.conns {
		if o == c {
			continue
		}
		n := l.peers[o.peer]
		if o.peer == c.peer {
			n--
		}
		if n == most && (v == nil || o.last.Load() < v.last.Load()) {
			v = o
		}
	}
	return v
}

// removeLocked forgets c; it reports whether c was still open.
// requires l.mu held.
func (l *Listener) removeLocked(c *conn) bool {
	if _, ok := l.conns[c]; !ok {
		return false
	}
	delete(l.conns, c)
	if l.peers[c.peer]--; l.peers[c.peer] == 0 {
		delete(l.peers, c.peer)
	}
	return true
}

// conn is an accepted connection that records when it last sent a byte.
type conn struct {
	net.Conn
	l    *Listener
	peer netip.Prefix
	last atomic.Int64 // when a Read last returned data: ns since l.start
}

func (c *conn) touch() { c.last.Store(int64(time.Since(c.l.start))) }

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *conn) Close() error {
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
