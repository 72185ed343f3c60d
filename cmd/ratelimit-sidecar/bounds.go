package main

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
)

// Bounds on what a client can make the servers hold. The ones a
// deployment may need to tune are flags, in bounds; docs/bounds.md
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

// newMessageBounds returns the bounds on the bytes of gRPC messages on
// their way in (bounds.Messages): 1 MiB a message, an RLQS report
// 16 MiB, counted past bounds.Window against bounds.ConnBytes and
// bounds.TotalBytes, each whole within bounds.MessageTimeout. Its Work is
// set once the services are registered (workMethods).
func newMessageBounds() *bounds.Messages {
	return &bounds.Messages{
		Default:        bounds.MaxBytes,
		Methods:        map[string]int{rlqsMethod: bounds.RLQSMaxBytes},
		ConnBytes:      bounds.ConnBytes,
		TotalBytes:     bounds.TotalBytes,
		Timeout:        bounds.MessageTimeout,
		BlockedTimeout: bounds.BlockedMessageTimeout,
		HeaderBytes:    grpcMaxHeaderListBytes,
	}
}

// rlqsMethod is the RLQS stream's full method name.
const rlqsMethod = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"

// workMethods returns the full names of the methods whose calls make a
// connection working, which its listener does not close to make room
// (bounds.Listener): the unary ones, and RLQS, whose reports come at
// Envoy's reporting interval. A health Watch or a reflection stream is
// not work: it holds a connection without using it.
func workMethods(g *grpc.Server) map[string]bool {
	out := map[string]bool{rlqsMethod: true}
	for svc, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			if !m.IsClientStream && !m.IsServerStream {
				out["/"+svc+"/"+m.Name] = true
			}
		}
	}
	return out
}

// The shortest durations the bound flags take: below them a connection
// or a call is cut before it can do anything (1ns was accepted once).
// They are far below any deployment's values, and low enough for tests.
const (
	minRequestTimeout = 10 * time.Millisecond  // --grpc-request-timeout
	minConnAge        = 100 * time.Millisecond // --grpc-max-connection-age, unless 0
	minIdleTimeout    = 100 * time.Millisecond // --idle-timeout
)

// tlsHandshakeSlots is how many TLS handshakes may compute at once (a
// signature, a key agreement, a client certificate's check): a quarter of
// the CPUs the sidecar may use, and at least one. More wait, each for at
// most --grpc-request-timeout. One slot passes over 1,400 handshakes a
// second (0.7 ms each with the client's share, one after another on 2
// CPUs), so every worker of a few hundred Envoys reconnecting at once
// waits well under that timeout.
func tlsHandshakeSlots() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// serverBounds are the flags that bound the servers' resources.
type serverBounds struct {
	grpcMaxStreams uint          // concurrent streams per gRPC connection
	grpcMaxConns   int           // open gRPC connections; 0: no cap
	httpMaxConns   int           // open connections on each HTTP listener; 0: no cap
	requestTimeout time.Duration // for a stream's request and the handshakes
	maxConnAge     time.Duration // of a gRPC connection; 0: no limit
	idleTimeout    time.Duration // of a gRPC or HTTP connection
}

// check reports the first flag out of range.
func (b *serverBounds) check() error {
	switch {
	case b.grpcMaxStreams < 1 || b.grpcMaxStreams > math.MaxUint32:
		return fmt.Errorf("--grpc-max-streams: want 1 to %d, got %d", uint32(math.MaxUint32), b.grpcMaxStreams)
	case b.grpcMaxConns < 0:
		return fmt.Errorf("--grpc-max-conns: want 0 (no cap) or more, got %d", b.grpcMaxConns)
	case b.httpMaxConns < 0:
		return fmt.Errorf("--http-max-conns: want 0 (no cap) or more, got %d", b.httpMaxConns)
	case b.requestTimeout < minRequestTimeout:
		return fmt.Errorf("--grpc-request-timeout: want %v or more, got %v", minRequestTimeout, b.requestTimeout)
	case b.maxConnAge != 0 && b.maxConnAge < minConnAge:
		return fmt.Errorf("--grpc-max-connection-age: want 0 (no limit) or %v or more, got %v", minConnAge, b.maxConnAge)
	case b.idleTimeout < minIdleTimeout:
		return fmt.Errorf("--idle-timeout: want %v or more, got %v", minIdleTimeout, b.idleTimeout)
	}
	return nil
}

// grpcOptions returns the gRPC server's options that bound its
// resources. grace is how long an RPC in flight on a connection past its
// age may take to finish.
func (b *serverBounds) grpcOptions(sb *bounds.Streams, grace time.Duration, id bounds.IDBounds) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(b.grpcMaxStreams)),
		// RLQS reports may be up to bounds.RLQSMaxBytes; its codec
		// holds every other message to bounds.MaxBytes.
		grpc.MaxRecvMsgSize(bounds.RLQSMaxBytes),
		grpc.ForceServerCodecV2(envoy.Codec(bounds.NewCodec(id))),
		grpc.MaxHeaderListSize(grpcMaxHeaderListBytes),
		// A static window: grpc-go's own grows with a bandwidth the
		// client measures, up to 16 MiB a stream that a handler need not
		// be reading (bounds.Window).
		grpc.StaticStreamWindowSize(bounds.Window),
		grpc.StaticConnWindowSize(grpcConnWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     b.idleTimeout,
			MaxConnectionAge:      b.maxConnAge, // 0: grpc-go's infinity
			MaxConnectionAgeGrace: grace,
			Time:                  keepalivePing,
			Timeout:               keepaliveTimeout,
		}),
		// A client must finish the TLS and HTTP/2 handshakes, as it must
		// send a request, within the request timeout.
		grpc.ConnectionTimeout(b.requestTimeout),
		grpc.InTapHandle(sb.Tap),
		grpc.ChainStreamInterceptor(sb.Running.Stream, sb.Intercept),
	}
}

// grpcWorking is how long after its last call a gRPC connection is
// working, and not closed to make room at --grpc-max-conns: --idle-timeout,
// after which grpc-go closes a connection without calls anyway, and at
// least --grpc-request-timeout, which every unary call ends within, so
// that a call in flight always counts.
func (b *serverBounds) grpcWorking() time.Duration {
	return max(b.idleTimeout, b.requestTimeout)
}

// busy tells a capped listener's connection (bounds.Listener) whether a
// request is in flight on it, so that it is not closed to make room
// meanwhile.
func busy(c net.Conn, s http.ConnState) {
	if b, ok := c.(interface{ Busy(bool) }); ok {
		b.Busy(s == http.StateActive)
	}
}

// httpServer returns an HTTP server for h with the bounds applied.
func (b *serverBounds) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		ConnState:         busy,
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       b.idleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
	}
}
