package bounds

import (
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
	// (see Listener): a call started, or a message in progress
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

// Worker is what a connection from a capped listener (Listener)
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
	// The table size of grpc-go's own decoder, which the server advertises
	// (grpc.HeaderTableSize is not set): the client's encoder keeps to it.
	mc.dec = hpack.NewDecoder(4096, mc.emit)
	if m.HeaderBytes > 0 {
		mc.dec.SetMaxStringLength(m.HeaderBytes)
	}
	return mc
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
