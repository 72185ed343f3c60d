package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
)

// tlsRules are userRules with room for every call a TLS test makes.
var tlsRules = strings.Replace(userRules, "requests_per_unit: 3", "requests_per_unit: 1000", 1)

// dial returns a gRPC client of s over TLS with cfg, or plaintext if cfg
// is nil.
func (s *sidecar) dial(t *testing.T, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// decide calls ShouldRateLimit on conn and returns the serial of the
// server certificate of the connection the call went over.
func decide(t *testing.T, conn *grpc.ClientConn) (*big.Int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, userRequest("alice", 1), grpc.Peer(&p))
	if err != nil {
		return nil, err
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit: %v, want OK", resp)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, fmt.Errorf("the call's peer has no TLS: %T", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber, nil
}

// served makes a new TLS connection to s with cfg and returns the serial
// of the certificate the server presented.
func (s *sidecar) served(t *testing.T, cfg *tls.Config) (*big.Int, error) {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.grpcAddr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// hasSample reports whether the exposition body holds the sample line.
func hasSample(body, line string) bool {
	return strings.Contains(body, "\n"+line+"\n")
}

func (s *sidecar) metrics(t *testing.T) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	r, err := client.Get("http://" + s.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTLS: with a certificate and key, RLS, health and reflection answer
// over TLS and plaintext is refused (the rest of TLS: internal/grpctls;
// its bounds there too, under internal/bounds's options). The certificate
// and key come from the environment; Envoy Gateway's
// GRPC_SERVER_TLS_CA_CERT, which envoyproxy/ratelimit never reads, does
// not make client certificates required (the reference's TLS variables:
// internal/refenv).
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	s := startSidecar(t, sidecarOpts{rules: tlsRules, env: map[string]string{
		"RLS_GRPC_TLS_CERT":       pair.CertFile,
		"RLS_GRPC_TLS_KEY":        pair.KeyFile,
		"GRPC_SERVER_TLS_CA_CERT": ca.File,
	}})
	conn := s.dial(t, ca.ClientConfig(t, nil))
	serial, err := decide(t, conn)
	if err != nil {
		t.Fatal(err)
	}
	if serial.Cmp(pair.Cert.SerialNumber) != 0 {
		t.Errorf("served serial %X, want %X", serial, pair.Cert.SerialNumber)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health over TLS: %v, %v", h, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	list, err := stream.Recv()
	if err != nil || !strings.Contains(list.String(), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection over TLS: %v, %v", list, err)
	}
	stream.CloseSend() //nolint:errcheck // the test is done with it

	plain := s.dial(t, nil)
	_, err = healthpb.NewHealthClient(plain).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext health check: %v, want Unavailable", err)
	}
	// The TLS metrics are served (handshake failures and reloads:
	// internal/grpctls).
	if want := fmt.Sprintf("ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds %g", float64(pair.Cert.NotAfter.Unix())); !hasSample(s.metrics(t), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// TestTLSReloadOnSIGHUP: SIGHUP reads the TLS files too. Here they change
// where no watch sees them: behind links to a directory that is not
// watched, written in place; the next poll is a minute away.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	first, second := ca.Issue(t, "first"), ca.Issue(t, "second")
	real, linked := filepath.Join(dir, "real"), filepath.Join(dir, "linked")
	for _, d := range []string{real, linked} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range first.Secret(t, nil) {
		if err := os.WriteFile(filepath.Join(real, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(real, name), filepath.Join(linked, name)); err != nil {
			t.Fatal(err)
		}
	}
	s := startSidecar(t, sidecarOpts{rules: tlsRules, args: []string{"--grpc-tls-cert", filepath.Join(linked, "tls.crt"), "--grpc-tls-key", filepath.Join(linked, "tls.key")}})
	// A call answered: the server runs, and so SIGHUP is caught.
	if _, err := decide(t, s.dial(t, ca.ClientConfig(t, nil))); err != nil {
		t.Fatal(err)
	}
	for name, data := range second.Secret(t, nil) {
		if err := os.WriteFile(filepath.Join(real, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		serial, err := s.served(t, ca.ClientConfig(t, nil))
		return err == nil && serial.Cmp(second.Cert.SerialNumber) == 0
	})
}
