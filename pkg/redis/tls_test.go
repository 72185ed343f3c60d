package redis_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestTLS connects over TLS to a Redis that requires client certificates:
// with the right CA and certificate it decides; without them it cannot.
func TestTLS(t *testing.T) {
	dir, port, args := tlsFiles(t, "yes")
	redistest.StartServer(t, redistest.WithArgs(args...))
	url := "rediss://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	good := redis.TLSOptions{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "client.pem"),
		KeyFile:  filepath.Join(dir, "client-key.pem"),
	}

	s := newStore(t, redis.Options{URL: url, TLS: good})
	l := mustLimit(t, limits.FixedWindow, 2, limits.UnitHour, 1, 0)
	if b := apply(t, s, check("k", l, 1)); !b.Admitted || b.Outcomes[0].Remaining != 1 {
		t.Errorf("over TLS: admitted %v, remaining %d", b.Admitted, b.Outcomes[0].Remaining)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping over TLS: %v", err)
	}

	tests := []struct {
		name string
		give redis.TLSOptions
	}{
		{name: "no_client_cert", give: redis.TLSOptions{CAFile: good.CAFile}},
		{name: "wrong_ca", give: redis.TLSOptions{CAFile: filepath.Join(dir, "other-ca.pem"), CertFile: good.CertFile, KeyFile: good.KeyFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := redis.New(ctx, redis.Options{URL: url, TLS: tt.give, Timeout: time.Second})
			if err == nil {
				_ = s.Close()
				t.Fatal("New succeeded")
			}
			t.Logf("New: %v", err)
		})
	}
}

// newCert writes name.pem and name-key.pem to dir: a CA if parent is nil,
// else a certificate for 127.0.0.1 signed by parent.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage = x509.KeyUsageCertSign
	} else {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// freePort returns a loopback port that was free a moment ago.
// tlsFiles writes, in a new directory, a CA (ca.pem), a server and a
// client certificate it signs (server.pem, client.pem and their -key.pem)
// and a second CA's certificate (other-ca.pem), and returns the directory,
// a free port and the redis-server arguments that serve TLS there with
// them, requiring client certificates as authClients says (yes or no).
func tlsFiles(t *testing.T, authClients string) (dir string, port int, args []string) {
	t.Helper()
	dir = t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	newCert(t, dir, "other-ca", nil, nil)
	port = freePort(t)
	return dir, port, []string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server-key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", authClients,
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
