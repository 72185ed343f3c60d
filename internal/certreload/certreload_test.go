package certreload_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certreload"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handshake runs a TLS handshake between server and client over a pipe,
// bounded in time, and returns the server certificate the client saw and
// the server's handshake error.
func handshake(t *testing.T, server, client *tls.Config) (*x509.Certificate, error) {
	t.Helper()
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	deadline := time.Now().Add(5 * time.Second)
	sc.SetDeadline(deadline)
	cc.SetDeadline(deadline)
	client = client.Clone()
	client.ServerName = "localhost"
	srv, cli := tls.Server(sc, server), tls.Client(cc, client)
	var wg sync.WaitGroup
	var serverErr error
	wg.Go(func() {
		serverErr = srv.Handshake()
		srv.Close() // so the client's Read below returns
	})
	var seen *x509.Certificate
	if err := cli.Handshake(); err == nil {
		seen = cli.ConnectionState().PeerCertificates[0]
		// With TLS 1.3 the client finishes before the server has checked
		// its certificate: wait for the server's verdict.
		cli.Read(make([]byte, 1)) //nolint:errcheck // only waits
	}
	cc.Close()
	wg.Wait()
	return seen, serverErr
}

// recorder collects Options.OnReload's calls.
type recorder struct {
	mu    sync.Mutex
	calls []reloadCall
}

type reloadCall struct {
	leaf *x509.Certificate
	err  error
}

func (r *recorder) onReload(leaf *x509.Certificate, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, reloadCall{leaf, err})
}

func (r *recorder) get() []reloadCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]reloadCall(nil), r.calls...)
}

func newReloader(t *testing.T, o certreload.Options) (*certreload.Reloader, *observer.ObservedLogs, *recorder) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	rec := &recorder{}
	o.OnReload = rec.onReload
	r, err := certreload.New(zap.New(core), o)
	if err != nil {
		t.Fatal(err)
	}
	return r, logs, rec
}

// waitFor polls cond every 10 ms for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	other := ca.Issue(t, "other")
	expired := ca.IssueWith(t, "expired", certtest.Options{NotAfter: time.Now().Add(-time.Minute)})
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		give certreload.Options
		want string
	}{
		{"no key", certreload.Options{CertFile: pair.CertFile}, "certificate and key files are both required"},
		{"no cert", certreload.Options{KeyFile: pair.KeyFile}, "certificate and key files are both required"},
		{"missing cert", certreload.Options{CertFile: missing, KeyFile: pair.KeyFile}, "open " + missing + ": no such file"},
		{"missing key", certreload.Options{CertFile: pair.CertFile, KeyFile: missing}, "open " + missing + ": no such file"},
		{"key of another certificate", certreload.Options{CertFile: pair.CertFile, KeyFile: other.KeyFile},
			pair.CertFile + ", " + other.KeyFile + ": tls: private key does not match public key"},
		{"key as certificate", certreload.Options{CertFile: pair.KeyFile, KeyFile: pair.KeyFile}, "PEM inputs may have been switched"},
		{"expired", certreload.Options{CertFile: expired.CertFile, KeyFile: expired.KeyFile}, expired.CertFile + ": certificate expired at "},
		{"client CA missing", certreload.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: missing}, "open " + missing},
		{"client CA without certificates", certreload.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: pair.KeyFile},
			pair.KeyFile + ": no PEM certificates"},
		{"client SAN without client CA", certreload.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientSAN: "envoy"},
			"a client SAN needs a client CA file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := certreload.New(zap.NewNop(), tt.give)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestServes(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	r, _, _ := newReloader(t, certreload.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile})
	seen, err := handshake(t, r.Config(), ca.ClientConfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if seen.SerialNumber.Cmp(pair.Cert.SerialNumber) != 0 {
		t.Errorf("served serial %X, want %X", seen.SerialNumber, pair.Cert.SerialNumber)
	}
	if got := r.Certificate().SerialNumber; got.Cmp(pair.Cert.SerialNumber) != 0 {
		t.Errorf("Certificate: serial %X, want %X", got, pair.Cert.SerialNumber)
	}

	// No client certificate is asked for without a client CA.
	client := ca.ClientConfig(t, nil)
	asked := false
	client.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked = true
		return &tls.Certificate{}, nil
	}
	if _, err := handshake(t, r.Config(), client); err != nil || asked {
		t.Errorf("without a client CA: server error %v, client certificate asked for: %v", err, asked)
	}

	// TLS 1.1 is refused by default.
	old := ca.ClientConfig(t, nil)
	old.MinVersion, old.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
	if _, err := handshake(t, r.Config(), old); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
}

