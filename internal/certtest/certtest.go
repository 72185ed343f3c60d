// Package certtest makes certificates for tests: a CA, and server and
// client certificates it signs, written as PEM files.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files are in Dir.
type CA struct {
	Dir  string
	File string // the CA certificate, PEM
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

// Pair is a certificate and its key, as PEM files.
type Pair struct {
	CertFile, KeyFile string
}

// NewCA makes a CA named name and writes its certificate to
// dir/name.pem.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	tmpl := template(name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Dir: dir, File: filepath.Join(dir, name+".pem"), cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate named name, for both server and client use,
// valid for 127.0.0.1 and localhost, and writes it to dir/name.pem and
// its key to dir/name-key.pem.
func (ca *CA) Issue(t testing.TB, name string) Pair {
	t.Helper()
	tmpl := template(name)
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	tmpl.DNSNames = []string{"localhost"}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{CertFile: filepath.Join(ca.Dir, name+".pem"), KeyFile: filepath.Join(ca.Dir, name+"-key.pem")}
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	writePEM(t, p.KeyFile, "EC PRIVATE KEY", keyDER)
	return p
}

// ServerConfig returns a server's TLS configuration with pair as its
// certificate. With clientAuth it requires a client certificate that ca
// signed.
func (ca *CA) ServerConfig(t testing.TB, pair Pair, clientAuth bool) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = ca.pool
	}
	return cfg
}

func template(name string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
