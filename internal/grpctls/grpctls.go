// Package grpctls is the TLS of the sidecar's gRPC listener: the
// --grpc-tls-* flags (Options), the certificate and client CAs read from
// files and reloaded as they change (internal/certreload), the gate that
// bounds the handshakes' computing, and the handshakes' and reloads'
// metrics and log lines. The HTTP listener stays plaintext: it serves the
// kubelet's probes and Prometheus, not Envoy.
package grpctls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certreload"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// Options are the --grpc-tls-* flags: the flag table writes into the
// exported fields and Check checks them.
type Options struct {
	CertFile, KeyFile string // both or neither; both turn TLS on
	ClientCAFile      string // client certificates required, signed by these CAs
	ClientSAN         string // and holding this name
	MinVersion        string // "1.2" or "1.3"
	// HandshakeRate is how many handshakes may start a second, in
	// bursts of as many; 0: no limit.
	HandshakeRate float64

	min uint16 // MinVersion, parsed by Check
}

// On reports whether the gRPC listener serves TLS.
func (o *Options) On() bool { return o.CertFile != "" }

// Check reports flags that do not fit together, and parses the version.
func (o *Options) Check() error {
	switch {
	case (o.CertFile == "") != (o.KeyFile == ""):
		return errors.New("--grpc-tls-cert and --grpc-tls-key: set both or neither")
	case o.ClientSAN != "" && o.ClientCAFile == "":
		return errors.New("--grpc-tls-client-san: needs --grpc-tls-client-ca (only a client certificate holds a SAN)")
	case o.ClientCAFile != "" && !o.On():
		return errors.New("--grpc-tls-client-ca: needs --grpc-tls-cert and --grpc-tls-key (client certificates are asked for only over TLS)")
	case !(o.HandshakeRate >= 0) || math.IsInf(o.HandshakeRate, 1):
		return fmt.Errorf("--grpc-tls-handshake-rate: want 0 (no limit) or more, got %v", o.HandshakeRate)
	}
	switch o.MinVersion {
	case "1.2":
		o.min = tls.VersionTLS12
	case "1.3":
		o.min = tls.VersionTLS13
	default:
		return fmt.Errorf("--grpc-tls-min-version: want 1.2 or 1.3, got %q", o.MinVersion)
	}
	return nil
}

// Server is the gRPC listener's TLS: its files, reloaded when they
// change, its handshake gate and its metrics. A nil Server is
// plaintext.
type Server struct {
	files *certreload.Reloader
	m     *metrics.TLS
	log   *zap.Logger
	gate  *bounds.HandshakeGate
}

// Open reads the TLS files o names, or returns nil when TLS is off. At
// most slots handshakes compute at once, and one that would wait longer
// than wait for its turn fails. o must have passed Check.
func Open(o Options, slots int, wait time.Duration, log *zap.Logger, m *metrics.Metrics) (*Server, error) {
	if !o.On() {
		return nil, nil
	}
	s := &Server{log: log, gate: bounds.NewHandshakeGate(bounds.HandshakeOptions{
		Slots: slots,
		Rate:  o.HandshakeRate,
		Burst: int(min(o.HandshakeRate, math.MaxInt32)),
		Wait:  wait,
	})}
	files, err := certreload.New(log, certreload.Options{
		CertFile:     o.CertFile,
		KeyFile:      o.KeyFile,
		ClientCAFile: o.ClientCAFile,
		ClientSAN:    o.ClientSAN,
		MinVersion:   o.min,
		OnReload: func(leaf *x509.Certificate, err error) {
			s.m.Reloaded(leaf, err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("grpc tls: %w", err)
	}
	s.files = files
	leaf := files.Certificate()
	s.m = m.TLS(leaf)
	log.Info("grpc serves tls",
		zap.String("cert", o.CertFile), zap.String("serial", fmt.Sprintf("%X", leaf.SerialNumber)), zap.Time("not_after", leaf.NotAfter),
		zap.String("client_ca", o.ClientCAFile), zap.String("client_san", o.ClientSAN), zap.String("min_version", o.MinVersion))
	return s, nil
}

// Creds returns the gRPC server's credentials: TLS, or plaintext when s
// is nil. The handshake runs within the server's connection timeout
// (grpc.ConnectionTimeout), like the HTTP/2 handshake after it, and its
// computing through s's gate.
func (s *Server) Creds() credentials.TransportCredentials {
	if s == nil {
		return insecure.NewCredentials()
	}
	return s.gate.Creds(credentials.NewTLS(s.files.Config()), s.failed)
}

// Watch reloads the files when they change, until ctx ends.
func (s *Server) Watch(ctx context.Context) {
	if s != nil {
		s.files.Watch(ctx)
	}
}

// Reload reads the files now (SIGHUP).
func (s *Server) Reload() {
	if s != nil {
		s.files.Reload() //nolint:errcheck // Reload logs and reports its errors
	}
}

// failed counts and logs a failed handshake. The log's sampler bounds the
// lines a flood of them makes; the metric counts every one.
func (s *Server) failed(remote net.Addr, err error) {
	s.m.HandshakeFailed()
	s.log.Warn("tls handshake failed", zap.Stringer("remote", remote), zap.Error(err))
}