func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	other := certtest.NewCA(t, dir, "other")
	server := ca.Issue(t, "server")
	envoy := ca.IssueWith(t, "envoy", certtest.Options{
		DNSNames: []string{"envoy.edge.svc", "*.gateway.example"},
		IPs:      []net.IP{net.IPv4(10, 0, 0, 7)},
		URIs:     []string{"spiffe://cluster.local/ns/edge/sa/envoy"},
	})
	stranger := other.IssueWith(t, "stranger", certtest.Options{DNSNames: []string{"envoy.edge.svc"}})
	mtls := func(t *testing.T, san string) *certreload.Reloader {
		r, _, _ := newReloader(t, certreload.Options{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.File, ClientSAN: san})
		return r
	}

	accepted := []struct {
		name, san string
	}{
		{"no SAN required", ""},
		{"DNS SAN", "envoy.edge.svc"},
		{"DNS SAN in another case", "Envoy.Edge.Svc"},
		{"wildcard DNS SAN", "a.gateway.example"},
		{"IP SAN", "10.0.0.7"},
		{"URI SAN", "spiffe://cluster.local/ns/edge/sa/envoy"},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := handshake(t, mtls(t, tt.san).Config(), ca.ClientConfig(t, &envoy)); err != nil {
				t.Errorf("server: %v, want the client accepted", err)
			}
		})
	}

	refused := []struct {
		name, san string
		client    *certtest.Pair
		want      string
	}{
		{"no client certificate", "", nil, "client didn't provide a certificate"},
		{"certificate of another CA", "", &stranger, "certificate signed by unknown authority"},
		{"certificate of another CA with the SAN", "envoy.edge.svc", &stranger, "certificate signed by unknown authority"},
		{"other DNS name", "ratelimit.edge.svc", &envoy, `does not hold the name "ratelimit.edge.svc"`},
		{"wildcard beyond one label", "a.b.gateway.example", &envoy, "does not hold the name"},
		{"other IP", "10.0.0.8", &envoy, "does not hold the name"},
		{"URI prefix", "spiffe://cluster.local/ns/edge", &envoy, "does not hold the name"},
		{"common name only", "envoy", &envoy, "does not hold the name"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, err := handshake(t, mtls(t, tt.san).Config(), ca.ClientConfig(t, tt.client))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("server: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestReloadKeepsOld: files that do not load leave the certificate in
// use, and are reported and logged once however often they are read.
func TestReloadKeepsOld(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	first := ca.Issue(t, "first")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, first.CertFile, certFile)
	copyFile(t, first.KeyFile, keyFile)
	r, logs, rec := newReloader(t, certreload.Options{CertFile: certFile, KeyFile: keyFile})
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("Reload of unchanged files: %v, %v; want nothing", changed, err)
	}

	bad := []struct {
		name  string
		write func()
		want  string
	}{
		{"key of another certificate", func() { copyFile(t, ca.Issue(t, "other").KeyFile, keyFile) }, "private key does not match public key"},
		{"expired", func() {
			p := ca.IssueWith(t, "expired", certtest.Options{NotAfter: time.Now().Add(-time.Minute)})
			copyFile(t, p.CertFile, certFile)
			copyFile(t, p.KeyFile, keyFile)
		}, certFile + ": certificate expired at"},
		{"empty certificate", func() { os.WriteFile(certFile, nil, 0o600) }, "failed to find any PEM data"},
		{"missing key", func() { os.Remove(keyFile) }, "open " + keyFile + ": no such file"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			calls, errs := len(rec.get()), logs.FilterLevelExact(zapcore.ErrorLevel).Len()
			tt.write()
			changed, err := r.Reload()
			if !changed || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Reload: %v, %v; want a change and an error with %q", changed, err, tt.want)
			}
			if got := r.Certificate().SerialNumber; got.Cmp(first.Cert.SerialNumber) != 0 {
				t.Errorf("certificate in use: serial %X, want the first, %X", got, first.Cert.SerialNumber)
			}
			if seen, err := handshake(t, r.Config(), ca.ClientConfig(t, nil)); err != nil || seen.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
				t.Errorf("handshake: %v, serial %v; want the first certificate's", err, seen)
			}
			// Read again, the same bad files are not reported again.
			if changed, err := r.Reload(); changed || err != nil {
				t.Errorf("Reload of the same bad files: %v, %v; want nothing", changed, err)
			}
			got := rec.get()[calls:]
			if len(got) != 1 || got[0].err == nil || got[0].leaf.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
				t.Errorf("OnReload calls %+v; want one, with the error and the first certificate", got)
			}
			entries := logs.FilterLevelExact(zapcore.ErrorLevel).All()[errs:]
			if len(entries) != 1 {
				t.Fatalf("%d Error lines, want 1", len(entries))
			}
			fields := entries[0].ContextMap()
			if fields["cert"] != certFile || fields["key"] != keyFile || !strings.Contains(fields["error"].(string), tt.want) {
				t.Errorf("Error line fields %v; want the files and the error", fields)
			}
			// Back to the first pair: it loads again.
			copyFile(t, first.CertFile, certFile)
			copyFile(t, first.KeyFile, keyFile)
			if changed, err := r.Reload(); !changed || err != nil {
				t.Errorf("Reload of the first pair again: %v, %v; want a change that loads", changed, err)
			}
		})
	}
}

