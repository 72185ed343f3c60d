package main

import (
	"context"
	"crypto/tls"
	"errors"
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
// over TLS and plaintext is refused (the rest of TLS: internal/grpctls). The certificate and key come from the
// environment; Envoy Gateway's GRPC_SERVER_TLS_CA_CERT, which
// envoyproxy/ratelimit never reads, does not make client certificates
// required.
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
	// A client that does not trust the certificate: the server hears of
	// it through the client's alert.
	other := certtest.NewCA(t, dir, "other")
	if _, err := decide(t, s.dial(t, other.ClientConfig(t, nil))); status.Code(err) != codes.Unavailable {
		t.Errorf("a client trusting another CA: %v, want Unavailable", err)
	}
	waitFor(t, func() bool {
		return hasSample(s.metrics(t), "ratelimit_sidecar_tls_handshake_failures_total 2")
	})
	body := s.metrics(t)
	for _, want := range []string{
		fmt.Sprintf("ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds %g", float64(pair.Cert.NotAfter.Unix())),
		"ratelimit_sidecar_tls_last_reload_successful 1",
		`ratelimit_sidecar_tls_reloads_total{result="failure"} 0`,
	} {
		if !hasSample(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	logs := s.log.String()
	for _, want := range []string{"first record does not look like a TLS handshake", "remote error: tls: bad certificate"} {
		if !strings.Contains(logs, `"msg":"tls handshake failed"`) || !strings.Contains(logs, want) {
			t.Errorf("no Warn about a failed handshake with %q:\n%s", want, logs)
		}
	}
}

// TestTLSBounds: the gRPC bounds hold over TLS: a connection must finish
// its TLS handshake within --grpc-request-timeout, as its HTTP/2 one, and
// connections in their handshake cannot hold --grpc-max-conns.
func TestTLSBounds(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	flags := []string{"--grpc-tls-cert", pair.CertFile, "--grpc-tls-key", pair.KeyFile}

	t.Run("handshake", func(t *testing.T) {
		s := startSidecar(t, sidecarOpts{rules: tlsRules, args: append(flags, "--grpc-request-timeout", "300ms")})
		shapes := []struct {
			name string
			send func(t *testing.T, conn net.Conn) net.Conn // returns the connection to read from
		}{
			{"no ClientHello", func(t *testing.T, conn net.Conn) net.Conn { return conn }},
			{"part of a ClientHello", func(t *testing.T, conn net.Conn) net.Conn {
				// A handshake record's header announcing 512 bytes, and 3.
				if _, err := conn.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01}); err != nil {
					t.Fatal(err)
				}
				return conn
			}},
			{"TLS but no HTTP/2 preface", func(t *testing.T, conn net.Conn) net.Conn {
				cfg := ca.ClientConfig(t, nil)
				cfg.ServerName, cfg.NextProtos = "localhost", []string{"h2"}
				tc := tls.Client(conn, cfg)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				return tc
			}},
		}
		for _, tt := range shapes {
			t.Run(tt.name, func(t *testing.T) {
				conn, err := net.DialTimeout("tcp", s.grpcAddr, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				r := tt.send(t, conn)
				// The server sends nothing we wait for: only its close
				// ends the read, before the deadline.
				r.SetReadDeadline(time.Now().Add(5 * time.Second))
				start := time.Now()
				buf := make([]byte, 4096)
				for {
					_, err := r.Read(buf)
					if err == nil {
						continue // a TLS server's flight, or its SETTINGS
					}
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						t.Fatalf("the connection is still open after %v; want it closed after --grpc-request-timeout (300ms)", time.Since(start).Round(time.Millisecond))
					}
					break
				}
			})
		}
	})

	t.Run("max conns", func(t *testing.T) {
		// Half-sent ClientHellos, three times --grpc-max-conns of them,
		// with a handshake bound long enough that none times out: a new
		// TLS client is still served. Before the listener reclaimed
		// connections, it waited for the handshake bound.
		const max = 2
		s := startSidecar(t, sidecarOpts{rules: tlsRules, args: append(flags, "--grpc-max-conns", fmt.Sprint(max), "--grpc-request-timeout", "1m")})
		var held []net.Conn
		for range 3 * max {
			conn, err := net.DialTimeout("tcp", s.grpcAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01}); err != nil {
				t.Fatal(err)
			}
			held = append(held, conn)
		}
		if _, err := decide(t, s.dial(t, ca.ClientConfig(t, nil))); err != nil {
			t.Fatalf("a new TLS client with the cap held by half-sent ClientHellos: %v", err)
		}
		// All but max-1 were closed beside the new client's. Which ones is
		// not fixed: a connection's last byte is when the server read
		// it, and the handshakes read their ClientHellos in no set order.
		if got, want := closedOf(held, len(held)-max+1, 10*time.Second), len(held)-max+1; got != want {
			t.Errorf("%d of %d half-sent ClientHellos closed, want %d", got, len(held), want)
		}
	})
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

// TestTLSFromReferenceEnv: envoyproxy/ratelimit's variables turn TLS on as
// they do there. Envoy Gateway's set (GRPC_SERVER_TLS_CA_CERT, which the
// reference never reads) serves TLS without client certificates;
// GRPC_CLIENT_TLS_CACERT requires them.
func TestTLSFromReferenceEnv(t *testing.T) {
	dir := t.TempDir()
	ca, other := certtest.NewCA(t, dir, "ca"), certtest.NewCA(t, dir, "other")
	server, envoy, stranger := ca.Issue(t, "server"), ca.Issue(t, "envoy"), other.Issue(t, "stranger")
	env := map[string]string{
		"GRPC_SERVER_USE_TLS":     "true",
		"GRPC_SERVER_TLS_CERT":    server.CertFile,
		"GRPC_SERVER_TLS_KEY":     server.KeyFile,
		"GRPC_SERVER_TLS_CA_CERT": ca.File,
	}
	s := startSidecar(t, sidecarOpts{rules: tlsRules, env: env})
	if _, err := decide(t, s.dial(t, ca.ClientConfig(t, nil))); err != nil {
		t.Errorf("Envoy Gateway's settings, no client certificate: %v", err)
	}
	if _, err := decide(t, s.dial(t, nil)); status.Code(err) != codes.Unavailable {
		t.Errorf("Envoy Gateway's settings, plaintext: %v, want Unavailable", err)
	}

	env["GRPC_CLIENT_TLS_CACERT"] = ca.File
	s = startSidecar(t, sidecarOpts{rules: tlsRules, env: env})
	if _, err := decide(t, s.dial(t, ca.ClientConfig(t, &envoy))); err != nil {
		t.Errorf("GRPC_CLIENT_TLS_CACERT, a client certificate of the CA: %v", err)
	}
	if _, err := decide(t, s.dial(t, ca.ClientConfig(t, &stranger))); status.Code(err) != codes.Unavailable {
		t.Errorf("GRPC_CLIENT_TLS_CACERT, a client certificate of another CA: %v, want Unavailable", err)
	}
}
