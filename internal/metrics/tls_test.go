package metrics_test

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

func TestTLS(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	if n, err := testutil.GatherAndCount(m.Registry, "ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds"); err != nil || n != 0 {
		t.Fatalf("before TLS: %d expiry series (%v), want none", n, err)
	}
	first := &x509.Certificate{NotAfter: time.Unix(1900000000, 0)}
	second := &x509.Certificate{NotAfter: time.Unix(1950000000, 0)}
	tm := m.TLS(first)
	tm.Reloaded(first, errors.New("tls.key: no such file"))
	tm.HandshakeFailed()
	tm.HandshakeFailed()
	want := `
# HELP ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds When the gRPC server's certificate in use expires (its NotAfter), in Unix seconds.
# TYPE ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds gauge
ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds 1.9e+09
# HELP ratelimit_sidecar_tls_last_reload_successful 0 after changed TLS files failed to load, 1 after they loaded (or none failed since start).
# TYPE ratelimit_sidecar_tls_last_reload_successful gauge
ratelimit_sidecar_tls_last_reload_successful 0
`
	names := []string{"ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds", "ratelimit_sidecar_tls_last_reload_successful"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	tm.Reloaded(second, nil)
	want = `
# HELP ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds When the gRPC server's certificate in use expires (its NotAfter), in Unix seconds.
# TYPE ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds gauge
ratelimit_sidecar_tls_certificate_expiry_timestamp_seconds 1.95e+09
# HELP ratelimit_sidecar_tls_last_reload_successful 0 after changed TLS files failed to load, 1 after they loaded (or none failed since start).
# TYPE ratelimit_sidecar_tls_last_reload_successful gauge
ratelimit_sidecar_tls_last_reload_successful 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	want = `
# HELP ratelimit_sidecar_tls_handshake_failures_total gRPC connections closed because their TLS handshake failed: plaintext, a client that does not trust the server certificate, no or a bad client certificate, a client SAN that did not match, or a handshake not done within --grpc-request-timeout.
# TYPE ratelimit_sidecar_tls_handshake_failures_total counter
ratelimit_sidecar_tls_handshake_failures_total 2
# HELP ratelimit_sidecar_tls_reloads_total Loads of changed TLS files (--grpc-tls-cert, --grpc-tls-key, --grpc-tls-client-ca), by result: success or failure (the files in use stay).
# TYPE ratelimit_sidecar_tls_reloads_total counter
ratelimit_sidecar_tls_reloads_total{result="failure"} 1
ratelimit_sidecar_tls_reloads_total{result="success"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "ratelimit_sidecar_tls_handshake_failures_total", "ratelimit_sidecar_tls_reloads_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(m.Registry, append(names, "ratelimit_sidecar_tls_handshake_failures_total", "ratelimit_sidecar_tls_reloads_total")...)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
