package metrics

import (
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"
)

// TLS records the gRPC listener's TLS: reloads of its files, the expiry of
// its certificate and failed handshakes. Its metrics exist only when TLS
// is on, so that an alert on the expiry never reads a certificate that is
// not there as one that expired in 1970.
type TLS struct {
	reloads        *prometheus.CounterVec
	lastSuccessful prometheus.Gauge
	expiry         prometheus.Gauge
	handshakes     prometheus.Counter
}

// TLS registers the TLS metrics, with leaf as the certificate in use.
// Call it once.
func (m *Metrics) TLS(leaf *x509.Certificate) *TLS {
	t := &TLS{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tls_reloads_total",
			Help: "Loads of changed TLS files (--grpc-tls-cert, --grpc-tls-key, --grpc-tls-client-ca), by result: success or failure (the files in use stay)."}, []string{"result"}),
		lastSuccessful: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "tls_last_reload_successful",
			Help: "0 after changed TLS files failed to load, 1 after they loaded (or none failed since start)."}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "tls_certificate_expiry_timestamp_seconds",
			Help: "When the gRPC server's certificate in use expires (its NotAfter), in Unix seconds."}),
		handshakes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "tls_handshake_failures_total",
			Help: "gRPC connections closed because their TLS handshake failed: plaintext, a client that does not trust the server certificate, no or a bad client certificate, a client SAN that did not match, or a handshake not done within --grpc-request-timeout."}),
	}
	m.Registry.MustRegister(t.reloads, t.lastSuccessful, t.expiry, t.handshakes)
	for _, r := range []string{"success", "failure"} {
		t.reloads.WithLabelValues(r)
	}
	t.lastSuccessful.Set(1)
	t.setExpiry(leaf)
	return t
}

// Reloaded records an attempt to load changed files; leaf is the
// certificate in use after it. It fits certreload.Options.OnReload.
func (t *TLS) Reloaded(leaf *x509.Certificate, err error) {
	if err != nil {
		t.reloads.WithLabelValues("failure").Inc()
		t.lastSuccessful.Set(0)
		return
	}
	t.reloads.WithLabelValues("success").Inc()
	t.lastSuccessful.Set(1)
	t.setExpiry(leaf)
}

// HandshakeFailed counts a failed handshake.
func (t *TLS) HandshakeFailed() { t.handshakes.Inc() }

func (t *TLS) setExpiry(leaf *x509.Certificate) {
	t.expiry.Set(float64(leaf.NotAfter.Unix()))
}