// TestWatchDataSwap: the kubelet updates a mounted Secret by swapping its
// ..data link; new handshakes get the new certificate.
func TestWatchDataSwap(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	first, second, third := ca.Issue(t, "first"), ca.Issue(t, "second"), ca.Issue(t, "third")
	secretDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := certtest.NewSecretDir(t, secretDir, first.Secret(t, nil))
	r, _, rec := newReloader(t, certreload.Options{CertFile: secret.Path("tls.crt"), KeyFile: secret.Path("tls.key"), Poll: time.Hour})
	stop := watch(t, r)
	defer stop()

	// The second pair may load through the read Watch makes once its
	// watches are set, since it may be written before; the third, written
	// once the second is in use, only through a file event.
	for i, p := range []certtest.Pair{second, third} {
		secret.Update(t, p.Secret(t, nil))
		waitFor(t, p.Cert.Subject.CommonName+" certificate served", func() bool {
			seen, err := handshake(t, r.Config(), ca.ClientConfig(t, nil))
			return err == nil && seen.SerialNumber.Cmp(p.Cert.SerialNumber) == 0
		})
		calls := rec.get()
		if len(calls) != i+1 || calls[i].err != nil || calls[i].leaf.SerialNumber.Cmp(p.Cert.SerialNumber) != 0 {
			t.Errorf("OnReload calls %+v; want %d, the last without error, with the %s certificate", calls, i+1, p.Cert.Subject.CommonName)
		}
	}
}

// TestWatchPolls: a file reached through a link to a directory that is
// not watched changes without an event; the poll finds it.
func TestWatchPolls(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	first, second, third := ca.Issue(t, "first"), ca.Issue(t, "second"), ca.Issue(t, "third")
	real, linked := filepath.Join(dir, "real"), filepath.Join(dir, "linked")
	for _, d := range []string{real, linked} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, first.CertFile, filepath.Join(real, "tls.crt"))
	copyFile(t, first.KeyFile, filepath.Join(real, "tls.key"))
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join(real, name), filepath.Join(linked, name)); err != nil {
			t.Fatal(err)
		}
	}
	r, _, _ := newReloader(t, certreload.Options{CertFile: filepath.Join(linked, "tls.crt"), KeyFile: filepath.Join(linked, "tls.key"), Poll: 50 * time.Millisecond})
	stop := watch(t, r)
	defer stop()

	// Written in place, key first: a poll may see the new key with the
	// old certificate, which does not load; the next loads both. The
	// second pair may load through the read Watch makes as it starts; the
	// third only through a poll.
	for _, p := range []certtest.Pair{second, third} {
		copyFile(t, p.KeyFile, filepath.Join(real, "tls.key"))
		copyFile(t, p.CertFile, filepath.Join(real, "tls.crt"))
		waitFor(t, p.Cert.Subject.CommonName+" certificate in use", func() bool {
			return r.Certificate().SerialNumber.Cmp(p.Cert.SerialNumber) == 0
		})
	}
}

// TestClientCARotation: the client CA is reloaded with the pair: a client
// of the new CA is accepted, one of the old refused.
func TestClientCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := certtest.NewCA(t, dir, "old-ca"), certtest.NewCA(t, dir, "new-ca")
	oldServer, newServer := oldCA.Issue(t, "old-server"), newCA.Issue(t, "new-server")
	oldClient, newClient := oldCA.Issue(t, "old-client"), newCA.Issue(t, "new-client")
	secretDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := certtest.NewSecretDir(t, secretDir, oldServer.Secret(t, oldCA))
	r, _, _ := newReloader(t, certreload.Options{CertFile: secret.Path("tls.crt"), KeyFile: secret.Path("tls.key"), ClientCAFile: secret.Path("ca.crt")})
	if _, err := handshake(t, r.Config(), oldCA.ClientConfig(t, &oldClient)); err != nil {
		t.Fatalf("client of the old CA before the rotation: %v", err)
	}
	secret.Update(t, newServer.Secret(t, newCA))
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v, %v", changed, err)
	}
	if _, err := handshake(t, r.Config(), newCA.ClientConfig(t, &newClient)); err != nil {
		t.Errorf("client of the new CA: %v", err)
	}
	if _, err := handshake(t, r.Config(), newCA.ClientConfig(t, &oldClient)); err == nil {
		t.Error("client of the old CA accepted after the rotation")
	}
}

func watch(t *testing.T, r *certreload.Reloader) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		r.Watch(ctx)
		close(done)
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return within 5s of its context's end")
		}
	}
}
