package bounds

import (
	"context"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
)

// rlqsMethod is the RLQS stream's full method name.
const rlqsMethod = rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName

// GRPC is what bounds one gRPC server besides its options: the time its
// calls have to send their request (Streams) and the bytes of messages
// on their way in (Messages). Build it with Server.NewGRPC, pass its
// Options to grpc.NewServer, and call Registered once the services are.
type GRPC struct {
	Streams  Streams
	Messages *Messages
	s        Server
}

// NewGRPC returns the bounds of a gRPC server under s. stopping ends when
// the server starts to stop: its streaming calls end then
// (Streams.Stopping).
func (s *Server) NewGRPC(stopping context.Context) *GRPC {
	return &GRPC{
		Streams:  Streams{Timeout: s.RequestTimeout, Stopping: stopping},
		Messages: newMessages(),
		s:        *s,
	}
}

// newMessages returns the bounds on the bytes of gRPC messages on their
// way in: 1 MiB a message, an RLQS report 16 MiB, counted past Window
// against ConnBytes and TotalBytes, each whole within MessageTimeout. Its
// Work is set once the services are registered (workMethods).
func newMessages() *Messages {
	return &Messages{
		Default:        MaxBytes,
		Methods:        map[string]int{rlqsMethod: RLQSMaxBytes},
		ConnBytes:      ConnBytes,
		TotalBytes:     TotalBytes,
		Timeout:        MessageTimeout,
		BlockedTimeout: BlockedMessageTimeout,
		HeaderBytes:    grpcMaxHeaderListBytes,
	}
}

// Options returns the gRPC server's options that bound its resources:
// creds, with every connection's messages bounded after its handshakes
// (Messages), and the limits of Server. grace is how long an RPC in
// flight on a connection past its age may take to finish; id bounds an
// RLQS report's bucket ids (Codec).
func (g *GRPC) Options(creds credentials.TransportCredentials, grace time.Duration, id IDBounds) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.Creds(g.Messages.Creds(creds)),
		grpc.MaxConcurrentStreams(uint32(g.s.GRPCMaxStreams)),
		// RLQS reports may be up to RLQSMaxBytes; its codec holds every
		// other message to MaxBytes.
		grpc.MaxRecvMsgSize(RLQSMaxBytes),
		grpc.ForceServerCodecV2(envoy.Codec(NewCodec(id))),
		grpc.MaxHeaderListSize(grpcMaxHeaderListBytes),
		// A static window: grpc-go's own grows with a bandwidth the
		// client measures, up to 16 MiB a stream that a handler need not
		// be reading (Window).
		grpc.StaticStreamWindowSize(Window),
		grpc.StaticConnWindowSize(grpcConnWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     g.s.IdleTimeout,
			MaxConnectionAge:      g.s.MaxConnAge, // 0: grpc-go's infinity
			MaxConnectionAgeGrace: grace,
			Time:                  keepalivePing,
			Timeout:               keepaliveTimeout,
		}),
		// A client must finish the TLS and HTTP/2 handshakes, as it must
		// send a request, within the request timeout.
		grpc.ConnectionTimeout(g.s.RequestTimeout),
		grpc.InTapHandle(g.Streams.Tap),
		grpc.ChainStreamInterceptor(g.Streams.Running.Stream, g.Streams.Intercept),
	}
}

// Registered completes g once every service is registered on srv: which
// methods stream, and which make their connection working.
func (g *GRPC) Registered(srv *grpc.Server) {
	g.Streams.Streaming = StreamingMethods(srv)
	// A report is read and decoded whole before it counts as arrived:
	// up to 16 MiB, which on a busy machine takes more than the request
	// timeout. MessageTimeout bounds its arrival anyway.
	g.Streams.FirstMessage = map[string]time.Duration{rlqsMethod: MessageTimeout}
	g.Messages.Work = workMethods(srv)
}

// workMethods returns the full names of the methods whose calls make a
// connection working, which its listener does not close to make room
// (Listener): the unary ones, and RLQS, whose reports come at Envoy's
// reporting interval. A health Watch or a reflection stream is not work:
// it holds a connection without using it.
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
