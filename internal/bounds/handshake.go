package bounds

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// maxRecord is the most a TLS record may carry (2^14 bytes, and the
// expansion TLS 1.2 allows a ciphertext), plus its header.
const maxRecord = 5 + 1<<14 + 2048

// ErrHandshakeBusy is returned by a gated connection's Read when no
// handshake token or slot frees up in time.
var ErrHandshakeBusy = errors.New("too many tls handshakes at once")

var errRecordTooLong = errors.New("tls record too long")

// HandshakeGate bounds the TLS handshakes that compute at once: the
// server's signature, key agreement and a client certificate's
// verification. Each is what a client can make the server spend
// milliseconds of CPU on for a few hundred bytes, so many clients that
// only handshake would crowd out the calls of the others.
//
// A handshake holds a slot while the server works on what the client
// sent, and not while it waits for the client: a connection takes a slot
// only once a whole TLS record has arrived, and gives it back when the
// server writes or wants the next record. So a client that sends part of
// a ClientHello, or stalls anywhere in its flights, holds none.
//
// A gate may also bound the rate of handshakes, as a token bucket: a
// handshake takes a token when its ClientHello has arrived, and waits
// for one if none is left.
type HandshakeGate struct {
	slots chan struct{}
	o     HandshakeOptions
	held  atomic.Int32
	peak  atomic.Int32

	mu   sync.Mutex
	next time.Time // when the bucket is full again; requires mu
}

// HandshakeOptions configure a HandshakeGate.
type HandshakeOptions struct {
	// Slots is how many handshakes may compute at once; at least 1.
	Slots int
	// Rate is how many handshakes may start a second, and Burst how many
	// at once beyond that rate (at least 1). 0: no bound on the rate.
	Rate  float64
	Burst int
	// Wait is the longest a handshake waits for a token and a slot
	// together; one that would wait longer fails with ErrHandshakeBusy.
	Wait time.Duration
	// Now reads the clock; nil: time.Now.
	Now func() time.Time
}

// NewHandshakeGate returns a gate with the options o.
func NewHandshakeGate(o HandshakeOptions) *HandshakeGate {
	o.Slots, o.Burst = max(o.Slots, 1), max(o.Burst, 1)
	if o.Now == nil {
		o.Now = time.Now
	}
	return &HandshakeGate{slots: make(chan struct{}, o.Slots), o: o}
}

// reserve takes a token for a handshake starting at now and returns how
// long it must wait for it, or false, taking none, if that is longer
// than the gate's Wait. The bucket is a schedule (GCRA): next is when it
// would be full again, and a token is free while that is at most Burst
// tokens away.
func (g *HandshakeGate) reserve(now time.Time) (time.Duration, bool) {
	if g.o.Rate <= 0 {
		return 0, true
	}
	interval := time.Duration(float64(time.Second) / g.o.Rate)
	g.mu.Lock()
	defer g.mu.Unlock()
	next := g.next
	if next.Before(now) {
		next = now
	}
	next = next.Add(interval)
	wait := max(next.Sub(now)-time.Duration(g.o.Burst)*interval, 0)
	if wait > g.o.Wait {
		return 0, false
	}
	g.next = next
	return wait, true
}

// Peak returns the most slots held at once so far.
func (g *HandshakeGate) Peak() int { return int(g.peak.Load()) }

// Conn returns c gated for a server handshake on it. Once the handshake
// returns, the caller must call Done; the connection then passes reads
// and writes straight through.
func (g *HandshakeGate) Conn(c net.Conn) *GatedConn {
	return &GatedConn{Conn: c, g: g}
}

// acquire takes a slot, and first a token if token is set.
func (g *HandshakeGate) acquire(token bool) error {
	wait := g.o.Wait
	if token {
		d, ok := g.reserve(g.o.Now())
		if !ok {
			return ErrHandshakeBusy
		}
		if d > 0 {
			t := time.NewTimer(d)
			<-t.C
		}
		wait -= d
	}
	select {
	case g.slots <- struct{}{}:
	default:
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case g.slots <- struct{}{}:
		case <-t.C:
			return ErrHandshakeBusy
		}
	}
	n := g.held.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	return nil
}

func (g *HandshakeGate) release() {
	g.held.Add(-1)
	<-g.slots
}

// GatedConn is a connection whose server handshake is gated. Until Done,
// it must be read and written from one goroutine, as crypto/tls does in
// a handshake.
type GatedConn struct {
	net.Conn
	g       *HandshakeGate
	done    atomic.Bool
	holding bool   // a slot is held
	started bool   // a token was taken
	buf     []byte // the rest of a record read before taking a slot
}

func (c *GatedConn) Read(b []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(b, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	if c.done.Load() {
		return c.Conn.Read(b)
	}
	// The server is done with the records it had and waits for the
	// client: it computes nothing until the next one has arrived.
	if c.holding {
		c.holding = false
		c.g.release()
	}
	rec, err := readRecord(c.Conn)
	if errors.Is(err, errRecordTooLong) {
		// crypto/tls rejects it on its header: pass it through.
		c.done.Store(true)
		c.buf = rec
		return c.Read(b)
	}
	if err != nil {
		if len(rec) > 0 {
			// Let crypto/tls see what came and report it.
			c.buf = rec
			return c.Read(b)
		}
		return 0, err
	}
	if err := c.g.acquire(!c.started); err != nil {
		return 0, err
	}
	c.started, c.holding = true, true
	c.buf = rec
	return c.Read(b)
}

func (c *GatedConn) Write(b []byte) (int, error) {
	if c.holding {
		c.holding = false
		c.g.release()
	}
	return c.Conn.Write(b)
}

// Done ends the handshake: it gives back a slot still held.
func (c *GatedConn) Done() {
	if c.holding {
		c.holding = false
		c.g.release()
	}
	c.done.Store(true)
}

// readRecord reads one TLS record from r: its 5-byte header and the
// length the header gives. A length over maxRecord is not read: the
// header alone is returned with an error, for crypto/tls to reject.
func readRecord(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if n, err := io.ReadFull(r, hdr[:]); err != nil {
		return hdr[:n], err
	}
	n := 5 + int(binary.BigEndian.Uint16(hdr[3:]))
	if n > maxRecord {
		return hdr[:], errRecordTooLong
	}
	rec := make([]byte, n)
	copy(rec, hdr[:])
	if m, err := io.ReadFull(r, rec[5:]); err != nil {
		return rec[:5+m], err
	}
	return rec, nil
}

// Creds returns c, whose server handshakes compute through g, so that
// clients that only handshake cannot take the CPU the calls need, and
// report each that fails to failed, except those of clients that close
// before sending anything: TCP probes of the port.
func (g *HandshakeGate) Creds(c credentials.TransportCredentials, failed func(net.Addr, error)) credentials.TransportCredentials {
	return gatedCreds{TransportCredentials: c, failed: failed, gate: g}
}

// gatedCreds are HandshakeGate.Creds.
type gatedCreds struct {
	credentials.TransportCredentials
	failed func(net.Addr, error)
	gate   *HandshakeGate
}

func (c gatedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	gc := c.gate.Conn(conn)
	out, info, err := c.TransportCredentials.ServerHandshake(gc)
	gc.Done()
	if err != nil && !errors.Is(err, io.EOF) {
		c.failed(conn.RemoteAddr(), err)
	}
	return out, info, err
}

func (c gatedCreds) Clone() credentials.TransportCredentials {
	return gatedCreds{TransportCredentials: c.TransportCredentials.Clone(), failed: c.failed, gate: c.gate}
}
