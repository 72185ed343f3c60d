package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// These tests drive RLQS through the whole sidecar, for its wiring
// (flags, store, listener, TLS, bounds, metrics, tracing, health), with
// internal/rlqstest playing Envoy's rate_limit_quota filter; pkg/rlqs's
// tests specify what it assigns. Windows are a day long: a grant taken
// in the last seconds of its window is answered DENY_ALL instead
// (docs/rlqs.md), and a day makes that a 2-in-86,400 chance per grant,
// not 2 in 60.

// rlqsRules is the rule file of these tests: domain edge, a bucket
// {user: <any>} served as a fixed window of 1000 a day, leased 8 hits at
// most, so every grant is small and quick to spend. %s is put before
// descriptors (a failure_mode line, or nothing).
const rlqsRules = "domain: edge\n%sdescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1000, lease: 8}\n"

var alice = map[string]string{"user": "alice"}

// grpcConn returns a client of addr over TLS with cfg, or plaintext if
// cfg is nil, closed when the test ends.
func grpcConn(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rlqsEnvoy opens an RLQS stream on conn for domain as Envoy's filter
// with no_assignment_behavior DENY_ALL, on the clock clk (real time if
// nil). The stream ends with the test, or after 30 s, so that a server
// that stops answering fails the test instead of hanging it.
func rlqsEnvoy(t *testing.T, conn grpc.ClientConnInterface, domain string, clk *storetest.Clock) (*rlqstest.Envoy, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var o rlqstest.Options
	if clk != nil {
		o.Now = clk.Now
	}
	e, err := rlqstest.Dial(ctx, conn, domain, o)
	if err != nil {
		cancel()
		return nil, err
	}
	t.Cleanup(func() {
		e.Close()
		cancel()
	})
	return e, nil
}

// subscribe sends the bucket's first request, which subscribes it, and
// returns the strategy the sidecar assigned in answer.
func subscribe(e *rlqstest.Envoy, id map[string]string) (*typev3.RateLimitStrategy, error) {
	if _, err := e.Request(id); err != nil {
		return nil, err
	}
	return e.Strategy(id), nil
}

// tokens is the size of s's token bucket, 0 if s is not one.
func tokens(s *typev3.RateLimitStrategy) uint32 {
	return s.GetTokenBucket().GetMaxTokens()
}

// TestRLQSServed: how the sidecar wires RLQS. On Redis it serves it on
// the gRPC port, under its TLS and beside RLS on one connection, with
// the --rlqs-* flags (--rlqs-max-buckets 1: a second bucket of a rule is
// refused, answered by --failure-mode closed), its metrics, a span of
// its own for each report with --tracing, and gRPC health for its
// service name. On the memory store, which no fleet shares, it is not
// served: Envoy's stream ends with Unimplemented, health knows no such
// service, the log says why, and RLS answers.
func TestRLQSServed(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		srv := redistest.StartServer(t)
		ca := certtest.NewCA(t, t.TempDir(), "ca")
		server := ca.Issue(t, "server")
		r := otlptest.StartGRPC(t)
		s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr, "--grpc-tls-cert", server.CertFile, "--grpc-tls-key", server.KeyFile,
			"--rlqs-max-buckets", "1", "--failure-mode", "closed", "--redis-timeout", "5s",
			"--tracing", "--tracing-protocol", "grpc", "--tracing-endpoint", r.URL, "--tracing-sampling-rate", "1"}})
		conn := grpcConn(t, s.grpcAddr, ca.ClientConfig(t, nil))
		e, err := rlqsEnvoy(t, conn, "edge", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := subscribe(e, alice)
		if err != nil {
			t.Fatalf("RLQS over TLS: %v", err)
		}
		if n := tokens(got); n < 1 || n > 8 {
			t.Errorf("RLQS over TLS assigned %s; want a token bucket of 1 to 8 tokens (the lease)", rlqstest.Describe(got))
		}
		if got, err := subscribe(e, map[string]string{"user": "bob"}); err != nil || rlqstest.Describe(got) != "DENY_ALL" {
			t.Errorf("a second bucket past --rlqs-max-buckets 1: %s, %v; want DENY_ALL", rlqstest.Describe(got), err)
		}
		const refused = `ratelimit_sidecar_rlqs_assignments_total{action="deny_all",domain="edge",reason="refused"}`
		if n := metricValue(t, s, refused); n != 1 {
			t.Errorf("%s %g; want 1", refused, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, userRequest("carol", 1))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("RLS on the connection RLQS used: %v, %v; want OK", resp, err)
		}
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rlqs.ServiceName})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %s: %v, %v; want SERVING", rlqs.ServiceName, h.GetStatus(), err)
		}

		e.Close()
		if err := s.stop(); err != nil { // sends the spans still queued
			t.Fatal(err)
		}
		var reports int
		for _, sp := range r.WaitSpans(1, 10*time.Second) {
			if sp.GetName() == "rlqs report" && sp.Scope == "github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs" {
				reports++
			}
		}
		if reports == 0 {
			t.Errorf("no rlqs report span of pkg/rlqs's tracer received; want one a report")
		}
	})

	t.Run("memory", func(t *testing.T) {
		s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, "")})
		conn := grpcConn(t, s.grpcAddr, nil)
		e, err := rlqsEnvoy(t, conn, "edge", nil)
		if err == nil {
			_, err = subscribe(e, alice)
		}
		if err == nil {
			err = e.Err() // refused before the subscription went out
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("RLQS on the memory store: %v; want Unimplemented", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rlqs.ServiceName}); status.Code(err) != codes.NotFound {
			t.Errorf("health of %s on the memory store: %v; want NotFound", rlqs.ServiceName, err)
		}
		if resp, err := s.rls.ShouldRateLimit(ctx, userRequest("bob", 1)); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("RLS on the memory store: %v, %v; want OK", resp, err)
		}
		if l := s.log.String(); !strings.Contains(l, "rlqs not served: quota is shared through Redis") {
			t.Errorf("the log does not say why RLQS is not served:\n%s", l)
		}
	})
}

// TestRLQSStreamsAreStreams: the sidecar bounds a unary call by
// --grpc-request-timeout and a streaming call only until its first
// message. An RLQS stream is one of the streaming calls, so it outlives
// the timeout: Envoy keeps one stream open for as long as it runs.
func TestRLQSStreamsAreStreams(t *testing.T) {
	srv := redistest.StartServer(t)
	s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr, "--grpc-request-timeout", "100ms"}})
	e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, nil), "edge", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := subscribe(e, alice); err != nil || tokens(got) == 0 {
		t.Fatalf("subscription: %s, %v; want a token bucket", rlqstest.Describe(got), err)
	}
	time.Sleep(300 * time.Millisecond) // three request timeouts
	if err := e.Report(); err != nil {
		t.Errorf("report 300 ms after the subscription, with --grpc-request-timeout 100ms: %v; want the stream open", err)
	}
}
