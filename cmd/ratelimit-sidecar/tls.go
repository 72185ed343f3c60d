package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certreload"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// tlsSettings are the --grpc-tls-* flags: TLS on the gRPC listener. The
// HTTP listener stays plaintext: it serves the kubelet's probes and
// Prometheus, not Envoy.
type tlsSettings struct {
	cert, key  string // both or neither; both turn TLS on
	clientCA   string // client certificates required, signed by these CAs
	clientSAN  string // and holding this name
	minVersion string // "1.2" or "1.3"
	min        uint16 // minVersion, parsed by check
	// handshakeRate is how many handshakes may start a second, in bursts
	// of as many; 0: no limit.
	handshakeRate float64
}

// on reports whether the gRPC listener serves TLS.
func (t *tlsSettings) on() bool { return t.cert != "" }

// check reports flags that do not fit together, and parses the version.
func (t *tlsSettings) check() error {
	switch {
	case (t.cert == "") != (t.key == ""):
		return errors.New("--grpc-tls-cert and --grpc-tls-key: set both or neither")
	case t.clientSAN != "" && t.clientCA == "":
		return errors.New("--grpc-tls-client-san: needs --grpc-tls-client-ca (only a client certificate holds a SAN)")
	case t.clientCA != "" && !t.on():
		return errors.New("--grpc-tls-client-ca: needs --grpc-tls-cert and --grpc-tls-key (client certificates are asked for only over TLS)")
	case !(t.handshakeRate >= 0) || math.IsInf(t.handshakeRate, 1):
		return fmt.Errorf("--grpc-tls-handshake-rate: want 0 (no limit) or more, got %v", t.handshakeRate)
	}
	switch t.minVersion {
	case "1.2":
		t.min = tls.VersionTLS12
	case "1.3":
		t.min = tls.VersionTLS13
	default:
		return fmt.Errorf("--grpc-tls-min-version: want 1.2 or 1.3, got %q", t.minVersion)
	}
	return nil
}

// grpcTLS is the gRPC listener's TLS: its files, reloaded when they
// change, and its metrics.
type grpcTLS struct {
	files *certreload.Reloader
	m     *metrics.TLS
	log   *zap.Logger
	gate  *bounds.HandshakeGate
}

// openTLS reads the TLS files, or returns nil when TLS is off.
func openTLS(c *settings, log *zap.Logger, m *metrics.Metrics) (*grpcTLS, error) {
	t := &c.tls
	if !t.on() {
		return nil, nil
	}
	g := &grpcTLS{log: log, gate: bounds.NewHandshakeGate(bounds.HandshakeOptions{
		Slots: bounds.TLSHandshakeSlots(),
		Rate:  t.handshakeRate,
		Burst: int(min(t.handshakeRate, math.MaxInt32)),
		Wait:  c.bounds.RequestTimeout,
	})}
	files, err := certreload.New(log, certreload.Options{
		CertFile:     t.cert,
		KeyFile:      t.key,
		ClientCAFile: t.clientCA,
		ClientSAN:    t.clientSAN,
		MinVersion:   t.min,
		OnReload: func(leaf *x509.Certificate, err error) {
			g.m.Reloaded(leaf, err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("grpc tls: %w", err)
	}
	g.files = files
	leaf := files.Certificate()
	g.m = m.TLS(leaf)
	log.Info("grpc serves tls",
		zap.String("cert", t.cert), zap.String("serial", fmt.Sprintf("%X", leaf.SerialNumber)), zap.Time("not_after", leaf.NotAfter),
		zap.String("client_ca", t.clientCA), zap.String("client_san", t.clientSAN), zap.String("min_version", t.minVersion))
	return g, nil
}

// creds returns the gRPC server's credentials: TLS, or plaintext when g
// is nil. The handshake runs within grpc.ConnectionTimeout (see
// bounds.go), like the HTTP/2 handshake after it, and its computing
// through g's gate.
func (g *grpcTLS) creds() credentials.TransportCredentials {
	if g == nil {
		return insecure.NewCredentials()
	}
	return g.gate.Creds(credentials.NewTLS(g.files.Config()), g.failed)
}

// watch reloads the files when they change, until ctx ends.
func (g *grpcTLS) watch(ctx context.Context) {
	if g != nil {
		g.files.Watch(ctx)
	}
}

// reload reads the files now (SIGHUP).
func (g *grpcTLS) reload() {
	if g != nil {
		g.files.Reload() //nolint:errcheck // Reload logs and reports its errors
	}
}

// failed counts and logs a failed handshake. The log's sampler bounds the
// lines a flood of them makes; the metric counts every one.
func (g *grpcTLS) failed(remote net.Addr, err error) {
	g.m.HandshakeFailed()
	g.log.Warn("tls handshake failed", zap.Stringer("remote", remote), zap.Error(err))
}
