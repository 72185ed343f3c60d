package grpctls_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/grpctls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOptionsCheck: flags that do not fit together, and values out of
// range, are refused in the flags' names.
func TestOptionsCheck(t *testing.T) {
	pair := grpctls.Options{CertFile: "tls.crt", KeyFile: "tls.key", MinVersion: "1.2", HandshakeRate: 500}
	tests := []struct {
		give func(*grpctls.Options)
		want string
	}{
		{func(o *grpctls.Options) { o.KeyFile = "" }, "--grpc-tls-cert and --grpc-tls-key: set both or neither"},
		{func(o *grpctls.Options) { o.CertFile = "" }, "--grpc-tls-cert and --grpc-tls-key: set both or neither"},
		{func(o *grpctls.Options) { o.CertFile, o.KeyFile, o.ClientCAFile = "", "", "ca.crt" }, "--grpc-tls-client-ca: needs --grpc-tls-cert and --grpc-tls-key (client certificates are asked for only over TLS)"},
		{func(o *grpctls.Options) { o.CertFile, o.KeyFile, o.ClientSAN = "", "", "envoy" }, "--grpc-tls-client-san: needs --grpc-tls-client-ca (only a client certificate holds a SAN)"},
		{func(o *grpctls.Options) { o.ClientSAN = "envoy" }, "--grpc-tls-client-san: needs --grpc-tls-client-ca (only a client certificate holds a SAN)"},
		{func(o *grpctls.Options) { o.MinVersion = "1.1" }, `--grpc-tls-min-version: want 1.2 or 1.3, got "1.1"`},
		{func(o *grpctls.Options) { o.HandshakeRate = -1 }, "--grpc-tls-handshake-rate: want 0 (no limit) or more, got -1"},
		{func(o *grpctls.Options) { o.HandshakeRate = math.NaN() }, "--grpc-tls-handshake-rate: want 0 (no limit) or more, got NaN"},
		{func(o *grpctls.Options) { o.HandshakeRate = math.Inf(1) }, "--grpc-tls-handshake-rate: want 0 (no limit) or more, got +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			o := pair
			tt.give(&o)
			if err := o.Check(); err == nil || err.Error() != tt.want {
				t.Errorf("Check() = %v, want %q", err, tt.want)
			}
		})
	}
	for _, o := range []grpctls.Options{pair, {MinVersion: "1.3"}, {CertFile: "a", KeyFile: "b", ClientCAFile: "c", ClientSAN: "d", MinVersion: "1.3"}} {
		if err := o.Check(); err != nil {
			t.Errorf("Check(%+v) = %v", o, err)
		}
	}
}

// TestOpenErrors: files that do not load are errors naming the file and
// what is wrong; without a certificate TLS is off.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair, other := ca.Issue(t, "server"), ca.Issue(t, "other")
	expired := ca.IssueWith(t, "expired", certtest.Options{NotAfter: time.Now().Add(-time.Hour)})
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		give grpctls.Options
		want string
	}{
		{"missing key", grpctls.Options{CertFile: pair.CertFile, KeyFile: missing}, "open " + missing + ": no such file"},
		{"key of another certificate", grpctls.Options{CertFile: pair.CertFile, KeyFile: other.KeyFile}, "private key does not match public key"},
		{"expired", grpctls.Options{CertFile: expired.CertFile, KeyFile: expired.KeyFile}, expired.CertFile + ": certificate expired at"},
		{"client CA without certificates", grpctls.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: pair.KeyFile}, pair.KeyFile + ": no PEM certificates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.give
			o.MinVersion = "1.2"
			if err := o.Check(); err != nil {
				t.Fatal(err)
			}
			_, err := grpctls.Open(o, 1, time.Second, zap.NewNop(), newMetrics())
			if err == nil || !strings.HasPrefix(err.Error(), "grpc tls: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open: %v, want a grpc tls: error with %q", err, tt.want)
			}
		})
	}
	s, err := grpctls.Open(grpctls.Options{MinVersion: "1.2"}, 1, time.Second, zap.NewNop(), newMetrics())
	if s != nil || err != nil {
		t.Errorf("Open without a certificate: %v, %v; want nil, nil", s, err)
	}
	if info := s.Creds().Info(); info.SecurityProtocol != "insecure" {
		t.Errorf("a nil Server's credentials: %q, want insecure", info.SecurityProtocol)
	}
}

