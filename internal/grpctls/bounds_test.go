package grpctls_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/conntest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/grpctls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
)

// startBounded serves gRPC health over o's TLS as the sidecar does: the
// credentials under b's gRPC options, on a listener b caps, the
// handshake gate waiting up to b's request timeout.
func startBounded(t *testing.T, o grpctls.Options, b bounds.Server) *server {
	t.Helper()
	o.MinVersion = "1.2"
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	log, buf := logtest.JSON(zap.InfoLevel)
	s := &server{m: newMetrics(), logs: buf}
	g, err := grpctls.Open(o, bounds.TLSHandshakeSlots(), b.RequestTimeout, log, s.m)
	if err != nil {
		t.Fatal(err)
	}
	stopping, stopStreams := context.WithCancel(context.Background())
	bg := b.NewGRPC(stopping)
	gs := grpc.NewServer(bg.Options(g.Creds(), time.Second, bounds.IDBounds{})...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	bg.Registered(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	served := make(chan struct{})
	go func() { gs.Serve(b.CapGRPC(lis)); close(served) }() //nolint:errcheck // Stop ends it
	t.Cleanup(func() {
		stopStreams()
		gs.Stop()
		<-served
	})
	return s
}

// boundsOf returns the bound flags' defaults with a connection cap and a
// request timeout.
func boundsOf(maxConns int, timeout time.Duration) bounds.Server {
	return bounds.Server{GRPCMaxStreams: 100, GRPCMaxConns: maxConns, HTTPMaxConns: 128, RequestTimeout: timeout, MaxConnAge: 30 * time.Minute, IdleTimeout: time.Minute}
}

// halfHello is a handshake record's header announcing 512 bytes, and 3.
var halfHello = []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01}

// TestHandshakeWithinRequestTimeout: a connection must finish its TLS
// handshake within the request timeout (--grpc-request-timeout), as its
// HTTP/2 one: one that sends no ClientHello, part of one, or a whole
// handshake and no HTTP/2 preface is closed.
func TestHandshakeWithinRequestTimeout(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	s := startBounded(t, grpctls.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile}, boundsOf(64, 300*time.Millisecond))
	shapes := []struct {
		name string
		send func(t *testing.T, conn net.Conn) net.Conn // returns the connection to read from
	}{
		{"no ClientHello", func(t *testing.T, conn net.Conn) net.Conn { return conn }},
		{"part of a ClientHello", func(t *testing.T, conn net.Conn) net.Conn {
			if _, err := conn.Write(halfHello); err != nil {
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
			conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The server sends nothing we wait for: only its close ends
			// the read (a TLS server's flight, or its SETTINGS, skipped).
			if !conntest.ClosedWithin(tt.send(t, conn), 5*time.Second) {
				t.Fatal("the connection is still open after 5s; want it closed after the request timeout (300ms)")
			}
		})
	}
}

// TestHandshakesDoNotHoldTheCap: half-sent ClientHellos, three times the
// connection cap of them, with a handshake bound long enough that none
// times out: a new TLS client is still served, and all but cap-1 of them
// are closed beside its connection. Before the listener reclaimed
// connections, the client waited for the handshake bound.
func TestHandshakesDoNotHoldTheCap(t *testing.T) {
	const max = 2
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	s := startBounded(t, grpctls.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile}, boundsOf(max, time.Minute))
	var held []net.Conn
	for range 3 * max {
		conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write(halfHello); err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	if _, err := s.call(t, ca.ClientConfig(t, nil)); err != nil {
		t.Fatalf("a new TLS client with the cap held by half-sent ClientHellos: %v", err)
	}
	// Which ones are closed is not fixed: a connection's last byte is
	// when the server read it, and the handshakes read their ClientHellos
	// in no set order.
	want := len(held) - max + 1
	if n := conntest.ClosedOf(held, want, 10*time.Second); n != want {
		t.Errorf("%d of %d half-sent ClientHellos closed, want %d", n, len(held), want)
	}
}

// TestClientSideFailuresCounted: handshakes that fail on the client's
// side, a plaintext client and one that does not trust the server's
// certificate (the server hears of it through the client's alert), are
// counted and logged as those the server refuses.
func TestClientSideFailuresCounted(t *testing.T) {
	dir := t.TempDir()
	ca, other := certtest.NewCA(t, dir, "ca"), certtest.NewCA(t, dir, "other")
	pair := ca.Issue(t, "server")
	// Under the request timeout: a plaintext client's first bytes
	// announce a TLS record that never comes, which only that ends.
	s := startBounded(t, grpctls.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile}, boundsOf(64, time.Second))
	plain, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callOn(t, plain); status.Code(err) != codes.Unavailable {
		t.Errorf("a plaintext client: %v, want Unavailable", err)
	}
	plain.Close()
	if _, err := s.call(t, other.ClientConfig(t, nil)); status.Code(err) != codes.Unavailable {
		t.Errorf("a client trusting another CA: %v, want Unavailable", err)
	}
	waitFor(t, "both failures counted", func() bool { return s.has("ratelimit_sidecar_tls_handshake_failures_total 2") })
	logs := s.logs.String()
	for _, want := range []string{"first record does not look like a TLS handshake", "remote error: tls: bad certificate"} {
		if !strings.Contains(logs, `"msg":"tls handshake failed"`) || !strings.Contains(logs, want) {
			t.Errorf("no Warn about a failed handshake with %q:\n%s", want, logs)
		}
	}
	if !s.has("ratelimit_sidecar_tls_last_reload_successful 1") || !s.has(`ratelimit_sidecar_tls_reloads_total{result="failure"} 0`) {
		t.Error("metrics: want the files loaded with no failed reload")
	}
}
