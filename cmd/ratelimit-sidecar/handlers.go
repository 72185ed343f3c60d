package main

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
)

// handlers counts the gRPC calls whose handlers are running, so that
// shutdown knows when all have returned. What a call still holds then is
// its answer on the way to the client, which a client that stopped
// reading never takes: grpc-go ends a stream only once the data queued
// before its trailers is sent, and so its graceful stop would wait for
// --shutdown-timeout (an RLQS client that stopped reading held it 10 s).
//
// The zero value is ready to use, and it is safe for concurrent use.
type handlers struct {
	n  atomic.Int64
	mu sync.Mutex
	// idle, when set, is closed when n drops to 0.
	idle chan struct{}
}

func (h *handlers) start() { h.n.Add(1) }

func (h *handlers) end() {
	if h.n.Add(-1) != 0 {
		return
	}
	h.mu.Lock()
	if h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
	h.mu.Unlock()
}

// done returns a channel closed once no handler runs (at once if none
// does).
func (h *handlers) done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan struct{})
	if h.n.Load() == 0 {
		close(ch)
	} else {
		h.idle = ch
	}
	return ch
}

// unary and stream are the server's interceptors that count handlers.
func (h *handlers) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	h.start()
	defer h.end()
	return handler(ctx, req)
}

func (h *handlers) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	h.start()
	defer h.end()
	return handler(srv, ss)
}
