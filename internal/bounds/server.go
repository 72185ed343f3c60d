package bounds

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime"
	"time"
)

// Bounds on what a client can make the servers hold. The ones a
// deployment may need to tune are flags, in Server; docs/bounds.md
// explains each.
const (
	// keepaliveMinTime is how often a client may ping: as often as a
	// grpc-go client can be set to. More often earns a GOAWAY.
	keepaliveMinTime = 10 * time.Second
	// keepalivePing and keepaliveTimeout find dead peers of connections
	// that carry long-lived streams (health Watch).
	keepalivePing    = 2 * time.Minute
	keepaliveTimeout = 20 * time.Second

	httpReadHeaderTimeout = 5 * time.Second
	// httpReadTimeout bounds reading a whole request; the largest is a
	// POST /json body of at most 1 MiB.
	httpReadTimeout = 10 * time.Second
	// httpWriteTimeout bounds writing a response; no endpoint streams.
	httpWriteTimeout   = 30 * time.Second
	httpMaxHeaderBytes = 16 << 10
	// grpcMaxHeaderListBytes bounds a gRPC call's headers, as Envoy's own
	// default (max_request_headers_kb, 60 KiB) bounds a request's: what
	// Envoy sends us is a few hundred bytes. grpc-go's default, 16 MiB,
	// let each stream of a connection hold that much while decoding.
	grpcMaxHeaderListBytes = 64 << 10
	// grpcConnWindow is a gRPC connection's window. grpc-go gives it
	// back as bytes arrive, whether or not a handler reads them, so it
	// bounds nothing held; 1 MiB keeps a large RLQS report from waiting
	// on window updates.
	grpcConnWindow = 1 << 20
)

// The shortest durations the bound flags take: below them a connection
// or a call is cut before it can do anything (1ns was accepted once).
// They are far below any deployment's values, and low enough for tests.
const (
	minRequestTimeout = 10 * time.Millisecond  // --grpc-request-timeout
	minConnAge        = 100 * time.Millisecond // --grpc-max-connection-age, unless 0
	minIdleTimeout    = 100 * time.Millisecond // --idle-timeout
)

// TLSHandshakeSlots is how many TLS handshakes may compute at once (a
// signature, a key agreement, a client certificate's check): a quarter of
// the CPUs the sidecar may use, and at least one. More wait, each for at
// most --grpc-request-timeout. One slot passes over 1,400 handshakes a
// second (0.7 ms each with the client's share, one after another on 2
// CPUs), so every worker of a few hundred Envoys reconnecting at once
// waits well under that timeout.
func TLSHandshakeSlots() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// Server holds the bounds on the servers' resources that are flags; cmd
// defines them. Check them before use.
type Server struct {
	GRPCMaxStreams uint          // concurrent streams per gRPC connection
	GRPCMaxConns   int           // open gRPC connections; 0: no cap
	HTTPMaxConns   int           // open connections on each HTTP listener; 0: no cap
	RequestTimeout time.Duration // for a stream's request and the handshakes
	MaxConnAge     time.Duration // of a gRPC connection; 0: no limit
	IdleTimeout    time.Duration // of a gRPC or HTTP connection
}

// Check reports the first flag out of range.
func (s *Server) Check() error {
	switch {
	case s.GRPCMaxStreams < 1 || s.GRPCMaxStreams > math.MaxUint32:
		return fmt.Errorf("--grpc-max-streams: want 1 to %d, got %d", uint32(math.MaxUint32), s.GRPCMaxStreams)
	case s.GRPCMaxConns < 0:
		return fmt.Errorf("--grpc-max-conns: want 0 (no cap) or more, got %d", s.GRPCMaxConns)
	case s.HTTPMaxConns < 0:
		return fmt.Errorf("--http-max-conns: want 0 (no cap) or more, got %d", s.HTTPMaxConns)
	case s.RequestTimeout < minRequestTimeout:
		return fmt.Errorf("--grpc-request-timeout: want %v or more, got %v", minRequestTimeout, s.RequestTimeout)
	case s.MaxConnAge != 0 && s.MaxConnAge < minConnAge:
		return fmt.Errorf("--grpc-max-connection-age: want 0 (no limit) or %v or more, got %v", minConnAge, s.MaxConnAge)
	case s.IdleTimeout < minIdleTimeout:
		return fmt.Errorf("--idle-timeout: want %v or more, got %v", minIdleTimeout, s.IdleTimeout)
	}
	return nil
}

// grpcWorking is how long after its last call a gRPC connection is
// working, and not closed to make room at --grpc-max-conns: --idle-timeout,
// after which grpc-go closes a connection without calls anyway, and at
// least --grpc-request-timeout, which every unary call ends within, so
// that a call in flight always counts.
func (s *Server) grpcWorking() time.Duration {
	return max(s.IdleTimeout, s.RequestTimeout)
}

// CapGRPC caps the connections the gRPC listener l has open at once at
// GRPCMaxConns (0: no cap), a connection working for grpcWorking after
// its last call (its gRPC server's Messages tell it).
func (s *Server) CapGRPC(l net.Listener) net.Listener {
	return capListener(l, s.GRPCMaxConns, s.grpcWorking())
}

// CapHTTP caps the connections the HTTP listener l has open at once at
// HTTPMaxConns (0: no cap), a connection working while a request is in
// flight on it (its HTTPServer tells it).
func (s *Server) CapHTTP(l net.Listener) net.Listener {
	return capListener(l, s.HTTPMaxConns, 0)
}

// capListener caps the connections l has open at once at n (0: no
// cap). A new client never waits for room: of the connections not
// working, the one that has sent nothing for longest, of the peer holding
// the most, is closed for it, so no client can hold the cap (Listener).
// A connection works for working after its last call (gRPC's are told by
// Messages) and while a request is in flight (HTTP's, from ConnState).
func capListener(l net.Listener, n int, working time.Duration) net.Listener {
	if n <= 0 {
		return l
	}
	cl := NewListener(l, n)
	cl.Working = working
	return cl
}

// busy tells a capped listener's connection (Listener) whether a
// request is in flight on it, so that it is not closed to make room
// meanwhile.
func busy(c net.Conn, s http.ConnState) {
	if b, ok := c.(interface{ Busy(bool) }); ok {
		b.Busy(s == http.StateActive)
	}
}

// HTTPServer returns an HTTP server for h with the bounds applied.
func (s *Server) HTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		ConnState:         busy,
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
	}
}