func newMetrics() *metrics.Metrics {
	return metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
}

// server is a gRPC server (health only) behind a Server's credentials,
// watching its files, whose log and metrics a test reads.
type server struct {
	addr string
	m    *metrics.Metrics
	logs *logtest.Buffer
}

// start checks o, opens it and serves on loopback until the test ends.
func start(t *testing.T, o grpctls.Options) *server {
	t.Helper()
	if o.MinVersion == "" {
		o.MinVersion = "1.2"
	}
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	log, buf := logtest.JSON(zap.InfoLevel)
	s := &server{m: newMetrics(), logs: buf}
	g, err := grpctls.Open(o, 4, 5*time.Second, log, s.m)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(g.Creds()), grpc.ConnectionTimeout(5*time.Second))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served, watched := make(chan struct{}), make(chan struct{})
	go func() { gs.Serve(lis); close(served) }() //nolint:errcheck // Stop ends it
	go func() { g.Watch(ctx); close(watched) }()
	t.Cleanup(func() {
		cancel()
		gs.Stop()
		<-served
		<-watched
	})
	return s
}

// call makes a health check over a new gRPC client with cfg and returns
// the serial of the server certificate of the connection it went over.
func (s *server) call(t *testing.T, cfg *tls.Config) (*big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return callOn(t, conn)
}

func callOn(t *testing.T, conn *grpc.ClientConn) (*big.Int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, fmt.Errorf("the call's peer has no TLS: %T", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber, nil
}

// served makes a new TLS connection to s with cfg and returns the serial
// of the certificate the server presented.
func (s *server) served(cfg *tls.Config) (*big.Int, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.addr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// has reports whether s's metrics hold the sample line.
func (s *server) has(line string) bool {
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(s.m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return strings.Contains("\n"+rec.Body.String(), "\n"+line+"\n")
}

// waitFor waits for cond, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMutualTLS: with a client CA, a client needs a certificate the CA
// signed, and with a client SAN one that holds it; each refusal is
// counted and logged.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := certtest.NewCA(t, dir, "ca"), certtest.NewCA(t, dir, "other")
	srv := ca.Issue(t, "server")
	envoy := ca.IssueWith(t, "envoy", certtest.Options{DNSNames: []string{"envoy.edge.svc"}})
	intruder := ca.IssueWith(t, "intruder", certtest.Options{DNSNames: []string{"intruder.edge.svc"}})
	stranger := other.IssueWith(t, "stranger", certtest.Options{DNSNames: []string{"envoy.edge.svc"}})
	s := start(t, grpctls.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.File, ClientSAN: "envoy.edge.svc"})

	if _, err := s.call(t, ca.ClientConfig(t, &envoy)); err != nil {
		t.Errorf("client certificate of the CA with the SAN: %v", err)
	}
	refused := []struct {
		name   string
		client *certtest.Pair
		log    string
	}{
		{"no client certificate", nil, "client didn't provide a certificate"},
		{"certificate of another CA", &stranger, "certificate signed by unknown authority"},
		{"certificate without the SAN", &intruder, `does not hold the name \"envoy.edge.svc\"`},
	}
	for i, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.call(t, ca.ClientConfig(t, tt.client)); status.Code(err) != codes.Unavailable {
				t.Errorf("health check: %v, want Unavailable", err)
			}
			waitFor(t, "failure counted", func() bool {
				return s.has(fmt.Sprintf("ratelimit_sidecar_tls_handshake_failures_total %d", i+1))
			})
			if logs := s.logs.String(); !strings.Contains(logs, `"msg":"tls handshake failed"`) || !strings.Contains(logs, tt.log) {
				t.Errorf("no Warn about a failed handshake with %q:\n%s", tt.log, logs)
			}
		})
	}
}

