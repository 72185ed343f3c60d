package bounds

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// Streams cancels a gRPC stream whose request message does not
// arrive within Timeout, and ends streaming RPCs when the server stops.
//
// grpc-go reads a unary call's request before it calls the handler, so no
// interceptor or handler sees a stream that sent only HEADERS; the
// transport then waits for the message under the stream's context. An
// InTapHandle sees every stream as it opens and returns that context, so
// the bound lives there:
//   - A unary call gets timeout as its deadline, unless the client's own
//     deadline is sooner. Its request is all it waits for, and no real
//     call takes seconds, so bounding the call bounds the wait. Envoy sends
//     grpc-timeout (20 ms by default), so its calls pay nothing here.
//   - A streaming call (health Watch, reflection) may rightly run for
//     hours, so only its first message is timed: Intercept stops the
//     timer when it arrives. A method whose first message may be large
//     (an RLQS report of up to 16 MiB) has a time of its own in
//     FirstMessage, since its message counts as arrived only once it is
//     read and decoded whole.
//
// Its fields are set before the server serves and only read after.
type Streams struct {
	Timeout   time.Duration   // more than 0
	Streaming map[string]bool // full method names of streaming methods
	// FirstMessage gives streaming methods a longer time than Timeout
	// for their first message, by full method name.
	FirstMessage map[string]time.Duration
	Stopping     context.Context // ends when the server starts to stop
	Running      Handlers        // the streaming calls whose handlers run
}

// firstMessageKey keys a streaming call's first-message timer in its
// context.
type firstMessageKey struct{}

// Tap is the server's grpc.InTapHandle.
func (b *Streams) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !b.Streaming[info.FullMethodName] {
		if d, ok := ctx.Deadline(); ok && time.Until(d) <= b.Timeout {
			return ctx, nil
		}
		// The transport cancels the stream's context, this one's parent,
		// when the stream ends, which stops the timer.
		ctx, cancel := context.WithTimeout(ctx, b.Timeout)
		_ = cancel
		return ctx, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	first := time.AfterFunc(max(b.Timeout, b.FirstMessage[info.FullMethodName]), cancel)
	stopping := context.AfterFunc(b.Stopping, cancel)
	context.AfterFunc(ctx, func() {
		first.Stop()
		stopping()
	})
	return context.WithValue(ctx, firstMessageKey{}, first), nil
}

// Intercept is the server's stream interceptor: it stops a streaming
// call's first-message timer once the message has arrived.
func (b *Streams) Intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if t, ok := ss.Context().Value(firstMessageKey{}).(*time.Timer); ok {
		ss = &firstMessageStream{ServerStream: ss, timer: t}
	}
	return handler(srv, ss)
}

// firstMessageStream stops timer once a message has been received.
type firstMessageStream struct {
	grpc.ServerStream
	timer *time.Timer // nil once stopped
}

func (s *firstMessageStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	return err
}

// StreamingMethods returns the full names of g's streaming methods.
func StreamingMethods(g *grpc.Server) map[string]bool {
	out := map[string]bool{}
	for svc, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			if m.IsClientStream || m.IsServerStream {
				out["/"+svc+"/"+m.Name] = true
			}
		}
	}
	return out
}

// Handlers counts the streaming calls whose handlers are running, so
// that shutdown knows when all have returned. What a call still holds
// then is its answers on the way to the client, which a client that
// stopped reading never takes: grpc-go ends a stream only once the data
// queued before its trailers is sent, and so its graceful stop would wait
// for --shutdown-timeout (an RLQS client that stopped reading held it
// 10 s).
//
// Unary calls are not counted: an interceptor would take RLS off its
// direct encoding (pkg/envoy), and each already ends by its deadline,
// --grpc-request-timeout at most (see Streams).
//
// The zero value is ready to use, and it is safe for concurrent use.
type Handlers struct {
	n     atomic.Int64
	watch atomic.Bool // Done was called: end must look for idle
	mu    sync.Mutex
	idle  chan struct{} // closed when n drops to 0, once Done set it
}

func (h *Handlers) end() {
	if h.n.Add(-1) != 0 || !h.watch.Load() {
		return
	}
	h.mu.Lock()
	if h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
	h.mu.Unlock()
}

// Done returns a channel closed once no handler runs (at once if none
// does).
func (h *Handlers) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watch.Store(true) // before n is read: an end after the read sees it
	ch := make(chan struct{})
	if h.n.Load() == 0 {
		close(ch)
	} else {
		h.idle = ch
	}
	return ch
}

// Stream is the server's stream interceptor that counts handlers.
func (h *Handlers) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	h.n.Add(1)
	defer h.end()
	return handler(srv, ss)
}
