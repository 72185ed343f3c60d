package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSOptions secures the connection to the management server. Files hold
// PEM. Envoy Gateway's rate-limit deployment mounts its certificates at
// /certs/ca.crt, /certs/tls.crt and /certs/tls.key, and its xDS server
// requires the client certificate (mutual TLS).
type TLSOptions struct {
	// CAFile holds the CAs that sign the server's certificate; empty: the
	// system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, for a
	// server that requires one. Both or neither. They are read again for
	// every new connection, so a renewed certificate is used from the
	// next reconnect on.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must hold (the
	// reference's CONFIG_GRPC_XDS_SERVER_TLS_SAN); empty: the host of
	// Options.Server.
	ServerName string
}

// config builds the client's TLS configuration, reading every file once
// so that a missing or bad one is an error now, not at the first
// handshake.
func (o *TLSOptions) config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("xds TLS CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xds TLS CA %s: no PEM certificates", o.CAFile)
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("xds TLS client certificate and key must be set together")
	}
	if o.CertFile != "" {
		if _, err := o.clientCert(nil); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = o.clientCert
	}
	return cfg, nil
}

// clientCert reads the client certificate; it fits
// tls.Config.GetClientCertificate.
func (o *TLSOptions) clientCert(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("xds TLS client certificate: %w", err)
	}
	return &cert, nil
}
