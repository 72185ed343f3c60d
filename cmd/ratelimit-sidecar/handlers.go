package main

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
)

// handlers counts the streaming calls whose handlers are running, so
// that shutdown knows when all have returned. What a call still holds
// then is its answers on the way to the client, which a client that
// stopped reading never takes: grpc-go ends a stream only once the data
// queued before its trailers is sent, and so its graceful stop would wait
// for --shutdown-timeout (an RLQS client that stopped reading held it
// 10 s).
//
// Unary calls are not counted: an interceptor would take RLS off its
// direct encoding (pkg/envoy), and each already ends by its deadline,
// --grpc-request-timeout at most (see streamBound).
//
// The zero value is ready to use, and it is safe for concurrent use.
type handlers struct {
	n     atomic.Int64
	watch atomic.Bool // done was called: end must look for idle
	mu    sync.Mutex
	idle  chan struct{} // closed when n drops to 0, once done set it
}

func (h *handlers) end() {
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

// done returns a channel closed once no handler runs (at once if none
// does).
func (h *handlers) done() <-chan struct{} {
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

// stream is the server's stream interceptor that counts handlers.
func (h *handlers) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	h.n.Add(1)
	defer h.end()
	return handler(srv, ss)
}
