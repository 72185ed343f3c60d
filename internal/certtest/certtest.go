// Package certtest makes certificates for tests: a CA, and server and
// client certificates it signs, written as PEM files, and directories laid
// out as Kubernetes mounts a Secret.
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
	"net/url"
	"os"
	"path/filepath"
	"strconv"
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
	Cert              *x509.Certificate // the certificate, parsed
}

// Options shape the certificate IssueWith makes. The zero value makes
// what Issue makes.
type Options struct {
	// DNSNames, IPs and URIs are the certificate's subject alternative
	// names. If all three are empty: localhost and 127.0.0.1.
	DNSNames []string
	IPs      []net.IP
	URIs     []string
	// NotAfter is when the certificate expires; zero: an hour from now.
	NotAfter time.Time
}

// NewCA makes a CA named name and writes its certificate to
// dir/name.pem.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	tmpl := template(t, name)
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
	return ca.IssueWith(t, name, Options{})
}

// IssueWith is Issue with the names and expiry of o.
func (ca *CA) IssueWith(t testing.TB, name string, o Options) Pair {
	t.Helper()
	tmpl := template(t, name)
	tmpl.DNSNames, tmpl.IPAddresses = o.DNSNames, o.IPs
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	if len(o.DNSNames)+len(o.IPs)+len(o.URIs) == 0 {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	if !o.NotAfter.IsZero() {
		tmpl.NotAfter = o.NotAfter
		if o.NotAfter.Before(tmpl.NotBefore) {
			tmpl.NotBefore = o.NotAfter.Add(-time.Hour)
		}
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{CertFile: filepath.Join(ca.Dir, name+".pem"), KeyFile: filepath.Join(ca.Dir, name+"-key.pem"), Cert: cert}
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

// ClientConfig returns a client's TLS configuration that trusts ca, and
// presents client's certificate if client is not nil, as Envoy does:
// whether or not the server names its CA among those it accepts.
func (ca *CA) ClientConfig(t testing.TB, client *Pair) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	if client != nil {
		cert, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return cfg
}

// Secret returns the files of a cert-manager Secret holding p and, if ca
// is not nil, the CA's certificate: tls.crt, tls.key and ca.crt.
func (p Pair) Secret(t testing.TB, ca *CA) map[string][]byte {
	t.Helper()
	files := map[string][]byte{"tls.crt": readFile(t, p.CertFile), "tls.key": readFile(t, p.KeyFile)}
	if ca != nil {
		files["ca.crt"] = readFile(t, ca.File)
	}
	return files
}

// SecretDir is a directory laid out as the kubelet mounts a Secret or a
// ConfigMap: each file is a symbolic link through ..data to a directory
// that holds this version of every file, and an update swaps ..data to a
// new such directory in one rename, so readers see all old files or all
// new ones.
type SecretDir struct {
	Dir     string
	version int
}

// NewSecretDir lays files out in dir, which must exist, as a Secret.
func NewSecretDir(t testing.TB, dir string, files map[string][]byte) *SecretDir {
	t.Helper()
	s := &SecretDir{Dir: dir}
	s.Update(t, files)
	return s
}

// Path is the path of the file called name.
func (s *SecretDir) Path(name string) string { return filepath.Join(s.Dir, name) }

// Update replaces every file at once, as the kubelet does: it writes a
// new version directory, points ..data_tmp at it, renames ..data_tmp over
// ..data, links any new name through ..data and removes the old version.
func (s *SecretDir) Update(t testing.TB, files map[string][]byte) {
	t.Helper()
	old := ""
	if target, err := os.Readlink(filepath.Join(s.Dir, "..data")); err == nil {
		old = filepath.Join(s.Dir, target)
	}
	s.version++
	version := "..v" + strconv.Itoa(s.version)
	if err := os.Mkdir(filepath.Join(s.Dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, version, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(s.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			t.Fatal(err)
		}
	}
}

func template(t testing.TB, name string) *x509.Certificate {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
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

func readFile(t testing.TB, file string) []byte {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