// TestRotation: the files change as cert-manager and the kubelet change a
// mounted Secret. New handshakes present the new certificate while a
// connection made before keeps working; a pair that does not load keeps
// the one in use, logged and counted; a new client CA is used.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca, nextCA := certtest.NewCA(t, dir, "ca"), certtest.NewCA(t, dir, "next-ca")
	first, second, third := ca.Issue(t, "first"), ca.Issue(t, "second"), nextCA.Issue(t, "third")
	envoy, nextEnvoy := ca.Issue(t, "envoy"), nextCA.Issue(t, "next-envoy")
	secretDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := certtest.NewSecretDir(t, secretDir, first.Secret(t, ca))
	s := start(t, grpctls.Options{CertFile: secret.Path("tls.crt"), KeyFile: secret.Path("tls.key"), ClientCAFile: secret.Path("ca.crt")})
	client := ca.ClientConfig(t, &envoy)
	old, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(client)))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if serial, err := callOn(t, old); err != nil || serial.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("before the rotation: serial %X, %v; want %X", serial, err, first.Cert.SerialNumber)
	}
	if want := fmt.Sprintf("ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds %g", float64(first.Cert.NotAfter.Unix())); !s.has(want) {
		t.Errorf("metrics lack %q", want)
	}

	secret.Update(t, second.Secret(t, ca))
	waitFor(t, "second certificate served", func() bool {
		serial, err := s.served(client)
		return err == nil && serial.Cmp(second.Cert.SerialNumber) == 0
	})
	if serial, err := callOn(t, old); err != nil || serial.Cmp(first.Cert.SerialNumber) != 0 {
		t.Errorf("the connection made before the rotation: serial %X, %v; want it still up, with %X", serial, err, first.Cert.SerialNumber)
	}
	if serial, err := s.call(t, client); err != nil || serial.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("a new gRPC client: serial %X, %v; want %X", serial, err, second.Cert.SerialNumber)
	}
	for _, want := range []string{
		fmt.Sprintf("ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds %g", float64(second.Cert.NotAfter.Unix())),
		`ratelimit_sidecar_tls_reloads_total{result="success"} 1`,
	} {
		if !s.has(want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// A key that is not the certificate's: the second pair stays.
	bad := third.Secret(t, ca)
	bad["tls.key"] = second.Secret(t, nil)["tls.key"]
	secret.Update(t, bad)
	waitFor(t, "failed reload", func() bool { return s.has("ratelimit_sidecar_tls_last_reload_successful 0") })
	if serial, err := s.served(client); err != nil || serial.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("after a bad pair: serial %X, %v; want the second, %X", serial, err, second.Cert.SerialNumber)
	}
	for _, want := range []string{
		fmt.Sprintf("ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds %g", float64(second.Cert.NotAfter.Unix())),
		`ratelimit_sidecar_tls_reloads_total{result="failure"} 1`,
	} {
		if !s.has(want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	var errorLines []string
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(line, `"level":"error"`) {
			errorLines = append(errorLines, line)
		}
	}
	if len(errorLines) != 1 || !strings.Contains(errorLines[0], "tls files did not load") ||
		!strings.Contains(errorLines[0], secret.Path("tls.crt")) || !strings.Contains(errorLines[0], "private key does not match public key") {
		t.Errorf("want one Error line naming the files and the reason; got:\n%s\n%s", strings.Join(errorLines, "\n"), s.logs.String())
	}

	// A new CA, and a pair it signed: clients of the new CA only.
	secret.Update(t, third.Secret(t, nextCA))
	nextClient := nextCA.ClientConfig(t, &nextEnvoy)
	waitFor(t, "third certificate served", func() bool {
		serial, err := s.served(nextClient)
		return err == nil && serial.Cmp(third.Cert.SerialNumber) == 0
	})
	if _, err := s.call(t, nextClient); err != nil {
		t.Errorf("a client of the new CA: %v", err)
	}
	if _, err := s.call(t, nextCA.ClientConfig(t, &envoy)); status.Code(err) != codes.Unavailable {
		t.Errorf("a client of the old CA: %v, want Unavailable", err)
	}
	if !s.has("ratelimit_sidecar_tls_last_reload_successful 1") {
		t.Error("metrics: the last reload is not reported successful")
	}
}

// TestHandshakeRate: at one handshake an hour, so a burst of one, of a
// few at once the first succeeds and the others, which would wait past
// the wait for their turn, fail at once.
func TestHandshakeRate(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	s := start(t, grpctls.Options{CertFile: pair.CertFile, KeyFile: pair.KeyFile, HandshakeRate: 1.0 / 3600})
	ok := 0
	for range n {
		conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cfg := ca.ClientConfig(t, nil)
		cfg.ServerName, cfg.NextProtos = "localhost", []string{"h2"}
		tc := tls.Client(conn, cfg)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() == nil {
			ok++
		}
		conn.Close()
	}
	if ok != 1 {
		t.Errorf("%d of %d handshakes succeeded, want 1", ok, n)
	}
}
