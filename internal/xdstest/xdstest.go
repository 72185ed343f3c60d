// Package xdstest runs, for tests, go-control-plane's own xDS server and
// snapshot cache on a loopback port, as Envoy Gateway runs them for its
// rate-limit deployment, and records every request its clients send:
// their ACKs, their NACKs with error_detail, their node and their headers.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Wait bounds every wait of this package's helpers.
const Wait = 10 * time.Second

// Request is one DiscoveryRequest a client sent, with its stream's
// headers.
type Request struct {
	*discovery.DiscoveryRequest
	Stream   int64
	Headers  metadata.MD
	Received time.Time
}

// NACK reports whether the request rejects the last response.
func (r Request) NACK() bool { return r.GetErrorDetail() != nil }

// Server is a running xDS server. Its methods are safe for concurrent use.
type Server struct {
	// Addr is where it listens, host:port on 127.0.0.1; a restarted
	// server listens there again.
	Addr  string
	tls   *tls.Config
	cache cachev3.SnapshotCache

	mu       sync.Mutex // guards the rest
	grpc     *grpc.Server
	stop     context.CancelFunc
	served   chan struct{} // closed when Serve returns
	headers  map[int64]metadata.MD
	requests []Request
	changed  chan struct{} // size 1: a nudge to waiters; they look at requests themselves
}

// Option changes a Server.
type Option func(*Server)

// WithTLS serves TLS with cfg (mutual TLS if cfg requires client
// certificates).
func WithTLS(cfg *tls.Config) Option { return func(s *Server) { s.tls = cfg } }

// Start starts a server on a free loopback port; the test's cleanup stops
// it.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{headers: map[int64]metadata.MD{}, changed: make(chan struct{}, 1)}
	for _, o := range opts {
		o(s)
	}
	s.cache = cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

// Stop stops the server, closing every stream. A stopped server can be
// restarted.
func (s *Server) Stop() {
	s.mu.Lock()
	g, stop, served := s.grpc, s.stop, s.served
	s.grpc = nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	stop()
	g.Stop()
	<-served
}

// Restart starts a stopped server again on its address. With fresh, it
// has a new, empty snapshot cache, as a restarted control plane has;
// else it keeps its snapshots.
func (s *Server) Restart(t testing.TB, fresh bool) {
	t.Helper()
	if fresh {
		s.cache = cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	}
	// Go listens with SO_REUSEADDR: the old connections' TIME_WAIT does
	// not hold the port.
	lis, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	s.serve(lis)
}

func (s *Server) serve(lis net.Listener) {
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	g := grpc.NewServer(opts...)
	ctx, stop := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.headers[id] = md
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			s.mu.Lock()
			s.requests = append(s.requests, Request{DiscoveryRequest: req, Stream: id, Headers: s.headers[id], Received: time.Now()})
			s.mu.Unlock()
			select {
			case s.changed <- struct{}{}:
			default:
			}
			return nil
		},
	}
	discovery.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, s.cache, cb))
	served := make(chan struct{})
	s.mu.Lock()
	s.grpc, s.stop, s.served = g, stop, served
	s.mu.Unlock()
	go func() {
		defer close(served)
		g.Serve(lis) //nolint:errcheck // Stop ends it
	}()
}

// Set makes configs the snapshot of version for node: every client of
// node gets them.
func (s *Server) Set(t testing.TB, node, version string, configs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Requests returns every request received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Await waits, at most Wait, for a request that matches, skipping the
// first from requests, and returns it and its index. One goroutine at a
// time may wait. what describes the request for the failure message.
func (s *Server) Await(t testing.TB, from int, what string, matches func(Request) bool) (Request, int) {
	t.Helper()
	deadline := time.NewTimer(Wait)
	defer deadline.Stop()
	for {
		reqs := s.Requests()
		for i := from; i < len(reqs); i++ {
			if matches(reqs[i]) {
				return reqs[i], i
			}
		}
		select {
		case <-s.changed:
		case <-deadline.C:
			t.Fatalf("no request %s within %v; got %d requests", what, Wait, len(reqs))
			return Request{}, 0
		}
	}
}

// RateLimitConfig is a RateLimitConfig named domain for domain whose
// descriptors are one key with requests per unit each.
func RateLimitConfig(domain, key string, requests uint32, unit rlsconf.RateLimitUnit) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key:       key,
		RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: requests},
	}}}
}
